package cost_test

import (
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// TestMain points TestCostPerMillion at a local endpoint, starting moto_server when
// AWS_ENDPOINT_URL is unset.
func TestMain(m *testing.M) { os.Exit(awstest.Main(m)) }

// ledgerConsumer is the whole consumer (consumerapp) running the ledger example, on the
// template's resources with the ledger's block, created on the local endpoint: what the
// cost table meters.
type ledgerConsumer struct {
	st       *exampletest.Stack
	ddb      *dynamodb.Client
	cfg      consumerapp.Config
	table    string // LEDGER_TABLE
	receipts string // RECEIPTS_QUEUE_URL
}

func newLedger(t *testing.T) *ledgerConsumer {
	t.Helper()
	st := exampletest.Up(t, ledger.Example{})
	c := &ledgerConsumer{st: st, ddb: st.DynamoDB, table: st.Must(t, ledger.TableVar), receipts: st.Must(t, ledger.ReceiptsVar)}
	c.cfg = st.Config(t)
	return c
}
