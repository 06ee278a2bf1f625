package ledger_test

import (
	"bytes"
	"testing"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// consumer is the whole consumer (consumerapp) running the ledger, on the template's
// resources with the ledger's block, created on the local endpoint.
type consumer struct {
	st       *exampletest.Stack
	cfg      consumerapp.Config
	ddb      *dynamodb.Client
	sqs      *sqs.Client
	table    string // LEDGER_TABLE
	receipts string // RECEIPTS_QUEUE_URL
	logs     bytes.Buffer
	emf      bytes.Buffer
}

func newConsumer(t *testing.T) *consumer {
	t.Helper()
	st := exampletest.Up(t, ledger.Example{})
	c := &consumer{st: st, ddb: st.DynamoDB, sqs: st.SQS, table: st.Must(t, ledger.TableVar), receipts: st.Must(t, ledger.ReceiptsVar)}
	c.cfg = c.configWith(t, nil)
	if c.cfg.Example.Name() != (ledger.Example{}).Name() {
		t.Fatalf("the consumer runs example %s, want the ledger", c.cfg.Example.Name())
	}
	return c
}

// configWith is the consumer's configuration read from the stack's variables with vars
// changed, as the function reads it.
func (c *consumer) configWith(t *testing.T, vars map[string]string) consumerapp.Config {
	t.Helper()
	// The ledger, wired or not: these are its own tests.
	return c.st.Config(t, vars)
}

// handler builds the consumer exactly as main.go does.
func (c *consumer) handler(t *testing.T) lambda.Handler {
	t.Helper()
	h, err := consumerapp.New(c.cfg, consumerapp.Deps{DynamoDB: c.ddb, SQS: c.sqs, Logs: &c.logs, Metrics: &c.emf, Owner: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	return lambda.NewHandler(h)
}

func (c *consumer) balances(t *testing.T) map[string]int64 {
	t.Helper()
	return balances(t, c.ddb, c.table)
}
