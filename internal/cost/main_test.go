package cost_test

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/cost"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// TestMain points TestCostPerMillion at a local endpoint, starting moto_server when
// AWS_ENDPOINT_URL is unset.
func TestMain(m *testing.M) { os.Exit(awstest.Main(m)) }

// wired is the whole consumer (consumerapp) running the example the wiring names
// (exampletest.Example: EXAMPLE, or the wired default), on the template's resources with
// that example's block, created on the local endpoint: what the cost table meters.
type wired struct {
	ex  example.Example
	st  *exampletest.Stack
	ddb *dynamodb.Client
	cfg consumerapp.Config
	arn string // the input queue's
}

func newWired(t *testing.T) *wired {
	t.Helper()
	ex := exampletest.Example(t)
	st := exampletest.Up(t, ex)
	return &wired{ex: ex, st: st, ddb: st.DynamoDB, cfg: st.Config(t), arn: st.InputARN(t)}
}

// tables describes every table of the stack for the meter.
func (f *wired) tables(t *testing.T) map[string]cost.Table {
	t.Helper()
	out := map[string]cost.Table{}
	for _, r := range f.st.Env.Resources {
		if r.Type != stack.TypeTable {
			continue
		}
		tb, err := cost.Describe(context.Background(), f.ddb, r.Name)
		if err != nil {
			t.Fatal(err)
		}
		out[r.Name] = tb
	}
	return out
}

// messages returns n of the example's messages of run (its traffic, about two per
// group), with what they need in its tables, as Lambda delivers them.
func (f *wired) messages(t *testing.T, run string, n int) []events.SQSMessage {
	t.Helper()
	msgs := exampletest.Traffic(t, f.ex).Traffic(rand.New(rand.NewPCG(1, 2)), run, n, max(1, n/2))
	if err := example.Prepare(context.Background(), f.ex, f.ddb, f.st.Lookup, msgs); err != nil {
		t.Fatal(err)
	}
	return exampletest.Records(msgs, run+"-m-", f.arn)
}
