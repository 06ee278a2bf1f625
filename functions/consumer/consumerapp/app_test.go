package consumerapp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

func TestMain(m *testing.M) { os.Exit(awstest.Main(m)) }

// fixture is one consumer's resources on the local endpoint, with unique names.
type fixture struct {
	cfg  consumerapp.Config
	ddb  *dynamodb.Client
	sqs  *sqs.Client
	logs bytes.Buffer
	emf  bytes.Buffer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{ddb: awstest.DynamoDB(t), sqs: awstest.SQS(t)}
	f.cfg = consumerapp.Config{
		IdempotencyTable: awstest.Name(t, "idem"), LedgerTable: awstest.Name(t, "ledger"),
		Scope: "payments", TTL: time.Hour, LeaseGrace: 5 * time.Second, Shards: 2, Concurrency: 4,
		DeadlineMargin: 2 * time.Second, CacheSize: 100, KeyField: "payment_id", MetricsNamespace: "Test",
	}
	if err := idem.CreateTable(ctx, f.ddb, f.cfg.IdempotencyTable); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(f.cfg.LedgerTable),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("account_id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("account_id"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		t.Fatal(err)
	}
	f.cfg.DLQURL = f.queue(t, "dlq")
	f.cfg.ReceiptsQueueURL = f.queue(t, "rcpt")
	return f
}

func (f *fixture) queue(t *testing.T, prefix string) string {
	t.Helper()
	out, err := f.sqs.CreateQueue(context.Background(), &sqs.CreateQueueInput{
		QueueName:  aws.String(awstest.Name(t, prefix) + ".fifo"),
		Attributes: map[string]string{"FifoQueue": "true"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.QueueUrl)
}

// handler builds the consumer exactly as main.go does, with dyn wrapping DynamoDB.
func (f *fixture) handler(t *testing.T, wrap func(idem.DynamoDBAPI) idem.DynamoDBAPI) lambda.Handler {
	t.Helper()
	var ddb idem.DynamoDBAPI = f.ddb
	if wrap != nil {
		ddb = wrap(ddb)
	}
	h, err := consumerapp.New(f.cfg, consumerapp.Deps{DynamoDB: ddb, SQS: f.sqs, Logs: &f.logs, Metrics: &f.emf, Owner: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	return lambda.NewHandler(h)
}

// invoke pushes raw event JSON through the handler as the Lambda runtime does.
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

func readEvent(t *testing.T, name string) (raw []byte, ev events.SQSEvent) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "events", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	return raw, ev
}

func encode(t *testing.T, recs []events.SQSMessage) []byte {
	t.Helper()
	b, err := json.Marshal(events.SQSEvent{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (f *fixture) balances(t *testing.T) map[string]int64 {
	t.Helper()
	b, err := ledger.Balances(context.Background(), f.ddb, f.cfg.LedgerTable)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// drain receives every message of a queue (deleting nothing; they stay invisible).
func (f *fixture) drain(t *testing.T, url string) []sqstypes.Message {
	t.Helper()
	var all []sqstypes.Message
	for {
		out, err := f.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
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

// TestSampleEvents pushes each events/ file through the real handler and checks the
// batch response, the ledger, the receipts and the DLQ against events/README.md.
func TestSampleEvents(t *testing.T) {
	tests := []struct {
		file     string
		want     map[string]int64
		receipts int
		dlq      int
	}{
		{"sqs-fifo-batch.json", map[string]int64{"acct-1001": 1750, "acct-2002": 5000, "acct-3003": 1000}, 8, 0},
		{"sqs-duplicates-malformed.json", map[string]int64{"acct-4004": 1250, "acct-5005": 4000}, 3, 1},
		{"sqs-standard-batch.json", map[string]int64{"acct-6006": 3000, "acct-7007": 5000}, 5, 0},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			h := f.handler(t, nil)
			raw, _ := readEvent(t, tc.file)
			for round := range 2 { // the second round is a full redelivery: nothing may move
				if failed := invoke(t, h, context.Background(), raw); len(failed) != 0 {
					t.Fatalf("round %d: batch item failures %v", round+1, failed)
				}
				if got := f.balances(t); !maps.Equal(got, tc.want) {
					t.Fatalf("round %d: balances %v, want %v", round+1, got, tc.want)
				}
			}
			if n := len(f.drain(t, f.cfg.ReceiptsQueueURL)); n != tc.receipts {
				t.Errorf("receipts: %d, want %d", n, tc.receipts)
			}
			dlq := f.drain(t, f.cfg.DLQURL)
			if len(dlq) != tc.dlq {
				t.Fatalf("DLQ: %d messages, want %d", len(dlq), tc.dlq)
			}
			for _, m := range dlq {
				reason := aws.ToString(m.MessageAttributes[idem.DLQReasonAttribute].StringValue)
				if !strings.Contains(reason, "permanent") || m.Attributes["MessageGroupId"] != "acct-9009" {
					t.Errorf("DLQ message: reason %q, group %q", reason, m.Attributes["MessageGroupId"])
				}
			}
			if strings.Contains(f.logs.String(), "amount_cents") {
				t.Error("logs contain payload bytes")
			}
		})
	}
}

// throttleOnce fails the completion transaction of one payment once, as a DynamoDB
// throttle would, after the SDK's retries gave up.
type throttleOnce struct {
	idem.DynamoDBAPI
	payment string
	done    atomic.Bool
}

func (d *throttleOnce) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	for _, it := range in.TransactItems {
		if it.Update == nil {
			continue
		}
		for _, v := range it.Update.ExpressionAttributeValues {
			if s, ok := v.(*types.AttributeValueMemberS); ok && s.Value == d.payment && d.done.CompareAndSwap(false, true) {
				return nil, &smithy.GenericAPIError{Code: "ProvisionedThroughputExceededException", Message: "injected throttle"}
			}
		}
	}
	return d.DynamoDBAPI.TransactWriteItems(ctx, in, o...)
}

// TestFIFOGroupStopsAtFirstFailure: group A's second payment fails (throttled), so A's
// third is reported unprocessed without running, group B completes; SQS redelivers A2
// and A3 and the ledger ends exact.
func TestFIFOGroupStopsAtFirstFailure(t *testing.T) {
	f := newFixture(t)
	_, ev := readEvent(t, "sqs-fifo-batch.json")
	recs := ev.Records // acct-1001 x3, acct-2002 x3, acct-3003 x2
	a2 := recs[1]
	var p ledger.Payment
	if err := json.Unmarshal([]byte(a2.Body), &p); err != nil {
		t.Fatal(err)
	}
	h := f.handler(t, func(d idem.DynamoDBAPI) idem.DynamoDBAPI { return &throttleOnce{DynamoDBAPI: d, payment: p.PaymentID} })
	failed := invoke(t, h, context.Background(), encode(t, recs))
	if want := []string{recs[1].MessageId, recs[2].MessageId}; !slices.Equal(failed, want) {
		t.Fatalf("failures %v, want A2, A3 %v", failed, want)
	}
	if got := f.balances(t); got["acct-1001"] != 1000 || got["acct-2002"] != 5000 || got["acct-3003"] != 1000 {
		t.Fatalf("after first delivery: %v", got)
	}
	// SQS redelivers the failed records (A1 was deleted).
	if failed := invoke(t, h, context.Background(), encode(t, recs[1:3])); len(failed) != 0 {
		t.Fatalf("redelivery failures %v", failed)
	}
	want := map[string]int64{"acct-1001": 1750, "acct-2002": 5000, "acct-3003": 1000}
	if got := f.balances(t); !maps.Equal(got, want) {
		t.Fatalf("after redelivery: %v, want %v", got, want)
	}
	if n := len(f.drain(t, f.cfg.ReceiptsQueueURL)); n != 8 {
		t.Fatalf("receipts: %d, want 8", n)
	}
}

// TestDuplicatesAcrossBatches: the same payments arrive in three batches (with new
// message ids, as after the FIFO dedup window) and concurrently: each is credited once.
func TestDuplicatesAcrossBatches(t *testing.T) {
	f := newFixture(t)
	h := f.handler(t, nil)
	_, ev := readEvent(t, "sqs-fifo-batch.json")
	var other []events.SQSMessage
	for _, r := range ev.Records {
		r.MessageId = "redelivered-" + r.MessageId
		other = append(other, r)
	}
	done := make(chan []string, 3)
	for _, batch := range [][]events.SQSMessage{ev.Records, other, ev.Records} {
		go func() { done <- invoke(t, h, context.Background(), encode(t, batch)) }()
	}
	retry := map[string]bool{}
	for range 3 {
		for _, id := range <-done {
			retry[id] = true
		}
	}
	// Records refused as in progress (another batch held the key) are redelivered.
	var again []events.SQSMessage
	for _, r := range append(slices.Clone(ev.Records), other...) {
		if retry[r.MessageId] {
			again = append(again, r)
		}
	}
	if len(again) > 0 {
		if failed := invoke(t, h, context.Background(), encode(t, again)); len(failed) != 0 {
			t.Fatalf("redelivery failures %v", failed)
		}
	}
	want := map[string]int64{"acct-1001": 1750, "acct-2002": 5000, "acct-3003": 1000}
	if got := f.balances(t); !maps.Equal(got, want) {
		t.Fatalf("balances %v, want %v", got, want)
	}
	seen := map[string]int{}
	for _, m := range f.drain(t, f.cfg.ReceiptsQueueURL) {
		var r ledger.Receipt
		_ = json.Unmarshal([]byte(aws.ToString(m.Body)), &r)
		seen[r.PaymentID]++
	}
	if len(seen) != 8 {
		t.Fatalf("receipts for %d payments, want 8: %v", len(seen), seen)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("payment %s: %d receipts", id, n)
		}
	}
}

// TestDeadlineMargin: with the deadline closer than the margin no record starts and all
// are reported as failures; nothing is credited.
func TestDeadlineMargin(t *testing.T) {
	f := newFixture(t)
	h := f.handler(t, nil)
	raw, ev := readEvent(t, "sqs-fifo-batch.json")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // margin is 2s
	defer cancel()
	failed := invoke(t, h, ctx, raw)
	if len(failed) != len(ev.Records) {
		t.Fatalf("%d failures, want all %d", len(failed), len(ev.Records))
	}
	if got := f.balances(t); len(got) != 0 {
		t.Fatalf("credited near the deadline: %v", got)
	}
}

// TestStoreDownFailsClosed: with DynamoDB unreachable every record is reported for
// redelivery, nothing is dead-lettered and no receipt is sent.
func TestStoreDownFailsClosed(t *testing.T) {
	f := newFixture(t)
	h := f.handler(t, func(idem.DynamoDBAPI) idem.DynamoDBAPI { return down{} })
	raw, ev := readEvent(t, "sqs-fifo-batch.json")
	failed := invoke(t, h, context.Background(), raw)
	// The first record of each group fails and the rest of the group is skipped.
	if len(failed) != len(ev.Records) {
		t.Fatalf("%d failures, want %d", len(failed), len(ev.Records))
	}
	if n := len(f.drain(t, f.cfg.ReceiptsQueueURL)) + len(f.drain(t, f.cfg.DLQURL)); n != 0 {
		t.Fatalf("%d messages sent while the store was down", n)
	}
}

type down struct{ idem.DynamoDBAPI }

var errDown = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

func (down) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return nil, errDown
}

func TestFromEnv(t *testing.T) {
	env := map[string]string{"IDEMPOTENCY_TABLE": "i", "LEDGER_TABLE": "l", "DLQ_URL": "d", "RECEIPTS_QUEUE_URL": "r", "IDEMPOTENCY_TTL": "2h", "INFLIGHT_SHARDS": "8"}
	lookup := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	cfg, err := consumerapp.FromEnv(lookup(env))
	if err != nil || cfg.TTL != 2*time.Hour || cfg.Shards != 8 || cfg.Scope != "payments" || cfg.LeaseGrace != 30*time.Second || cfg.Mode != idem.ModeLease {
		t.Fatalf("cfg=%+v err=%v", cfg, err)
	}
	env["IDEMPOTENCY_MODE"] = "single-transaction"
	if cfg, err := consumerapp.FromEnv(lookup(env)); err != nil || cfg.Mode != idem.ModeSingleTransaction {
		t.Fatalf("IDEMPOTENCY_MODE=single-transaction: cfg=%+v err=%v", cfg, err)
	}
	_, err = consumerapp.FromEnv(lookup(map[string]string{"IDEMPOTENCY_TTL": "soon", "INFLIGHT_SHARDS": "0", "IDEMPOTENCY_MODE": "fast"}))
	for _, want := range []string{"IDEMPOTENCY_TABLE is not set", "LEDGER_TABLE", "DLQ_URL", "RECEIPTS_QUEUE_URL", `IDEMPOTENCY_TTL="soon"`, `INFLIGHT_SHARDS="0"`, `IDEMPOTENCY_MODE="fast" is not one of lease, single-transaction`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %s", err, want)
		}
	}
}
