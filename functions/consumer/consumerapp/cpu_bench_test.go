package consumerapp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// cpuGroups is the number of FIFO groups of every benchmark event: one record per
// group, so the 10 records run concurrently as on a busy queue.
const cpuGroups = 10

// BenchmarkConsumerCPU pushes 10-record FIFO events of the example's traffic (10 groups,
// fresh keys every iteration) through the consumer handler built as main.go builds it,
// against the local endpoint, as the Lambda runtime does (raw JSON in, raw JSON out).
// Each record is a first delivery: under mode=lease an acquire, the completion
// transaction and the mark that its outbound messages were sent; under
// mode=single-transaction the transaction and the mark; in both, the batch's outbound
// messages in one SendMessageBatch.
//
// Besides ns/op (one op = one 10-record invocation) it reports cpu-ns/msg: the user+sys
// CPU of this process (getrusage) per record, sys-ns/msg, the system part of it, and
// req/msg, the HTTP requests sent to the endpoint per record (retries included). The
// emulator runs in another process and is not counted. Logs and EMF lines are encoded as
// in production and discarded. Building each event and preparing the example for it
// (Prepare) run with the timer stopped and are not counted.
//
//	go test -run '^$' -bench ConsumerCPU -count 5 ./functions/consumer/consumerapp/
func BenchmarkConsumerCPU(b *testing.B) {
	for _, mode := range []idem.Mode{idem.ModeLease, idem.ModeSingleTransaction} {
		b.Run("mode="+mode.String(), func(b *testing.B) { consumerCPU(b, mode) })
	}
}

func consumerCPU(b *testing.B, mode idem.Mode) {
	// Configured like the template's defaults (MAX_CONCURRENCY 10).
	f := newFixture(b, map[string]string{"INFLIGHT_SHARDS": "4", "MAX_CONCURRENCY": "10", "CACHE_SIZE": "10000",
		"METRICS_NAMESPACE": "Bench", "IDEMPOTENCY_MODE": mode.String()})
	calls := awstest.NewCalls()
	h, err := consumerapp.New(f.cfg, consumerapp.Deps{
		DynamoDB: awstest.DynamoDB(b, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, calls.APIOption) }),
		SQS:      awstest.SQS(b, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, calls.APIOption) }),
		Logs:     io.Discard, Metrics: io.Discard, Owner: "bench",
	})
	if err != nil {
		b.Fatal(err)
	}
	handler := lambda.NewHandler(h)
	run := fmt.Sprintf("%x", time.Now().UnixNano())
	var seq int64
	next := func() []byte {
		seq++
		msgs := spread(b, f, fmt.Sprintf("%s-%d", run, seq), cpuGroups)
		recs := f.records(msgs, fmt.Sprintf("msg-%d-", seq))
		for i := range recs {
			recs[i].Attributes["SequenceNumber"] = strconv.FormatInt(seq*cpuGroups+int64(i), 10)
		}
		return exampletest.Encode(b, recs)
	}
	invoke := func(payload []byte) {
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
	invoke(next()) // warm up: connections

	calls.Reset()
	var user, sys time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		payload := next()
		user0, sys0 := cpuRusage(b)
		b.StartTimer()
		invoke(payload)
		b.StopTimer()
		user1, sys1 := cpuRusage(b)
		user, sys = user+user1-user0, sys+sys1-sys0
		b.StartTimer()
	}
	b.StopTimer()
	msgs := float64(b.N * cpuGroups)
	b.ReportMetric(float64(user+sys)/msgs, "cpu-ns/msg")
	b.ReportMetric(float64(sys)/msgs, "sys-ns/msg")
	b.ReportMetric(float64(calls.Total())/msgs, "req/msg")
}

// spread returns groups messages of the example's traffic of run, each in a group of
// its own, the example prepared for them.
func spread(tb testing.TB, f *fixture, run string, groups int) []example.Message {
	tb.Helper()
	out := exampletest.Spread(tb, f.ex, f.rng, run, groups)
	f.prepare(tb, out)
	return out
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
