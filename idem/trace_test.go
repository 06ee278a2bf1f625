package idem_test

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
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

// wantAttr fails unless span s carries key with the value want.
func wantAttr(t *testing.T, s tracetest.SpanStub, key, want string) {
	t.Helper()
	v, ok := spanAttrValue(s, key)
	if !ok || v.String() != want {
		t.Errorf("span %s: %s = %q (set: %v), want %q", s.Name, key, v.String(), ok, want)
	}
}

// noAttr fails when span s carries key.
func noAttr(t *testing.T, s tracetest.SpanStub, key string) {
	t.Helper()
	if v, ok := spanAttrValue(s, key); ok {
		t.Errorf("span %s: %s = %q, want it unset", s.Name, key, v.String())
	}
}

// wantStatus fails unless span s ends with the status code, and (for an error) a
// description that holds text.
func wantStatus(t *testing.T, s tracetest.SpanStub, code codes.Code, text string) {
	t.Helper()
	if s.Status.Code != code || !strings.Contains(s.Status.Description, text) {
		t.Errorf("span %s: status %v %q, want %v with %q", s.Name, s.Status.Code, s.Status.Description, code, text)
	}
}

// tracedOKRecord is the SQS handler of a traced client on a MemoryStore whose handler
// answers "ok".
func tracedOKRecord(t *testing.T, tp trace.TracerProvider) sqsbatch.RecordFunc {
	t.Helper()
	client, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "payments", Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	record, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: client, Handler: idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Response: []byte(`"ok"`)}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	return record
}

// createFails is a store whose acquisitions fail with err.
type createFails struct {
	persistence.Store
	err error
}

func (s createFails) Create(context.Context, *persistence.Record, time.Time) (*persistence.Record, bool, error) {
	return nil, false, s.err
}

// TestRequestSpansOfEachDecision: Client.Do called with no span in its context is a
// trace of its own (SpanRequest), whose acquire span says what was decided, with whom,
// and whose handler, commit and release spans say what ran and how it ended.
func TestRequestSpansOfEachDecision(t *testing.T) {
	ctx := context.Background()
	ok := func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Response: []byte(`"ok"`)}, nil
	}
	newClient := func(t *testing.T, store persistence.Store, owner string) (*idem.Client, *tracetest.InMemoryExporter) {
		t.Helper()
		tp, exp := spanRecorder(t)
		c, err := idem.New(idem.Config{Store: store, Scope: "payments", Owner: owner, Tracer: tp})
		if err != nil {
			t.Fatal(err)
		}
		return c, exp
	}

	t.Run("applied then replayed", func(t *testing.T) {
		c, exp := newClient(t, memstore.NewMemoryStore(), "worker-1")
		if _, err := c.Do(ctx, req(secretKey, secretBody), ok); err != nil {
			t.Fatal(err)
		}
		spans := exp.GetSpans()
		pk, _ := c.RecordKey(secretKey)
		request := one(t, spans, telemetry.SpanRequest)
		wantAttr(t, request, telemetry.AttrRecord, telemetry.RecordTraceID(pk))
		noAttr(t, request, telemetry.AttrKeyHash) // a Client has no Keys: a plain hash would let a guess be checked
		wantAttr(t, request, "idem.replayed", "false")
		wantAttr(t, request, telemetry.AttrAttempt, "1")
		wantStatus(t, request, codes.Unset, "")
		acquire := one(t, spans, telemetry.SpanAcquire)
		wantAttr(t, acquire, telemetry.AttrDecision, telemetry.DecisionAcquired)
		wantAttr(t, acquire, telemetry.AttrAttempt, "1")
		wantAttr(t, acquire, telemetry.AttrOwner, "worker-1")
		if tok := spanAttr(acquire, telemetry.AttrLeaseToken); len(tok) != 8 {
			t.Errorf("lease token on the span %q, want its first 8 characters", tok)
		}
		handler := one(t, spans, telemetry.SpanHandler)
		wantAttr(t, handler, telemetry.AttrAttempt, "1")
		wantStatus(t, handler, codes.Unset, "")
		commit := one(t, spans, telemetry.SpanCommit)
		wantAttr(t, commit, "idem.writes", "0")
		wantAttr(t, commit, telemetry.AttrMessages, "0")
		wantAttr(t, commit, "idem.guarded", "false")
		wantAttr(t, commit, telemetry.AttrAttempt, "1")
		noSecrets(t, spans)

		exp.Reset()
		if res, err := c.Do(ctx, req(secretKey, secretBody), ok); err != nil || !res.Replayed {
			t.Fatalf("the duplicate: %+v %v", res, err)
		}
		request = one(t, exp.GetSpans(), telemetry.SpanRequest)
		wantAttr(t, request, "idem.replayed", "true")
		noAttr(t, request, telemetry.AttrAttempt) // no acquisition ran the handler
		wantAttr(t, one(t, exp.GetSpans(), telemetry.SpanAcquire), telemetry.AttrDecision, telemetry.DecisionReplayed)

		exp.Reset()
		if _, err := c.Do(ctx, req(secretKey, `{"iban":"other"}`), ok); !errors.Is(err, idem.ErrPayloadMismatch) {
			t.Fatalf("another payload: %v", err)
		}
		spans = exp.GetSpans()
		wantAttr(t, one(t, spans, telemetry.SpanAcquire), telemetry.AttrDecision, telemetry.DecisionMismatch)
		request = one(t, spans, telemetry.SpanRequest)
		noAttr(t, request, telemetry.AttrAttempt)
		wantStatus(t, request, codes.Error, "payload")
	})

	t.Run("failed retryably, then for good", func(t *testing.T) {
		c, exp := newClient(t, memstore.NewMemoryStore(), "worker-1")
		if _, err := c.Do(ctx, req("k-retry", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{}, errors.New("the bank timed out")
		}); err == nil {
			t.Fatal("the handler's error was not returned")
		}
		spans := exp.GetSpans()
		wantStatus(t, one(t, spans, telemetry.SpanHandler), codes.Error, "the bank timed out")
		release := one(t, spans, telemetry.SpanRelease)
		wantAttr(t, release, telemetry.AttrRetryable, "true")
		wantStatus(t, release, codes.Unset, "") // the release itself was written

		exp.Reset()
		if _, err := c.Do(ctx, req("k-retry", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{}, idem.Permanent(errors.New("account closed"))
		}); !idem.IsPermanent(err) {
			t.Fatalf("the refusal: %v", err)
		}
		spans = exp.GetSpans()
		wantAttr(t, one(t, spans, telemetry.SpanAcquire), telemetry.AttrDecision, telemetry.DecisionTakenOver)
		wantAttr(t, one(t, spans, telemetry.SpanHandler), telemetry.AttrAttempt, "2")
		wantAttr(t, one(t, spans, telemetry.SpanRelease), telemetry.AttrRetryable, "false")

		exp.Reset()
		var stored *idem.StoredError
		if _, err := c.Do(ctx, req("k-retry", `{}`), ok); !errors.As(err, &stored) {
			t.Fatalf("after the refusal: %v", err)
		}
		acquire := one(t, exp.GetSpans(), telemetry.SpanAcquire)
		wantAttr(t, acquire, telemetry.AttrDecision, telemetry.DecisionStored)
		wantStatus(t, acquire, codes.Unset, "") // the store answered: a decision, not its failure
	})

	t.Run("held by a live lease", func(t *testing.T) {
		store := memstore.NewMemoryStore()
		first, _ := newClient(t, store, "worker-1")
		second, exp := newClient(t, store, "worker-2")
		var inner error
		if _, err := first.Do(ctx, req("k-held", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			_, inner = second.Do(ctx, req("k-held", `{}`), ok)
			return idem.Result{Response: []byte("1")}, nil
		}); err != nil {
			t.Fatal(err)
		}
		var held *idem.LeaseHeldError
		if !errors.As(inner, &held) {
			t.Fatalf("the second delivery: %v, want a LeaseHeldError", inner)
		}
		acquire := one(t, exp.GetSpans(), telemetry.SpanAcquire)
		wantAttr(t, acquire, telemetry.AttrDecision, telemetry.DecisionInProgress)
		wantAttr(t, acquire, telemetry.AttrOwner, "worker-1")
		wantAttr(t, acquire, telemetry.AttrLeaseUntil, held.Until.UTC().Format(time.RFC3339Nano))
	})

	t.Run("a takeover lost to another holder", func(t *testing.T) {
		store := memstore.NewMemoryStore()
		c, _ := newClient(t, store, "worker-1")
		if _, err := c.Do(ctx, req("k-race", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{}, errors.New("transient")
		}); err == nil {
			t.Fatal("no error")
		}
		racer, exp := newClient(t, takeoverFails{store, fmt.Errorf("injected: %w", idem.ErrLeaseLost)}, "worker-2")
		if _, err := racer.Do(ctx, req("k-race", `{}`), ok); !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("the lost takeover: %v", err)
		}
		acquire := one(t, exp.GetSpans(), telemetry.SpanAcquire)
		wantAttr(t, acquire, telemetry.AttrDecision, telemetry.DecisionInProgress)
		noAttr(t, acquire, telemetry.AttrOwner) // the winner is not known
	})

	t.Run("the store down", func(t *testing.T) {
		c, exp := newClient(t, createFails{memstore.NewMemoryStore(), errors.New("injected: store down")}, "worker-1")
		if _, err := c.Do(ctx, req("k-down", `{}`), ok); err == nil {
			t.Fatal("no error")
		}
		acquire := one(t, exp.GetSpans(), telemetry.SpanAcquire)
		wantAttr(t, acquire, telemetry.AttrDecision, telemetry.DecisionError)
		wantStatus(t, acquire, codes.Error, "store down")
	})

	t.Run("a commit that fails", func(t *testing.T) {
		c, exp := newClient(t, &commitFaults{Store: memstore.NewMemoryStore(), complete: errors.New("injected: commit refused")}, "worker-1")
		if _, err := c.Do(ctx, req("k-commit", `{}`), ok); err == nil {
			t.Fatal("no error")
		}
		commit := one(t, exp.GetSpans(), telemetry.SpanCommit)
		wantStatus(t, commit, codes.Error, "commit refused")
		noAttr(t, commit, telemetry.AttrAttempt) // nothing was committed by any attempt
	})

	t.Run("a record written without an attempt count, taken over", func(t *testing.T) {
		// A record another writer left (a Powertools record has no attempt attribute):
		// its lease ended, so the next delivery takes it over from that holder.
		store := memstore.NewMemoryStore()
		now := time.Now()
		pk, err := idem.RecordKey("payments", "k-old", false)
		if err != nil {
			t.Fatal(err)
		}
		if _, created, err := store.Create(ctx, &persistence.Record{Key: pk, Status: persistence.StatusInProgress, LeaseToken: "old-token",
			LeaseUntil: now.Add(-time.Minute).Truncate(time.Millisecond), Inflight: "0", ExpiresAt: now.Add(time.Hour), Owner: "elsewhere",
			CreatedAt: now, UpdatedAt: now}, now); err != nil || !created {
			t.Fatalf("create: %v %v", created, err)
		}
		c, exp := newClient(t, store, "worker-1")
		if _, err := c.Do(ctx, req("k-old", `{}`), ok); err != nil {
			t.Fatal(err)
		}
		acquire := one(t, exp.GetSpans(), telemetry.SpanAcquire)
		wantAttr(t, acquire, telemetry.AttrDecision, telemetry.DecisionTakenOver)
		wantAttr(t, acquire, telemetry.AttrPreviousOwner, "elsewhere")
		wantAttr(t, acquire, telemetry.AttrAttempt, "1")
	})
}

// TestInjectTrace: a producer's message gets its span's context as the traceparent
// attribute and the AWSTraceHeader system attribute, keeping the producer's own
// attributes; with SQS's 10 attributes already, or its own traceparent, only the
// header; without a span, nothing.
func TestInjectTrace(t *testing.T) {
	tp, _ := spanRecorder(t)
	ctx, span := tp.Tracer("test").Start(context.Background(), "producer", trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	sc := span.SpanContext()
	wantTP := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
	tid := sc.TraceID().String()
	wantHeader := fmt.Sprintf("Root=1-%s-%s;Parent=%s;Sampled=1", tid[:8], tid[8:], sc.SpanID())
	attrs := func(n int) map[string]sqstypes.MessageAttributeValue {
		m := map[string]sqstypes.MessageAttributeValue{}
		for i := range n {
			m[fmt.Sprintf("a%d", i)] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("v")}
		}
		return m
	}
	for name, c := range map[string]struct {
		attrs  map[string]sqstypes.MessageAttributeValue
		wantTP string // "": none added
		n      int    // attributes after
	}{
		"no attributes":       {nil, wantTP, 1},
		"one of its own":      {attrs(1), wantTP, 2},
		"nine of its own":     {attrs(9), wantTP, 10},
		"ten already":         {attrs(10), "", 10},
		"its own traceparent": {map[string]sqstypes.MessageAttributeValue{telemetry.TraceParentAttribute: {DataType: aws.String("String"), StringValue: aws.String("mine")}}, "mine", 1},
	} {
		in := &sqs.SendMessageInput{MessageAttributes: c.attrs}
		telemetry.InjectTrace(ctx, in)
		got := in.MessageAttributes[telemetry.TraceParentAttribute]
		if aws.ToString(got.StringValue) != c.wantTP || len(in.MessageAttributes) != c.n {
			t.Errorf("%s: traceparent %q of %d attributes, want %q of %d", name, aws.ToString(got.StringValue), len(in.MessageAttributes), c.wantTP, c.n)
		}
		if c.wantTP == wantTP && aws.ToString(got.DataType) != "String" {
			t.Errorf("%s: traceparent's type %q", name, aws.ToString(got.DataType))
		}
		for k := range c.attrs {
			if _, ok := in.MessageAttributes[k]; !ok {
				t.Errorf("%s: the producer's attribute %s was lost", name, k)
			}
		}
		h := in.MessageSystemAttributes[telemetry.AWSTraceHeader]
		if aws.ToString(h.StringValue) != wantHeader || aws.ToString(h.DataType) != "String" {
			t.Errorf("%s: AWSTraceHeader %q (%q), want %q", name, aws.ToString(h.StringValue), aws.ToString(h.DataType), wantHeader)
		}
	}
	in := &sqs.SendMessageInput{}
	telemetry.InjectTrace(context.Background(), in)
	if in.MessageAttributes != nil || in.MessageSystemAttributes != nil {
		t.Errorf("without a span: %v %v", in.MessageAttributes, in.MessageSystemAttributes)
	}
}

// TestRecordSpanContexts: what the record's span takes from the message. A message that
// carries both contexts of one trace (as InjectTrace puts them) has the W3C one as its
// parent and links only the invocation; one whose X-Ray context is of another trace
// links it too, even sampled; a traceparent attribute that is not a string is ignored.
// The span carries the receive count.
func TestRecordSpanContexts(t *testing.T) {
	tr := newTraced(t, true, 0)
	ctx, producer := tr.tp.Tracer("test").Start(context.Background(), "producer", trace.WithSpanKind(trace.SpanKindProducer))
	producer.End()
	in := &sqs.SendMessageInput{}
	telemetry.InjectTrace(ctx, in)
	msg := func(id, key string) events.SQSMessage {
		return events.SQSMessage{
			MessageId: id, Body: `{}`, EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:input",
			Attributes: map[string]string{"ApproximateReceiveCount": "3", telemetry.AWSTraceHeader: aws.ToString(in.MessageSystemAttributes[telemetry.AWSTraceHeader].StringValue)},
			MessageAttributes: map[string]events.SQSMessageAttribute{
				idem.KeyAttribute:              {DataType: "String", StringValue: aws.String(key)},
				telemetry.TraceParentAttribute: {DataType: "String", StringValue: in.MessageAttributes[telemetry.TraceParentAttribute].StringValue},
			},
		}
	}

	inv := tr.deliver(t, msg("m-both", "k-both"))
	process := one(t, tr.rec.GetSpans(), telemetry.SpanProcess)
	if process.Parent.SpanID() != producer.SpanContext().SpanID() || len(process.Links) != 1 || process.Links[0].SpanContext.SpanID() != inv.SpanID() {
		t.Errorf("both contexts of one trace: parent %v, links %v; want the producer, and the invocation linked", process.Parent.SpanID(), process.Links)
	}
	wantAttr(t, process, telemetry.AttrReceiveCount, "3")

	tr.rec.Reset()
	other := msg("m-other", "k-other")
	other.Attributes[telemetry.AWSTraceHeader] = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	tr.deliver(t, other)
	process = one(t, tr.rec.GetSpans(), telemetry.SpanProcess)
	if process.Parent.SpanID() != producer.SpanContext().SpanID() || len(process.Links) != 2 || process.Links[1].SpanContext.SpanID().String() != "53995c3f42cd8ad8" {
		t.Errorf("an X-Ray context of another trace: parent %v, links %v; want the producer, the X-Ray context linked", process.Parent.SpanID(), process.Links)
	}

	tr.rec.Reset()
	binary := msg("m-binary", "k-binary")
	binary.MessageAttributes[telemetry.TraceParentAttribute] = events.SQSMessageAttribute{DataType: "Binary", BinaryValue: []byte("00-x")}
	delete(binary.Attributes, telemetry.AWSTraceHeader)
	tr.deliver(t, binary)
	if process = one(t, tr.rec.GetSpans(), telemetry.SpanProcess); process.Parent.IsValid() {
		t.Errorf("a binary traceparent: parent %v, want a root", process.Parent)
	}
}

// TestRecordSpanOutcomes: a record's span ends in error when the record failed or was
// dead-lettered (a message without a key, here), with the error; an applied record's
// and a duplicate's end well, and a duplicate's names no attempt. The send span says how
// many of its messages were dead-lettered.
func TestRecordSpanOutcomes(t *testing.T) {
	tp, exp := spanRecorder(t)
	client, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "payments", Sender: &capture{}, Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	record, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: client, Handler: idem.HandlerFunc(func(_ context.Context, r *idem.Request) (idem.Result, error) {
		if string(r.Payload) == `"fail"` {
			return idem.Result{}, errors.New("downstream unavailable")
		}
		return idem.Result{Response: []byte(`"ok"`), Messages: []idem.Message{{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/out", Body: "x"}}}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	dl := &fakeDL{}
	batch, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: record, Outbox: client, DeadLetter: dl, Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	keyless := events.SQSMessage{MessageId: "m-keyless", Body: `{}`, ReceiptHandle: "rh-keyless"} // no key attribute, not FIFO
	for _, c := range []struct {
		msg     events.SQSMessage
		outcome string
		code    codes.Code
		text    string
	}{
		{keyedFIFORecord("m-ok", "g-1", "k-ok", `{}`), "ok", codes.Unset, ""},
		{keyedFIFORecord("m-dup", "g-1", "k-ok", `{}`), "ok", codes.Unset, ""},
		{keyedFIFORecord("m-fail", "g-3", "k-fail", `"fail"`), "retry", codes.Error, "downstream unavailable"},
		{keyless, "dead_lettered", codes.Error, idem.KeyAttribute},
	} {
		exp.Reset()
		if _, err := batch.Process(context.Background(), events.SQSEvent{Records: []events.SQSMessage{c.msg}}); err != nil {
			t.Fatal(err)
		}
		spans := exp.GetSpans()
		process := one(t, spans, telemetry.SpanProcess)
		wantAttr(t, process, "idem.batch_outcome", c.outcome)
		wantStatus(t, process, c.code, c.text)
		switch c.msg.MessageId {
		case "m-ok":
			wantAttr(t, process, telemetry.AttrAttempt, "1")
			wantAttr(t, one(t, spans, telemetry.SpanSend), telemetry.AttrDeadLettered, "0")
		case "m-dup":
			wantAttr(t, process, telemetry.AttrOutcome, "duplicate")
			noAttr(t, process, telemetry.AttrAttempt)
		}
	}
	if len(dl.ids) != 1 || dl.ids[0] != "m-keyless" {
		t.Errorf("dead-lettered %v, want the message without a key", dl.ids)
	}
}

// TestOutboundTraceparentWithinTheSizeLimit: an outbound message takes the traceparent
// attribute only when it still fits, to the byte, what its queue is known to take, as
// SQS counts its size (body, and each attribute's name, type and value): here, a queue
// that took a message of MaxOutboundMessageBytes. A queue known to take no more than
// SQS's least MaximumMessageSize gives a larger message none. A message that sets a
// traceparent of its own keeps it.
func TestOutboundTraceparentWithinTheSizeLimit(t *testing.T) {
	const traceparent = len(telemetry.TraceParentAttribute) + len("String") + len("00-") + 32 + len("-") + 16 + len("-01")
	const q = "https://sqs.us-east-1.amazonaws.com/123456789012/q"
	for _, c := range []struct {
		name  string
		known bool // the queue took a message of MaxOutboundMessageBytes before
		msg   idem.Message
		room  bool
		value string
	}{
		{"fits to the byte", true, idem.Message{Body: strings.Repeat("x", sqsmsg.MaxOutboundMessageBytes-traceparent)}, true, ""},
		{"one byte over", true, idem.Message{Body: strings.Repeat("x", sqsmsg.MaxOutboundMessageBytes-traceparent+1)}, false, ""},
		{"the least queue, to the byte", false, idem.Message{Body: strings.Repeat("x", sqsmsg.MinSQSMessageBytes-traceparent)}, true, ""},
		{"over the least queue", false, idem.Message{Body: strings.Repeat("x", sqsmsg.MinSQSMessageBytes-traceparent+1)}, false, ""},
		{"its own traceparent", false, idem.Message{Body: "x", Attributes: map[string]string{telemetry.TraceParentAttribute: "mine"}}, true, "mine"},
	} {
		tr := newTraced(t, true, 0)
		if c.known {
			learn := idem.Message{QueueURL: q, Body: strings.Repeat("y", sqsmsg.MaxOutboundMessageBytes)}
			if errs := tr.client.Deliver(context.Background(), []*outbox.Pending{{Key: "payments#first", Token: "t", Messages: []idem.Message{learn}}}); errs[0] != nil {
				t.Fatal(errs[0])
			}
		}
		c.msg.QueueURL = q
		errs := tr.client.Deliver(context.Background(), []*outbox.Pending{{Key: "payments#k", Token: "t", Messages: []idem.Message{c.msg}}})
		if errs[0] != nil || len(tr.out.entries) == 0 {
			t.Fatalf("%s: %v, %d entries sent", c.name, errs[0], len(tr.out.entries))
		}
		got, has := tr.out.entries[len(tr.out.entries)-1].MessageAttributes[telemetry.TraceParentAttribute]
		if has != c.room || c.value != "" && aws.ToString(got.StringValue) != c.value {
			t.Errorf("%s: traceparent %v %q, want %v %q", c.name, has, aws.ToString(got.StringValue), c.room, c.value)
		}
	}
}

// movedOn is a store on which every listed lease has moved on before its reap.
type movedOn struct{ persistence.Store }

func (movedOn) Reap(context.Context, persistence.StaleLease, string, time.Time) error {
	return fmt.Errorf("injected: %w", idem.ErrLeaseLost)
}

// TestReapSpanOfALeaseThatMovedOn: a listed lease that moved on before its reap (its
// holder committed, or a redelivery took it over) is no failure of the sweep: its span
// says not reaped, without an error or a lateness. A reaped lease's span says how late
// past its end and the grace it was reaped.
func TestReapSpanOfALeaseThatMovedOn(t *testing.T) {
	now := time.Now()
	later := now.Add(2 * time.Minute)
	for _, moved := range []bool{false, true} {
		tp, exp := spanRecorder(t)
		var store persistence.Store = memstore.NewMemoryStore()
		pk, err := idem.RecordKey("payments", "k-stale", false)
		if err != nil {
			t.Fatal(err)
		}
		if _, created, err := store.Create(context.Background(), &persistence.Record{Key: pk, Status: persistence.StatusInProgress, LeaseToken: "0123456789abcdef",
			LeaseUntil: now.Truncate(time.Millisecond), Inflight: "0", ExpiresAt: now.Add(time.Hour), Attempt: 1, Owner: "crashed", CreatedAt: now, UpdatedAt: now}, now); err != nil || !created {
			t.Fatalf("create: %v %v", created, err)
		}
		if moved {
			store = movedOn{store}
		}
		r := &reaper.Reaper{Store: store, Shards: 1, Grace: time.Second, Clock: func() time.Time { return later }, Tracer: tp}
		if _, err := r.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		spans := exp.GetSpans()
		reap := one(t, spans, telemetry.SpanReap)
		wantAttr(t, reap, telemetry.AttrLeaseToken, "01234567")
		wantStatus(t, reap, codes.Unset, "")
		wantStatus(t, one(t, spans, telemetry.SpanSweep), codes.Unset, "")
		if moved {
			wantAttr(t, reap, telemetry.AttrReaped, "false")
			noAttr(t, reap, telemetry.AttrLate)
		} else {
			wantAttr(t, reap, telemetry.AttrReaped, "true")
			wantAttr(t, reap, telemetry.AttrLate, fmt.Sprint(later.Sub(now.Truncate(time.Millisecond).Add(time.Second)).Milliseconds()))
		}
	}
}

// quietSpan is a caller's span that is not recording yet keeps what it is given.
type quietSpan struct {
	noop.Span
	attrs []attribute.KeyValue
}

func (*quietSpan) IsRecording() bool                        { return false }
func (s *quietSpan) SetAttributes(kv ...attribute.KeyValue) { s.attrs = append(s.attrs, kv...) }

// TestRecordNotesNothingOnASpanThatIsNotRecording: the SQS handler writes what it learned
// of a record only to a span that records; a span of the caller's that says it does not
// is given nothing, whatever its SetAttributes would do.
func TestRecordNotesNothingOnASpanThatIsNotRecording(t *testing.T) {
	tp, _ := spanRecorder(t)
	record := tracedOKRecord(t, tp)
	for _, msg := range []events.SQSMessage{
		{MessageId: "m-keyless", Body: `{}`},
		keyedFIFORecord("m-keyed", "g", "k-1", `{}`),
	} {
		span := &quietSpan{}
		_ = record(trace.ContextWithSpan(context.Background(), span), msg)
		if len(span.attrs) != 0 {
			t.Errorf("%s: a span that is not recording was given %v", msg.MessageId, span.attrs)
		}
	}
}
