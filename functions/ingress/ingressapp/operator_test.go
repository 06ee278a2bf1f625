package ingressapp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// TestReadRecord reads the ingress's record of a key as `idemctl inspect` shows it: a
// request whose mark failed (SENDING, with the end of its window), then the same request
// queued (its message id, the window gone); never its key or body.
func TestReadRecord(t *testing.T) {
	var failed sync.Once
	f := newFixture(t, options{env: map[string]string{"ACCEPT_WINDOW": "2s"}, wrapDDB: func(api ingressapp.DynamoDBAPI) ingressapp.DynamoDBAPI {
		return &failMark{DynamoDBAPI: api, once: &failed}
	}})
	ctx := context.Background()
	scope, table := f.env["IDEMPOTENCY_SCOPE"], f.env["INGRESS_TABLE"]
	m := f.traffic(t, 1)[0]
	key := f.key("inspected")
	wantCode(t, "POST whose mark fails", f.post(t, key, m.Body), http.StatusServiceUnavailable)

	pk, err := idem.RecordKey(scope, f.scoped(key), false)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ingressapp.ReadRecord(ctx, f.st.DynamoDB, table, scope, f.scoped(key))
	if err != nil {
		t.Fatal(err)
	}
	if v.Record != telemetry.RecordTraceID(pk) || v.State != "SENDING" || v.Attempt != 1 || v.MessageID != "" || v.PayloadHash == "" || v.Expired ||
		v.SendingUntil == nil || v.SendingUntil.Before(v.CreatedAt) || v.SendingUntil.After(v.CreatedAt.Add(3*time.Second)) ||
		!v.ExpiresAt.After(v.CreatedAt) {
		t.Errorf("the record of a request whose mark failed: %+v, want SENDING, attempt 1, its window's end within 2s of its creation", v)
	}

	time.Sleep(2100 * time.Millisecond)
	wantCode(t, "a retry after the window", f.post(t, key, m.Body), http.StatusAccepted)
	msgs := f.inputMessages(t)
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
	msg := msgs[0]
	v, err = ingressapp.ReadRecord(ctx, f.st.DynamoDB, table, scope, f.scoped(key))
	if err != nil {
		t.Fatal(err)
	}
	cpk, err := idem.RecordKey(scope, consumerKeyOf(t, f, msg), false)
	if err != nil {
		t.Fatal(err)
	}
	group := msg.Attributes[string(sqstypes.MessageSystemAttributeNameMessageGroupId)]
	if v.State != "QUEUED" || v.Attempt != 2 || v.MessageID == "" || v.SendingUntil != nil ||
		v.GroupHash != idem.HashKey(group) || v.ConsumerRecord != telemetry.RecordTraceID(cpk) {
		// (The message id is the retry's send's: SQS answers a send it drops as a duplicate
		// with an id too.)
		t.Errorf("the record once queued: %+v; want QUEUED, attempt 2, a message id, no window, group hash %s, consumer record %s",
			v, idem.HashKey(group), telemetry.RecordTraceID(cpk))
	}
	for _, secret := range []string{key, m.Body, group} {
		if s := v.Record + v.GroupHash + v.ConsumerRecord + v.PayloadHash; strings.Contains(s, secret) {
			t.Errorf("the view %+v shows %q", v, secret)
		}
	}

	// No record, a key no record can have, a store that does not answer: three errors,
	// and only the first is ErrNoRecord.
	if _, err := ingressapp.ReadRecord(ctx, f.st.DynamoDB, table, scope, f.scoped(f.key("never-sent"))); !errors.Is(err, ingressapp.ErrNoRecord) || !strings.Contains(err.Error(), table) {
		t.Errorf("a key never sent: %v, want ErrNoRecord naming the table", err)
	}
	if _, err := ingressapp.ReadRecord(ctx, f.st.DynamoDB, table, scope, ""); !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("the empty key: %v, want ErrInvalidKey, before any request", err)
	}
	dead := dynamodb.NewFromConfig(awstest.ConfigFor(t, deadEndpoint(t)), func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	if _, err := ingressapp.ReadRecord(ctx, dead, table, scope, f.scoped(key)); err == nil || errors.Is(err, ingressapp.ErrNoRecord) {
		t.Errorf("a store that does not answer: %v, want its error, not ErrNoRecord", err)
	}
}

// consumerKeyOf is the key the consumer keys msg by: its idempotency-key attribute, or
// the body's field KEY_FIELD names.
func consumerKeyOf(t *testing.T, f *fixture, msg sqstypes.Message) string {
	t.Helper()
	attrs := map[string]events.SQSMessageAttribute{}
	for name, v := range msg.MessageAttributes {
		attrs[name] = events.SQSMessageAttribute{StringValue: v.StringValue, BinaryValue: v.BinaryValue, DataType: aws.ToString(v.DataType)}
	}
	rec := exampletest.FIFORecord(aws.ToString(msg.MessageId), msg.Attributes[string(sqstypes.MessageSystemAttributeNameMessageGroupId)], aws.ToString(msg.Body), attrs)
	rule := f.cfg.KeyRule
	rule.Keys = f.keys(t) // the consumer's: it verifies the ingress's signature
	k, err := rule.Key(rec)
	if err != nil {
		t.Fatalf("the consumer's key of %s: %v", aws.ToString(msg.MessageId), err)
	}
	return k
}

// TestRequestSpans: each request is a span named after its route, with its method,
// route, status and outcome, the caller's key by its keyed hash, and a POST's records (the
// ingress's and the consumer's) and group keyed hash; a 503 marks the span failed with its
// cause, a 4xx does not, and a path with no route keeps the invocation's name.
func TestRequestSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	f := newFixture(t, options{tracer: tp})
	scope := f.env["IDEMPOTENCY_SCOPE"]
	m := f.traffic(t, 1)[0]
	key := f.key("traced")
	wantCode(t, "POST", f.post(t, key, m.Body), http.StatusAccepted)
	msgs := f.inputMessages(t)
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
	pk, err := idem.RecordKey(scope, f.scoped(key), false)
	if err != nil {
		t.Fatal(err)
	}
	cpk, err := idem.RecordKey(scope, consumerKeyOf(t, f, msgs[0]), false)
	if err != nil {
		t.Fatal(err)
	}
	group := msgs[0].Attributes[string(sqstypes.MessageSystemAttributeNameMessageGroupId)]
	span := oneSpan(t, exp)
	wantAttrs(t, "POST", span, map[string]string{
		"http.request.method": "POST", "http.route": "POST " + ingressapp.RequestsPath, "http.response.status_code": "202",
		telemetry.AttrOutcome: ingressapp.MetricAccepted, telemetry.AttrKeyHash: f.keys(t).LogHash(f.scoped(key)), telemetry.AttrRecord: telemetry.RecordTraceID(pk),
		telemetry.AttrGroupHash: f.keys(t).LogHash(group), telemetry.AttrScope: scope, ingressapp.AttrConsumerRecord: telemetry.RecordTraceID(cpk),
	})
	if span.Name != "POST "+ingressapp.RequestsPath || span.Status.Code == codes.Error {
		t.Errorf("POST: span %q, status %v", span.Name, span.Status)
	}

	wantCode(t, "GET", f.get(t, key), http.StatusOK)
	span = oneSpan(t, exp)
	wantAttrs(t, "GET", span, map[string]string{"http.request.method": "GET", "http.route": "GET " + ingressapp.RequestsPath + "/{key}",
		"http.response.status_code": "200", telemetry.AttrKeyHash: f.keys(t).LogHash(f.scoped(key))})
	if span.Name != "GET "+ingressapp.RequestsPath+"/{key}" {
		t.Errorf("GET: span %q", span.Name)
	}

	r, err := f.do(t, f.http, http.MethodPost, ingressapp.RequestsPath, "", []byte(m.Body))
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "POST without a key", r, http.StatusBadRequest)
	span = oneSpan(t, exp)
	wantAttrs(t, "POST without a key", span, map[string]string{"http.response.status_code": "400", telemetry.AttrOutcome: ingressapp.MetricRejected, telemetry.AttrKeyHash: ""})
	if span.Status.Code == codes.Error {
		t.Errorf("a 400 marked the span failed: %v", span.Status)
	}

	r, err = f.do(t, f.http, http.MethodGet, "/nowhere", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "GET of no route", r, http.StatusNotFound)
	if span = oneSpan(t, exp); span.Name != "ingress" {
		t.Errorf("a path with no route: span %q, want the invocation's name, ingress", span.Name)
	}

	down := newFixture(t, options{tracer: tp, deadSQS: true})
	m = down.traffic(t, 1)[0]
	wantCode(t, "POST with the queue down", down.post(t, down.key("down"), m.Body), http.StatusServiceUnavailable)
	span = oneSpan(t, exp)
	if span.Status.Code != codes.Error || span.Status.Description == http.StatusText(http.StatusServiceUnavailable) || span.Status.Description == "" {
		t.Errorf("a 503: span status %+v, want an error with its cause", span.Status)
	}
}

// oneSpan is the one span the exporter holds, which it forgets.
func oneSpan(t *testing.T, exp *tracetest.InMemoryExporter) tracetest.SpanStub {
	t.Helper()
	spans := exp.GetSpans()
	exp.Reset()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1: %+v", len(spans), spans)
	}
	return spans[0]
}

// wantAttrs fails the test unless span has each attribute of want ("": not at all).
func wantAttrs(t *testing.T, what string, span tracetest.SpanStub, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, kv := range span.Attributes {
		got[string(kv.Key)] = kv.Value.String()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: span attribute %s = %q, want %q", what, k, got[k], v)
		}
	}
}

// TestRequestMetrics: each request counts its outcome and observes its duration in
// milliseconds, no longer than the client waited for it.
func TestRequestMetrics(t *testing.T) {
	f := newFixture(t, options{})
	m := f.traffic(t, 1)[0]
	start := time.Now()
	wantCode(t, "POST", f.post(t, f.key("measured"), m.Body), http.StatusAccepted)
	waited := float64(time.Since(start).Microseconds()) / 1000
	var line map[string]any
	for l := range strings.SplitSeq(f.logs.String(), "\n") {
		if strings.Contains(l, `"_aws"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	durations, _ := line[ingressapp.MetricDuration].([]any)
	if line[ingressapp.MetricAccepted] != float64(1) || len(durations) != 1 {
		t.Fatalf("metrics %v: want %s 1 and one %s", line, ingressapp.MetricAccepted, ingressapp.MetricDuration)
	}
	if d, _ := durations[0].(float64); d <= 0 || d > waited {
		t.Errorf("%s = %v ms, want more than 0 and at most the %.3f ms the client waited", ingressapp.MetricDuration, d, waited)
	}
}

// gatedWriter holds its first write until gate is closed, and counts writes that
// overlap another.
type gatedWriter struct {
	gate, entered chan struct{}
	first         sync.Once
	inflight      atomic.Int32
	overlaps      atomic.Int32
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	if w.inflight.Add(1) > 1 {
		w.overlaps.Add(1)
	}
	defer w.inflight.Add(-1)
	w.first.Do(func() {
		close(w.entered)
		<-w.gate
	})
	return len(p), nil
}

// TestConcurrentRequestsWriteWholeLines: requests served at once by one ingress
// (idemctl serve) write their metrics one after another, never into each other: while
// one request's metrics are being written, another's wait.
func TestConcurrentRequestsWriteWholeLines(t *testing.T) {
	f := newFixture(t, options{})
	metrics := &gatedWriter{gate: make(chan struct{}), entered: make(chan struct{})}
	app, err := ingressapp.New(f.cfg, ingressapp.Deps{DynamoDB: f.st.DynamoDB, SQS: f.st.SQS, Logs: io.Discard, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	h := app.Handler()
	// No route: answered without a call to AWS, logged and counted.
	call := func() {
		_, _ = h(context.Background(), event(http.MethodGet, "/nowhere", nil, ""))
	}
	var wg sync.WaitGroup
	wg.Go(call)
	<-metrics.entered // the first request is writing its metrics
	wg.Go(call)
	time.Sleep(200 * time.Millisecond) // the second request's write, if it does not wait
	close(metrics.gate)
	wg.Wait()
	if n := metrics.overlaps.Load(); n != 0 {
		t.Errorf("%d metric writes overlapped another, want none", n)
	}
}

// TestSendingWindowEndsAtTheDeadline: a request's sending window ends at its
// invocation's deadline when that comes before ACCEPT_WINDOW: Lambda stops the sender
// there, and a retry may take over from then.
func TestSendingWindowEndsAtTheDeadline(t *testing.T) {
	f := newFixture(t, options{env: map[string]string{"ACCEPT_WINDOW": "10s"}})
	var failed sync.Once
	app, err := ingressapp.New(f.cfg, ingressapp.Deps{DynamoDB: &failMark{DynamoDBAPI: f.st.DynamoDB, once: &failed}, SQS: f.st.SQS, Logs: io.Discard, Metrics: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	m := f.traffic(t, 1)[0]
	key := f.key("deadline")
	deadline := time.Now().Add(4 * time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	resp := app.Handle(ctx, postEvent(key, m.Body))
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("POST whose mark fails: %d %s", resp.StatusCode, resp.Body)
	}
	v, err := ingressapp.ReadRecord(context.Background(), f.st.DynamoDB, f.env["INGRESS_TABLE"], f.env["IDEMPOTENCY_SCOPE"], f.scoped(key))
	if err != nil {
		t.Fatal(err)
	}
	if v.SendingUntil == nil || v.SendingUntil.After(deadline) || v.SendingUntil.Before(deadline.Add(-time.Second)) {
		t.Errorf("the window ends %v, want at the deadline %v (ACCEPT_WINDOW is 10 s)", v.SendingUntil, deadline)
	}
}
