package ledger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

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
	env := map[string]string{}
	for _, v := range st.Env.Vars {
		env[v.Name] = v.Value
	}
	maps.Copy(env, map[string]string{
		"IDEMPOTENCY_TTL": "1h", "LEASE_GRACE": "5s", "INFLIGHT_SHARDS": "2", "MAX_CONCURRENCY": "4",
		"DEADLINE_MARGIN": "2s", "CACHE_SIZE": "100", "METRICS_NAMESPACE": "Test",
	})
	cfg, err := consumerapp.FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Example.Name() != (ledger.Example{}).Name() {
		t.Fatalf("the consumer runs example %s, want the ledger", cfg.Example.Name())
	}
	c.cfg = cfg
	return c
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

// invoke pushes raw event JSON through the handler as the Lambda runtime does and
// returns the message ids of the batch item failures.
func invoke(t *testing.T, h lambda.Handler, ctx context.Context, payload []byte) []string {
	t.Helper()
	out, err := h.Invoke(ctx, payload)
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("response %s: %v", out, err)
	}
	ids := []string{}
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

func encode(t *testing.T, recs []events.SQSMessage) []byte {
	t.Helper()
	b, err := json.Marshal(events.SQSEvent{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (c *consumer) balances(t *testing.T) map[string]int64 {
	t.Helper()
	b, err := ledger.Balances(context.Background(), c.ddb, c.table)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// drain receives every message of a queue (deleting nothing; they stay invisible).
func (c *consumer) drain(t *testing.T, url string) []sqstypes.Message {
	t.Helper()
	var all []sqstypes.Message
	for {
		out, err := c.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 60,
			MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{"All"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			return all
		}
		all = append(all, out.Messages...)
	}
}

// sqsRecord is a record as Lambda's event source mapping delivers it from a FIFO queue.
func sqsRecord(id, group, body string, attrs map[string]events.SQSMessageAttribute) events.SQSMessage {
	return events.SQSMessage{
		MessageId:     id,
		ReceiptHandle: "handle-" + id,
		Body:          body,
		Attributes: map[string]string{
			"ApproximateReceiveCount": "1", "SentTimestamp": "1763632961530", "SequenceNumber": "18889596386470770358",
			"MessageGroupId": group, "SenderId": "AROA3XFRBF23EXAMPLE7:payments-api",
			"ApproximateFirstReceiveTimestamp": "1763633743741",
		},
		MessageAttributes: attrs,
		EventSource:       "aws:sqs",
		EventSourceARN:    "arn:aws:sqs:us-east-1:123456789012:input.fifo",
		AWSRegion:         "us-east-1",
	}
}
