package idem_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
)

// capture is an SQS sender that keeps every SendMessageBatch entry, and the span each
// request was sent under, and accepts them.
type capture struct {
	mu      sync.Mutex
	entries []sqstypes.SendMessageBatchRequestEntry
	spans   []trace.SpanContext
}

func (c *capture) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spans = append(c.spans, trace.SpanContextFromContext(ctx))
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		c.entries = append(c.entries, e)
		out.Successful = append(out.Successful, sqstypes.SendMessageBatchResultEntry{Id: e.Id, MessageId: aws.String("out-" + aws.ToString(e.Id))})
	}
	return out, nil
}

// spanRecorder is a TracerProvider whose spans go to an in-memory exporter.
func spanRecorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// traced is a consumer on a MemoryStore whose spans go to an in-memory exporter.
type traced struct {
	rec    *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	client *idem.Client
	batch  *sqsbatch.BatchProcessor
	out    *capture
}

const (
	secretKey  = "customer-4711@example.com" // a key that holds personal data
	secretBody = `{"iban":"DE89370400440532013000","amount":12}`
)

// traceKeys key the hashes the traced consumer's spans carry.
var traceKeys = func() *sqsmsg.Keys {
	k, err := sqsmsg.NewKeys([]byte("the traced consumer's stack secret"))
	if err != nil {
		panic(err)
	}
	return k
}()

func newTraced(t *testing.T, tracing bool, attrs int) *traced {
	t.Helper()
	tp, exp := spanRecorder(t)
	out := &capture{}
	var provider trace.TracerProvider
	if tracing {
		provider = tp
	}
	client, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "payments", Sender: out, Owner: "worker-1", Tracer: provider})
	if err != nil {
		t.Fatal(err)
	}
	h := idem.HandlerFunc(func(ctx context.Context, req *idem.Request) (idem.Result, error) {
		if err := req.Attempt.Step(ctx, "reserve", func(context.Context) error { return nil }); err != nil {
			return idem.Result{}, err
		}
		m := idem.Message{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/receipts", Body: `{"receipt":1}`, Attributes: map[string]string{}}
		for i := range attrs {
			m.Attributes["a"+strconv.Itoa(i)] = "v"
		}
		return idem.Result{Response: []byte(`"ok"`), Messages: []idem.Message{m}}, nil
	})
	record, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: client, Handler: h, Keys: traceKeys})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: record, Outbox: client, Tracer: provider, Keys: traceKeys})
	if err != nil {
		t.Fatal(err)
	}
	return &traced{rec: exp, tp: tp, client: client, batch: batch, out: out}
}

// deliver runs msg in a batch of its own under an invocation span, and returns that span's context.
func (tr *traced) deliver(t *testing.T, msg events.SQSMessage) trace.SpanContext {
	t.Helper()
	ctx, inv := tr.tp.Tracer("test").Start(context.Background(), "consumer invocation")
	resp, err := tr.batch.Process(ctx, events.SQSEvent{Records: []events.SQSMessage{msg}})
	inv.End()
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("process: %+v %v", resp, err)
	}
	return inv.SpanContext()
}

// produced is a message sent under a producer's span, with its traceparent attribute.
func (tr *traced) produced(t *testing.T, id string) (events.SQSMessage, trace.SpanContext) {
	t.Helper()
	ctx, span := tr.tp.Tracer("test").Start(context.Background(), "producer send", trace.WithSpanKind(trace.SpanKindProducer))
	span.End()
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	tp := c["traceparent"]
	return events.SQSMessage{
		MessageId: id, Body: secretBody, EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:input.fifo",
		Attributes: map[string]string{"MessageGroupId": "account-9", "ApproximateReceiveCount": "1"},
		MessageAttributes: map[string]events.SQSMessageAttribute{
			idem.KeyAttribute:              {DataType: "String", StringValue: aws.String(secretKey)},
			telemetry.TraceParentAttribute: {DataType: "String", StringValue: &tp},
		},
	}, span.SpanContext()
}

func spanAttrValue(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func spanAttr(s tracetest.SpanStub, key string) string {
	v, _ := spanAttrValue(s, key)
	return v.String()
}

// byName returns the spans named name.
func byName(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func one(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	got := byName(spans, name)
	if len(got) != 1 {
		t.Fatalf("%d spans %s, want 1 (spans: %v)", len(got), name, names(spans))
	}
	return got[0]
}

func names(spans tracetest.SpanStubs) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name
	}
	return out
}

func childOf(t *testing.T, s, parent tracetest.SpanStub) {
	t.Helper()
	if s.Parent.SpanID() != parent.SpanContext.SpanID() || s.SpanContext.TraceID() != parent.SpanContext.TraceID() {
		t.Errorf("%s's parent is %s, want %s (%s)", s.Name, s.Parent.SpanID(), parent.Name, parent.SpanContext.SpanID())
	}
}

// noSecrets fails when any span attribute holds the raw key or a part of the body.
func noSecrets(t *testing.T, spans tracetest.SpanStubs) {
	t.Helper()
	for _, s := range spans {
		raw, _ := json.Marshal(s.Attributes)
		for _, secret := range []string{secretKey, "DE89370400440532013000", "iban", "account-9"} {
			if strings.Contains(string(raw), secret) || strings.Contains(s.Name, secret) {
				t.Errorf("span %s carries %q: %s", s.Name, secret, raw)
			}
		}
	}
}

// TestRecordSpans follows one record through the middleware: its span is the producer's
// child and links the invocation; under it the decision, the handler with its step, the
// commit and the send with its mark; the outbound message carries the send's context;
// no span carries the key, the group or the body. A redelivery's decision is "replayed",
// and its handler does not run.
func TestRecordSpans(t *testing.T) {
	tr := newTraced(t, true, 0)
	msg, producer := tr.produced(t, "m-1")
	tr.rec.Reset()
	inv := tr.deliver(t, msg)
	spans := tr.rec.GetSpans()

	process := one(t, spans, telemetry.SpanProcess)
	if process.Parent.SpanID() != producer.SpanID() || process.SpanContext.TraceID() != producer.TraceID() || !process.Parent.IsRemote() {
		t.Errorf("process span's parent %v, want the producer's %v", process.Parent, producer)
	}
	if len(process.Links) != 1 || process.Links[0].SpanContext.SpanID() != inv.SpanID() {
		t.Errorf("process span links %v, want the invocation %v", process.Links, inv.SpanID())
	}
	if process.SpanKind != trace.SpanKindConsumer {
		t.Errorf("process span kind %v", process.SpanKind)
	}
	pk, _ := tr.client.RecordKey(secretKey)
	want := map[string]string{
		telemetry.AttrRecord: telemetry.RecordTraceID(pk), telemetry.AttrKeyHash: traceKeys.LogHash(secretKey), telemetry.AttrScope: "payments",
		telemetry.AttrOutcome: "applied", telemetry.AttrAttempt: "1", telemetry.AttrGroupHash: traceKeys.LogHash("account-9"),
		"messaging.destination.name": "input.fifo", "messaging.message.id": "m-1", "idem.batch_outcome": "ok",
	}
	for k, v := range want {
		if got := spanAttr(process, k); got != v {
			t.Errorf("process span %s = %q, want %q", k, got, v)
		}
	}
	acquire := one(t, spans, telemetry.SpanAcquire)
	childOf(t, acquire, process)
	if d, o := spanAttr(acquire, telemetry.AttrDecision), spanAttr(acquire, telemetry.AttrOwner); d != telemetry.DecisionAcquired || o != "worker-1" {
		t.Errorf("decision %q by %q, want acquired by worker-1", d, o)
	}
	handler := one(t, spans, telemetry.SpanHandler)
	childOf(t, handler, process)
	step := one(t, spans, telemetry.SpanStep)
	childOf(t, step, handler)
	if spanAttr(step, telemetry.AttrStep) != "reserve" {
		t.Errorf("step %q", spanAttr(step, telemetry.AttrStep))
	}
	commit := one(t, spans, telemetry.SpanCommit)
	childOf(t, commit, process)
	send := one(t, spans, telemetry.SpanSend)
	childOf(t, send, process)
	if send.SpanKind != trace.SpanKindProducer || spanAttr(send, telemetry.AttrMessages) != "1" {
		t.Errorf("send span kind %v messages %s", send.SpanKind, spanAttr(send, telemetry.AttrMessages))
	}
	childOf(t, one(t, spans, telemetry.SpanMark), send)
	noSecrets(t, spans)
	// The SendMessageBatch request of one record's messages runs under the send's span
	// (an instrumented SQS client's span is its child).
	if len(tr.out.spans) != 1 || tr.out.spans[0].SpanID() != send.SpanContext.SpanID() {
		t.Errorf("the request ran under %v, want the send span %s", tr.out.spans, send.SpanContext.SpanID())
	}

	// The outbound message carries the send's context, as an attribute and as AWSTraceHeader.
	if len(tr.out.entries) != 1 {
		t.Fatalf("%d outbound entries", len(tr.out.entries))
	}
	e := tr.out.entries[0]
	if _, ok := e.MessageAttributes[idem.KeyAttribute]; !ok {
		t.Errorf("the outbound message lost its %s attribute beside the traceparent: %v", idem.KeyAttribute, e.MessageAttributes)
	}
	tp := aws.ToString(e.MessageAttributes[telemetry.TraceParentAttribute].StringValue)
	if want := fmt.Sprintf("00-%s-%s-01", send.SpanContext.TraceID(), send.SpanContext.SpanID()); tp != want {
		t.Errorf("outbound traceparent %q, want %q", tp, want)
	}
	amzn := aws.ToString(e.MessageSystemAttributes[telemetry.AWSTraceHeader].StringValue)
	if !strings.Contains(amzn, "Parent="+send.SpanContext.SpanID().String()) || !strings.Contains(amzn, "Sampled=1") {
		t.Errorf("outbound AWSTraceHeader %q, want the send span's", amzn)
	}

	// The same message again: answered from its record.
	tr.rec.Reset()
	msg.MessageId = "m-1-again"
	tr.deliver(t, msg)
	spans = tr.rec.GetSpans()
	if d := spanAttr(one(t, spans, telemetry.SpanAcquire), telemetry.AttrDecision); d != telemetry.DecisionReplayed {
		t.Errorf("redelivery decision %q, want %s", d, telemetry.DecisionReplayed)
	}
	if spanAttr(one(t, spans, telemetry.SpanProcess), telemetry.AttrOutcome) != "duplicate" || len(byName(spans, telemetry.SpanHandler)) != 0 {
		t.Errorf("redelivery spans %v", names(spans))
	}
}

// TestRecordSpanWithoutContext: a message without a traceparent, or with an
// AWSTraceHeader that is not sampled, starts a trace of its own, linked to the
// invocation (and to the X-Ray context); a sampled AWSTraceHeader is the parent.
func TestRecordSpanWithoutContext(t *testing.T) {
	tr := newTraced(t, true, 0)
	msg, _ := tr.produced(t, "m-2")
	delete(msg.MessageAttributes, telemetry.TraceParentAttribute)
	msg.Attributes[telemetry.AWSTraceHeader] = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0"
	tr.rec.Reset()
	inv := tr.deliver(t, msg)
	process := one(t, tr.rec.GetSpans(), telemetry.SpanProcess)
	if process.Parent.IsValid() || len(process.Links) != 2 || process.Links[0].SpanContext.SpanID() != inv.SpanID() ||
		process.Links[1].SpanContext.SpanID().String() != "53995c3f42cd8ad8" {
		t.Errorf("unsampled X-Ray context: parent %v, links %v; want a root linked to the invocation and the X-Ray context", process.Parent, process.Links)
	}

	msg, _ = tr.produced(t, "m-3")
	delete(msg.MessageAttributes, telemetry.TraceParentAttribute)
	msg.MessageAttributes[idem.KeyAttribute] = events.SQSMessageAttribute{DataType: "String", StringValue: aws.String("other-key")}
	msg.Attributes[telemetry.AWSTraceHeader] = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	tr.rec.Reset()
	tr.deliver(t, msg)
	process = one(t, tr.rec.GetSpans(), telemetry.SpanProcess)
	if process.Parent.SpanID().String() != "53995c3f42cd8ad8" || process.SpanContext.TraceID().String() != "5759e988bd862e3fe1be46a994272793" {
		t.Errorf("sampled X-Ray context: parent %v trace %v", process.Parent, process.SpanContext.TraceID())
	}
}

// TestOutboundTraceRoom: a message with SQS's 10 attributes already (9 of the handler's
// and the key attribute) gets no traceparent, only the AWSTraceHeader, which counts
// against no limit; one with room gets both.
func TestOutboundTraceRoom(t *testing.T) {
	for _, c := range []struct {
		attrs int
		room  bool
	}{{9, false}, {8, true}} {
		tr := newTraced(t, true, c.attrs)
		msg, _ := tr.produced(t, "m-1")
		tr.deliver(t, msg)
		e := tr.out.entries[0]
		_, has := e.MessageAttributes[telemetry.TraceParentAttribute]
		if has != c.room || len(e.MessageAttributes) > 10 {
			t.Errorf("%d handler attributes: traceparent %v (%d attributes), want %v", c.attrs, has, len(e.MessageAttributes), c.room)
		}
		if _, ok := e.MessageSystemAttributes[telemetry.AWSTraceHeader]; !ok {
			t.Errorf("%d handler attributes: no AWSTraceHeader", c.attrs)
		}
	}
}

// TestTracingOff: without a TracerProvider nothing is recorded and the outbound
// messages carry no trace context.
func TestTracingOff(t *testing.T) {
	tr := newTraced(t, false, 0)
	msg, _ := tr.produced(t, "m-1")
	tr.rec.Reset()
	tr.deliver(t, msg)
	if spans := tr.rec.GetSpans(); len(spans) != 1 || spans[0].Name != "consumer invocation" {
		t.Errorf("tracing off recorded %v", names(spans))
	}
	e := tr.out.entries[0]
	if _, ok := e.MessageAttributes[telemetry.TraceParentAttribute]; ok || e.MessageSystemAttributes != nil {
		t.Errorf("tracing off: the outbound message carries %v %v", e.MessageAttributes, e.MessageSystemAttributes)
	}
}

// TestStepDoneSpan: a step an earlier attempt finished is not run again by the next
// one; its span says so (idem.step_done), under the handler's, so a trace of the retry
// shows the step as skipped rather than missing.
func TestStepDoneSpan(t *testing.T) {
	tp, exp := spanRecorder(t)
	c, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "payments", Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	ran, calls := 0, 0
	h := func(ctx context.Context, r *idem.Request) (idem.Result, error) {
		calls++
		if err := r.Attempt.Step(ctx, "reserve", func(context.Context) error { ran++; return nil }); err != nil {
			return idem.Result{}, err
		}
		if calls == 1 {
			return idem.Result{}, fmt.Errorf("the charge timed out") // retryable: the next delivery takes over
		}
		return idem.Result{Response: []byte("ok")}, nil
	}
	if _, err := c.Do(context.Background(), req("k-1", `{}`), h); err == nil {
		t.Fatal("the first attempt did not fail")
	}
	exp.Reset()
	if _, err := c.Do(context.Background(), req("k-1", `{}`), h); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	step := one(t, spans, telemetry.SpanStep)
	if ran != 1 || spanAttr(step, telemetry.AttrStepDone) != "true" || spanAttr(step, telemetry.AttrStep) != "reserve" {
		t.Fatalf("the step ran %d times; the retry's step span %s=%q %s=%q, want run once and its span marked done",
			ran, telemetry.AttrStep, spanAttr(step, telemetry.AttrStep), telemetry.AttrStepDone, spanAttr(step, telemetry.AttrStepDone))
	}
	childOf(t, step, one(t, spans, telemetry.SpanHandler))
}

// TestReaperSpans: a lease whose holder vanished is reaped under a sweep span, with the
// holder and the attempt; the next delivery's decision is a takeover that names the
// previous holder, under the request's own span (Client.Do called outside a record).
func TestReaperSpans(t *testing.T) {
	tp, exp := spanRecorder(t)
	store := memstore.NewMemoryStore()
	now := time.Now()
	pk, err := idem.RecordKey("payments", secretKey, false)
	if err != nil {
		t.Fatal(err)
	}
	// The lease of a holder that vanished (killed before it released it).
	abandoned := &persistence.Record{Key: pk, Status: persistence.StatusInProgress, LeaseToken: "0123456789abcdef", LeaseUntil: now.Truncate(time.Millisecond),
		Inflight: "0", ExpiresAt: now.Add(time.Hour), Attempt: 1, Owner: "crashed", CreatedAt: now, UpdatedAt: now}
	if _, created, err := store.Create(context.Background(), abandoned, now); err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	later := now.Add(2 * time.Minute)
	r := &reaper.Reaper{Store: store, Shards: 1, Grace: time.Second, Clock: func() time.Time { return later }, Tracer: tp}
	res, err := r.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	sweep := one(t, spans, telemetry.SpanSweep)
	if res.Reaped != 1 || spanAttr(sweep, telemetry.AttrReaped) != "1" {
		t.Fatalf("reaped %d, sweep span %v", res.Reaped, sweep.Attributes)
	}
	reap := one(t, spans, telemetry.SpanReap)
	childOf(t, reap, sweep)
	if spanAttr(reap, telemetry.AttrRecord) != telemetry.RecordTraceID(pk) || spanAttr(reap, telemetry.AttrPreviousOwner) != "crashed" ||
		spanAttr(reap, telemetry.AttrAttempt) != "1" || spanAttr(reap, telemetry.AttrReaped) != "true" {
		t.Errorf("reap span %v", reap.Attributes)
	}

	exp.Reset()
	next, err := idem.New(idem.Config{Store: store, Scope: "payments", Owner: "second", Clock: func() time.Time { return later }, Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := next.Do(context.Background(), &idem.Request{Key: secretKey, Payload: []byte(secretBody)}, func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Response: []byte("1")}, nil
	}); err != nil {
		t.Fatal(err)
	}
	acquire := one(t, exp.GetSpans(), telemetry.SpanAcquire)
	// Called with no span in its context, the request is a trace of its own.
	childOf(t, acquire, one(t, exp.GetSpans(), telemetry.SpanRequest))
	if spanAttr(acquire, telemetry.AttrDecision) != telemetry.DecisionTakenOver || spanAttr(acquire, telemetry.AttrAttempt) != "2" ||
		spanAttr(acquire, telemetry.AttrPreviousOwner) != "crashed" || spanAttr(acquire, telemetry.AttrPreviousStatus) != string(persistence.StatusFailed) ||
		spanAttr(acquire, telemetry.AttrOwner) != "second" {
		t.Errorf("takeover span %v", acquire.Attributes)
	}
	noSecrets(t, append(spans, exp.GetSpans()...))
}

// TestRecordSpanWithoutAKey: a message whose key cannot be read is traced too: its
// record's span says permanent, with the scope and no key.
func TestRecordSpanWithoutAKey(t *testing.T) {
	tr := newTraced(t, true, 0)
	msg, _ := tr.produced(t, "m-nokey")
	delete(msg.MessageAttributes, idem.KeyAttribute)
	tr.rec.Reset()
	ctx, inv := tr.tp.Tracer("test").Start(context.Background(), "consumer invocation")
	resp, err := tr.batch.Process(ctx, events.SQSEvent{Records: []events.SQSMessage{msg}})
	inv.End()
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("process: %+v, %v; want the record failed (no dead-letter queue here)", resp, err)
	}
	span := one(t, tr.rec.GetSpans(), telemetry.SpanProcess)
	if got := spanAttr(span, telemetry.AttrOutcome); got != "permanent" {
		t.Errorf("outcome %q, want permanent", got)
	}
	if got := spanAttr(span, telemetry.AttrScope); got != "payments" {
		t.Errorf("scope %q, want payments", got)
	}
	if _, ok := spanAttrValue(span, telemetry.AttrKeyHash); ok {
		t.Error("a key hash on the span of a message without a key")
	}
}

// TestCachedDuplicateSpans: a duplicate answered from the in-process cache still has its
// acquire span, with the decision cached, or mismatch for another payload.
func TestCachedDuplicateSpans(t *testing.T) {
	tp, exp := spanRecorder(t)
	client, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "payments", CacheSize: 10, Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Response: []byte(`"ok"`)}, nil
	}
	if _, err := client.Do(ctx, &idem.Request{Key: "k", Payload: []byte(`{"a":1}`)}, ok); err != nil {
		t.Fatal(err)
	}
	pk, _ := client.RecordKey("k")
	for payload, want := range map[string]string{`{"a":1}`: telemetry.DecisionCached, `{"a":2}`: telemetry.DecisionMismatch} {
		exp.Reset()
		_, _ = client.Do(ctx, &idem.Request{Key: "k", Payload: []byte(payload)}, ok)
		acquire := one(t, exp.GetSpans(), telemetry.SpanAcquire)
		if d, r := spanAttr(acquire, telemetry.AttrDecision), spanAttr(acquire, telemetry.AttrRecord); d != want || r != telemetry.RecordTraceID(pk) {
			t.Errorf("payload %s: decision %q of %q, want %s of %s", payload, d, r, want, telemetry.RecordTraceID(pk))
		}
	}
}

// TestRecordSpanWithoutAnOutbox: a traced batch whose processor has no outbox (its
// handler sends nothing) still ends each record's span, with the record's outcome.
func TestRecordSpanWithoutAnOutbox(t *testing.T) {
	tp, exp := spanRecorder(t)
	batch, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: tracedOKRecord(t, tp), Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := batch.Process(context.Background(), events.SQSEvent{Records: []events.SQSMessage{keyedFIFORecord("m-1", "g", "k-1", `{}`)}}); err != nil {
		t.Fatal(err)
	}
	if got := spanAttr(one(t, exp.GetSpans(), telemetry.SpanProcess), "idem.batch_outcome"); got != "ok" {
		t.Errorf("the record's span: batch outcome %q, want ok", got)
	}
}

// TestTracedDeliverOfAMessageWithoutAttributes: Deliver of a Pending built by hand, whose
// message carries no attribute (not even the key's), sends it with the traceparent alone.
func TestTracedDeliverOfAMessageWithoutAttributes(t *testing.T) {
	tr := newTraced(t, true, 0)
	p := &outbox.Pending{Key: "payments#k", Token: "t", Messages: []idem.Message{{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/q", Body: "x"}}}
	tr.client.Deliver(context.Background(), []*outbox.Pending{p})
	if len(tr.out.entries) != 1 {
		t.Fatalf("%d entries sent, want 1", len(tr.out.entries))
	}
	if attrs := tr.out.entries[0].MessageAttributes; len(attrs) != 1 || aws.ToString(attrs[telemetry.TraceParentAttribute].StringValue) == "" {
		t.Errorf("attributes %v, want the traceparent alone", attrs)
	}
}
