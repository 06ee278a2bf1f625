package bench_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/faults"
)

// Batch latency: how long the consumer takes to process one 10-message FIFO batch when
// every call to the emulator (DynamoDB and SQS) pays a network round trip. A toxiproxy
// (internal/faults.TCP) in front of moto delays every answer by batchLatencyDelay; the
// consumer's clients go through it. Four batch shapes, each message a first delivery
// (fresh keys every iteration), with the added latency and without it (+0: what the
// emulator itself costs):
//
//   - 10groups:   10 messages in 10 FIFO groups, Concurrency 10: the groups run at once;
//   - 1group:     10 messages in 1 group: they must run one after another;
//   - sequential: the 10-group batch with Concurrency 1, the baseline;
//   - 1msg:       one message alone: the critical path of one record.
//
// The benchmark runs every shape in both modes (mode=lease, mode=single-transaction),
// each with an environment of its own. The benchmark (ms/batch) runs with -bench; TestBatchLatencyTable prints the table
// when BATCH_LATENCY_TABLE=1 (BATCH_LATENCY_ITERS, default 10).
//
//	go test -run '^$' -bench BatchLatency -benchtime 20x ./internal/bench/
//	BATCH_LATENCY_TABLE=1 go test -count=1 -v -run TestBatchLatencyTable ./internal/bench/

// batchLatencyDelay is the latency the proxy adds to every answer of the emulator.
const batchLatencyDelay = 10 * time.Millisecond

// latencyEnv is a consumer stack on the emulator whose clients go through a proxy.
type latencyEnv struct {
	f     *consumer // the resources, created directly on the emulator
	tcp   *faults.TCP
	ddb   *dynamodb.Client // through the proxy
	sqs   *sqs.Client      // through the proxy
	calls *awstest.Calls   // every attempt of both clients
	times *opTimes         // duration of every attempt of both clients
	run   string
	seq   int
}

func newLatencyEnv(tb testing.TB) *latencyEnv {
	tb.Helper()
	e := &latencyEnv{calls: awstest.NewCalls(), times: &opTimes{}, run: strings.ReplaceAll(awstest.Name(tb, "lat"), "-", "")}
	e.f = newConsumer(tb, map[string]string{"MAX_CONCURRENCY": "10", "METRICS_NAMESPACE": "Bench"})
	p, err := faults.NewTCP(awstest.Endpoint(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	e.tcp = p
	cfg := awstest.ConfigFor(tb, p.URL())
	e.ddb = dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, e.calls.APIOption, e.times.apiOption)
	})
	e.sqs = sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, e.calls.APIOption, e.times.apiOption) })
	return e
}

// opTimes records how long each HTTP attempt takes, by operation (signing to the end of
// the answer's deserialization: the round trip and the emulator's service time).
type opTimes struct {
	mu     sync.Mutex
	ops    map[string][]time.Duration
	errors []string // failed attempts: operation and error
}

func (o *opTimes) apiOption(stack *middleware.Stack) error {
	return stack.Finalize.Insert(middleware.FinalizeMiddlewareFunc("latencybench.opTimes",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			start := time.Now()
			out, md, err := next.HandleFinalize(ctx, in)
			d := time.Since(start)
			o.mu.Lock()
			if o.ops == nil {
				o.ops = map[string][]time.Duration{}
			}
			op := awsmiddleware.GetOperationName(ctx)
			o.ops[op] = append(o.ops[op], d)
			if err != nil {
				o.errors = append(o.errors, fmt.Sprintf("%s after %s: %v", op, d.Round(time.Millisecond), err))
			}
			o.mu.Unlock()
			return out, md, err
		}), "Retry", middleware.After)
}

// take returns the durations recorded since the last take, by operation.
func (o *opTimes) take() map[string][]time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.ops
	o.ops = nil
	return m
}

// failed returns the failed attempts recorded so far.
func (o *opTimes) failed() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.errors)
}

// outboundQueue creates a queue like the example's outbound queue (FIFO or not)
// directly on the emulator.
func (e *latencyEnv) outboundQueue(tb testing.TB) string {
	tb.Helper()
	ctx := context.Background()
	attrs, err := e.f.st.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(e.f.outbound), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
	})
	if err != nil {
		tb.Fatal(err)
	}
	in := &sqs.CreateQueueInput{QueueName: aws.String(awstest.Name(tb, "out")), Attributes: map[string]string{}}
	if attrs.Attributes["FifoQueue"] == "true" {
		in.QueueName = aws.String(*in.QueueName + ".fifo")
		in.Attributes["FifoQueue"] = "true"
		if v := attrs.Attributes["ContentBasedDeduplication"]; v != "" {
			in.Attributes["ContentBasedDeduplication"] = v
		}
	}
	out, err := e.f.st.SQS.CreateQueue(ctx, in)
	if err != nil {
		tb.Fatal(err)
	}
	return aws.ToString(out.QueueUrl)
}

// setLatency replaces the proxy's toxics with a downstream latency of d (none for 0):
// every call then takes at least d more.
func (e *latencyEnv) setLatency(tb testing.TB, d time.Duration) {
	tb.Helper()
	e.tcp.Clear()
	if d > 0 {
		if err := e.tcp.Latency("rtt", faults.Downstream, d, 0, 1); err != nil {
			tb.Fatal(err)
		}
	}
}

// handler builds the consumer as main.go does, with an outbound queue of its own (so
// queues do not grow across cases) and the given concurrency.
func (e *latencyEnv) handler(tb testing.TB, concurrency int, mode idem.Mode) consumerapp.Handler {
	tb.Helper()
	env := map[string]string{"MAX_CONCURRENCY": strconv.Itoa(concurrency), "METRICS_NAMESPACE": "Bench", "IDEMPOTENCY_MODE": mode.String()}
	if e.f.outbound != "" {
		env[e.f.outboundVar] = e.outboundQueue(tb)
	}
	h, err := consumerapp.New(e.f.config(tb, env), consumerapp.Deps{DynamoDB: e.ddb, SQS: e.sqs, Logs: io.Discard, Metrics: io.Discard, Owner: "latency-bench"})
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// event returns a FIFO event of n new messages of the example's traffic over the given
// number of groups, each group used when n allows it, the example prepared for them.
func (e *latencyEnv) event(tb testing.TB, groups, n int) events.SQSEvent {
	tb.Helper()
	e.seq++
	run := fmt.Sprintf("%s%d", e.run, e.seq)
	var msgs []example.Message
	if groups >= n {
		msgs = exampletest.Spread(tb, e.f.ex, e.f.rng, run, n)
	} else {
		msgs = exampletest.Traffic(tb, e.f.ex).Traffic(e.f.rng, run, n, groups)
	}
	e.f.prepare(tb, msgs)
	ev := events.SQSEvent{Records: exampletest.Records(msgs, fmt.Sprintf("m-%s-", run), e.f.inputARN)}
	for i := range ev.Records {
		ev.Records[i].Attributes["SequenceNumber"] = strconv.Itoa(e.seq*100 + i)
	}
	return ev
}

// timeBatch processes ev and returns how long it took; every record must succeed.
func timeBatch(tb testing.TB, h consumerapp.Handler, ev events.SQSEvent) time.Duration {
	tb.Helper()
	start := time.Now()
	resp, err := h(context.Background(), ev)
	d := time.Since(start)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		tb.Fatalf("batch: failures %v, error %v", resp.BatchItemFailures, err)
	}
	return d
}

// rtt returns the median time of a DynamoDB GetItem through the proxy.
func (e *latencyEnv) rtt(tb testing.TB, n int) time.Duration {
	tb.Helper()
	var d []time.Duration
	for range n {
		start := time.Now()
		if _, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{
			TableName: aws.String(e.f.cfg.IdempotencyTable),
			Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "rtt"}},
		}); err != nil {
			tb.Fatal(err)
		}
		d = append(d, time.Since(start))
	}
	return median(d)
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// batchCase is one batch shape.
type batchCase struct {
	name        string
	groups, n   int
	concurrency int
}

var batchCases = []batchCase{
	{"10groups", 10, 10, 10},
	{"1group", 1, 10, 10},
	{"sequential", 10, 10, 1},
	{"1msg", 1, 1, 10},
}

func BenchmarkBatchLatency(b *testing.B) {
	for _, mode := range []idem.Mode{idem.ModeLease, idem.ModeSingleTransaction} {
		b.Run("mode="+mode.String(), func(b *testing.B) { batchLatency(b, mode) })
	}
}

func batchLatency(b *testing.B, mode idem.Mode) {
	e := newLatencyEnv(b)
	for _, lat := range []time.Duration{batchLatencyDelay, 0} {
		b.Run("lat="+lat.String(), func(b *testing.B) {
			e.setLatency(b, lat)
			b.Run("rtt", func(b *testing.B) {
				for b.Loop() {
					e.rtt(b, 1)
				}
				b.ReportMetric(ms(b.Elapsed())/float64(b.N), "ms/call")
			})
			for _, c := range batchCases {
				b.Run(c.name, func(b *testing.B) {
					h := e.handler(b, c.concurrency, mode)
					timeBatch(b, h, e.event(b, c.groups, c.n)) // warm up: connections, first writes
					evs := make([]events.SQSEvent, b.N)
					for i := range evs {
						evs[i] = e.event(b, c.groups, c.n)
					}
					e.calls.Reset()
					b.ResetTimer()
					for i := range evs {
						timeBatch(b, h, evs[i])
					}
					b.StopTimer()
					b.ReportMetric(ms(b.Elapsed())/float64(b.N), "ms/batch")
					b.ReportMetric(float64(e.calls.Total())/float64(b.N*c.n), "calls/msg")
				})
			}
		})
	}
}

// TestBatchLatencyTable prints the batch latencies with and without the added latency,
// the cases interleaved so that they see the same emulator state, and the time of each
// call (attempt) by operation: alone (1 message) and in the 10-group batch, where the
// difference is time spent queueing in the emulator. It runs only when
// BATCH_LATENCY_TABLE is set: it is a measurement, not a test.
func TestBatchLatencyTable(t *testing.T) {
	if os.Getenv("BATCH_LATENCY_TABLE") == "" {
		t.Skip("set BATCH_LATENCY_TABLE=1 to measure the batch latency table")
	}
	iters := 10
	if v := os.Getenv("BATCH_LATENCY_ITERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("BATCH_LATENCY_ITERS=%q: want a positive integer", v)
		}
		iters = n
	}
	e := newLatencyEnv(t)
	handlers := make([]consumerapp.Handler, len(batchCases))
	for i, c := range batchCases {
		handlers[i] = e.handler(t, c.concurrency, idem.ModeLease)
		timeBatch(t, handlers[i], e.event(t, c.groups, c.n)) // warm up
	}
	type result struct {
		rtt   time.Duration
		batch map[string]time.Duration              // median per case
		ops   map[string]map[string][]time.Duration // case -> operation -> attempt times
	}
	lats := []time.Duration{batchLatencyDelay, 0}
	results := map[time.Duration]result{}
	calls := map[string]int{} // attempts per message of a first delivery, by operation
	for _, lat := range lats {
		e.setLatency(t, lat)
		r := result{rtt: e.rtt(t, 15), batch: map[string]time.Duration{}, ops: map[string]map[string][]time.Duration{}}
		times := make([][]time.Duration, len(batchCases))
		for range iters {
			for i, c := range batchCases {
				ev := e.event(t, c.groups, c.n)
				e.times.take()
				e.calls.Reset()
				times[i] = append(times[i], timeBatch(t, handlers[i], ev))
				if r.ops[c.name] == nil {
					r.ops[c.name] = map[string][]time.Duration{}
				}
				for op, d := range e.times.take() {
					r.ops[c.name][op] = append(r.ops[c.name][op], d...)
				}
				if c.name == "1msg" {
					calls = e.calls.Ops()
				}
			}
		}
		for i, c := range batchCases {
			r.batch[c.name] = median(times[i])
		}
		results[lat] = r
	}

	with, without := results[lats[0]], results[lats[1]]
	var b strings.Builder
	line := func(name, a, z string) { fmt.Fprintf(&b, "%-50s %10s %10s\n", name, a, z) }
	msf := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", ms(d)) }
	row := func(name string, f func(r result) string) { line(name, f(with), f(without)) }
	fmt.Fprintf(&b, "10-message FIFO batches (first deliveries) through the consumer, moto behind toxiproxy; medians of %d\n", iters)
	line("", "+"+batchLatencyDelay.String(), "+0")
	row("RTT: one DynamoDB GetItem through the proxy", func(r result) string { return msf(r.rtt) })
	row("1 message alone (one record's critical path)", func(r result) string { return msf(r.batch["1msg"]) })
	row("10 groups, Concurrency 10", func(r result) string { return msf(r.batch["10groups"]) })
	row("1 group (records in order)", func(r result) string { return msf(r.batch["1group"]) })
	row("10 groups, Concurrency 1 (sequential)", func(r result) string { return msf(r.batch["sequential"]) })
	row("ratio sequential / 10 groups", func(r result) string {
		return fmt.Sprintf("%.2fx", float64(r.batch["sequential"])/float64(r.batch["10groups"]))
	})
	row("ratio 10 groups / 1 message", func(r result) string {
		return fmt.Sprintf("%.2fx", float64(r.batch["10groups"])/float64(r.batch["1msg"]))
	})
	var names []string
	total := 0
	for op, n := range calls {
		names = append(names, op)
		total += n
	}
	slices.Sort(names)
	for _, op := range names {
		row(fmt.Sprintf("  %s x%d: alone / in 10 groups", op, calls[op]), func(r result) string {
			return fmt.Sprintf("%.0f/%.0f", ms(median(r.ops["1msg"][op])), ms(median(r.ops["10groups"][op])))
		})
	}
	var motoTime time.Duration // the emulator's time for one record: its calls alone, no added latency
	for _, op := range names {
		motoTime += time.Duration(calls[op]) * median(without.ops["1msg"][op])
	}
	fmt.Fprintf(&b, "emulator time per record: its %d calls one at a time, +0: %s; x 10 records: %s (10-group batch at +0: %s)\n",
		total, msf(motoTime), msf(10*motoTime), msf(without.batch["10groups"]))
	handlerTime := without.batch["1msg"]
	target := 3*with.rtt + handlerTime
	fmt.Fprintf(&b, "handler time = 1 message alone without added latency: %s\n", msf(handlerTime))
	fmt.Fprintf(&b, "target: 10 groups <= 3 x RTT + handler time = %s; measured %s: %s\n", msf(target), msf(with.batch["10groups"]),
		map[bool]string{true: "met", false: "NOT met"}[with.batch["10groups"] <= target])
	fmt.Fprintf(&b, "floor for %d calls in a row per record: %d x %s + handler time = %s\n", total, total, batchLatencyDelay,
		msf(time.Duration(total)*batchLatencyDelay+handlerTime))
	// The emulator's own time is in both columns; what the added latency adds is the part
	// that scales with the network: how many round trips the batch waits for in a row.
	for _, c := range []string{"10groups", "1group", "sequential"} {
		added := with.batch[c] - without.batch[c]
		fmt.Fprintf(&b, "added by the %s RTT, %s: %s = %.1f round trips in a row\n", batchLatencyDelay, c, msf(added),
			float64(added)/float64(batchLatencyDelay))
	}
	if errs := e.times.failed(); len(errs) > 0 {
		fmt.Fprintf(&b, "%d failed attempts (retried by the SDK), first: %s\n", len(errs), errs[0])
	}
	t.Log("\n" + b.String())
}
