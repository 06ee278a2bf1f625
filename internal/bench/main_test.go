package bench_test

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

func TestMain(m *testing.M) { os.Exit(awstest.Main(m)) }

// consumer is one consumer of the wired example (or the one EXAMPLE names) on the
// template's resources, created on the local endpoint under a stack name of its own, as
// consumerapp's tests build theirs.
type consumer struct {
	ex       example.Example
	st       *exampletest.Stack
	cfg      consumerapp.Config
	inputARN string     // the consumer's input queue (QUEUE_URL)
	rng      *rand.Rand // the example's traffic
	// outbound is the queue of the example's outbound messages, outboundVar its variable
	// ("": the example sends none).
	outbound, outboundVar string
}

// newConsumer creates the resources and reads the configuration with consumerapp.FromEnv
// from the template's environment, exampletest.TestEnv and overrides on top.
func newConsumer(tb testing.TB, overrides map[string]string) *consumer {
	tb.Helper()
	ex := exampletest.Example(tb)
	st := exampletest.Up(tb, ex)
	c := &consumer{ex: ex, st: st, inputARN: st.InputARN(tb), rng: rand.New(rand.NewPCG(1, 2))}
	c.cfg = c.config(tb, overrides)
	if _, c.outboundVar = exampletest.Confirms(ex); c.outboundVar != "" {
		c.outbound = st.Must(tb, c.outboundVar)
	}
	return c
}

// config is consumerapp.FromEnv of the functions' environment with exampletest.TestEnv
// and overrides on top.
func (c *consumer) config(tb testing.TB, overrides map[string]string) consumerapp.Config {
	tb.Helper()
	cfg, err := consumerapp.FromEnv(exampletest.LookupIn(c.st.Vars(exampletest.TestEnv, overrides)))
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// prepare prepares the example for msgs (example.Prepare).
func (c *consumer) prepare(tb testing.TB, msgs []example.Message) {
	tb.Helper()
	if err := example.Prepare(context.Background(), c.ex, c.st.DynamoDB, c.st.Lookup, msgs); err != nil {
		tb.Fatal(err)
	}
}
