package consumerapp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// cpuGroups is the number of FIFO groups (accounts) of every benchmark event: one
// record per group, so the 10 records run concurrently as on a busy queue.
const cpuGroups = 10

// BenchmarkConsumerCPU pushes 10-record FIFO events (10 groups, fresh keys every
// iteration) through the consumer handler built as main.go builds it, against the local
// endpoint, as the Lambda runtime does (raw JSON in, raw JSON out). Each record is a
// first delivery: under mode=lease an acquire, the completion transaction and the mark
// that its receipt was sent; under mode=single-transaction the transaction and the mark;
// in both, the batch's receipts in one SendMessageBatch.
//
// Besides ns/op (one op = one 10-record invocation) it reports cpu-ns/msg: the user+sys
// CPU of this process (getrusage) per record, sys-ns/msg, the system part of it, and
// req/msg, the HTTP requests sent to the endpoint per record (retries included). The
// emulator runs in another process and is not counted. Logs and EMF lines are encoded as
// in production and discarded. Building each event (JSON) is counted: a few µs/msg.
//
//	go test -run '^$' -bench ConsumerCPU -count 5 ./functions/consumer/consumerapp/
func BenchmarkConsumerCPU(b *testing.B) {
	for _, mode := range []idem.Mode{idem.ModeLease, idem.ModeSingleTransaction} {
		b.Run("mode="+mode.String(), func(b *testing.B) { consumerCPU(b, mode) })
	}
}

func consumerCPU(b *testing.B, mode idem.Mode) {
	cfg := cpuResources(b)
	cfg.Mode = mode
	calls := awstest.NewCalls()
	h, err := consumerapp.New(cfg, consumerapp.Deps{
		DynamoDB: awstest.DynamoDB(b, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, calls.APIOption) }),
		SQS:      awstest.SQS(b, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, calls.APIOption) }),
		Logs:     io.Discard, Metrics: io.Discard, Owner: "bench",
	})
	if err != nil {
		b.Fatal(err)
	}
	handler := lambda.NewHandler(h)
	tmpl := cpuTemplate(b)
	run := fmt.Sprintf("%x", time.Now().UnixNano())
	var seq int64
	invoke := func() {
		seq++
		payload := cpuEvent(b, tmpl, run, seq)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: fmt.Sprintf("req-%s-%d", run, seq)})
		out, err := handler.Invoke(ctx, payload)
		if err != nil {
			b.Fatal(err)
		}
		var resp events.SQSEventResponse
		if err := json.Unmarshal(out, &resp); err != nil || len(resp.BatchItemFailures) != 0 {
			b.Fatalf("response %s (%v): want no batch item failures", out, err)
		}
	}
	invoke() // warm up: connections, the accounts' ledger items

	calls.Reset()
	user0, sys0 := cpuRusage(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		invoke()
	}
	b.StopTimer()
	user1, sys1 := cpuRusage(b)
	msgs := float64(b.N * cpuGroups)
	b.ReportMetric(float64((user1-user0)+(sys1-sys0))/msgs, "cpu-ns/msg")
	b.ReportMetric(float64(sys1-sys0)/msgs, "sys-ns/msg")
	b.ReportMetric(float64(calls.Total())/msgs, "req/msg")
}

// cpuRusage returns the user and the system CPU time of this process so far.
func cpuRusage(tb testing.TB) (user, sys time.Duration) {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// cpuResources creates the consumer's tables and queues with unique names, configured
// like the template's defaults (MAX_CONCURRENCY 10).
func cpuResources(tb testing.TB) consumerapp.Config {
	tb.Helper()
	ctx := context.Background()
	ddb, q := awstest.DynamoDB(tb), awstest.SQS(tb)
	cfg := consumerapp.Config{
		IdempotencyTable: awstest.Name(tb, "idem"), LedgerTable: awstest.Name(tb, "ledger"),
		Scope: "payments", TTL: time.Hour, LeaseGrace: 5 * time.Second, Shards: 4, Concurrency: 10,
		DeadlineMargin: 2 * time.Second, CacheSize: 10000, KeyField: "payment_id", MetricsNamespace: "Bench",
	}
	if err := idem.CreateTable(ctx, ddb, cfg.IdempotencyTable); err != nil {
		tb.Fatal(err)
	}
	if _, err := ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(cfg.LedgerTable),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("account_id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("account_id"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		tb.Fatal(err)
	}
	for _, p := range []struct {
		prefix string
		url    *string
	}{{"dlq", &cfg.DLQURL}, {"rcpt", &cfg.ReceiptsQueueURL}} {
		out, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{
			QueueName:  aws.String(awstest.Name(tb, p.prefix) + ".fifo"),
			Attributes: map[string]string{"FifoQueue": "true"},
		})
		if err != nil {
			tb.Fatal(err)
		}
		*p.url = aws.ToString(out.QueueUrl)
	}
	return cfg
}

// cpuTemplate is the first record of events/sqs-fifo-batch.json: a FIFO record as
// Lambda delivers it, which cpuEvent copies with new ids.
func cpuTemplate(tb testing.TB) events.SQSMessage {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "events", "sqs-fifo-batch.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var ev events.SQSEvent
	if err := json.Unmarshal(raw, &ev); err != nil || len(ev.Records) == 0 {
		tb.Fatalf("events/sqs-fifo-batch.json: %v", err)
	}
	return ev.Records[0]
}

// cpuEvent returns the JSON of an event of cpuGroups records, one per account, each
// a new payment (key payment:<id>) of invocation n of run.
func cpuEvent(tb testing.TB, tmpl events.SQSMessage, run string, n int64) []byte {
	tb.Helper()
	recs := make([]events.SQSMessage, cpuGroups)
	for g := range recs {
		id := fmt.Sprintf("pay-%s-%d-%d", run, n, g)
		account := "acct-bench-" + strconv.Itoa(g)
		key := "payment:" + id
		body, err := json.Marshal(map[string]any{"payment_id": id, "account_id": account, "amount_cents": 100 + g, "currency": "EUR"})
		if err != nil {
			tb.Fatal(err)
		}
		r := tmpl
		r.MessageId = fmt.Sprintf("msg-%s-%d-%d", run, n, g)
		r.Body = string(body)
		r.Attributes = map[string]string{}
		for k, v := range tmpl.Attributes {
			r.Attributes[k] = v
		}
		r.Attributes["MessageGroupId"] = account
		r.Attributes["MessageDeduplicationId"] = key
		r.Attributes["SequenceNumber"] = strconv.FormatInt(n*cpuGroups+int64(g), 10)
		r.MessageAttributes = map[string]events.SQSMessageAttribute{
			idem.KeyAttribute: {DataType: "String", StringValue: aws.String(key), StringListValues: []string{}, BinaryListValues: [][]byte{}},
		}
		recs[g] = r
	}
	b, err := json.Marshal(events.SQSEvent{Records: recs})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
