package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/funcurl"
	"github.com/idemgo/sqs-lambda-consumer/internal/tracing"
)

func TestMain(m *testing.M) { os.Exit(awstest.MainOwn(m)) }

// spans is what the in-memory exporter holds, with lookups.
type spans tracetest.SpanStubs

func (ss spans) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range ss {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func (ss spans) one(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	got := ss.named(name)
	if len(got) != 1 {
		var all []string
		for _, s := range ss {
			all = append(all, s.Name)
		}
		t.Fatalf("%d spans named %s, want 1; spans: %v", len(got), name, all)
	}
	return got[0]
}

// children are the spans whose parent is s.
func (ss spans) children(s tracetest.SpanStub) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, c := range ss {
		if c.Parent.SpanID() == s.SpanContext.SpanID() && c.SpanContext.TraceID() == s.SpanContext.TraceID() {
			out = append(out, c)
		}
	}
	return out
}

// childrenNamed are the children of s named name.
func (ss spans) childrenNamed(s tracetest.SpanStub, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, c := range ss.children(s) {
		if c.Name == name {
			out = append(out, c)
		}
	}
	return out
}

// childNamed is the one child of s named name.
func (ss spans) childNamed(t *testing.T, s tracetest.SpanStub, name string) tracetest.SpanStub {
	t.Helper()
	found := ss.childrenNamed(s, name)
	if len(found) != 1 {
		var names []string
		for _, c := range ss.children(s) {
			names = append(names, c.Name)
		}
		t.Fatalf("%s has %d children named %s, want 1; its children: %v", s.Name, len(found), name, names)
	}
	return found[0]
}

// value is the span's attribute key (an empty value when it has none).
func value(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func attr(s tracetest.SpanStub, key string) string { return value(s, key).String() }

// TestOneTracePerRequest follows one HTTP request through the ingress, the input queue,
// the consumer and its outbound message (the receipt), all on moto with the real SDK
// clients instrumented, and finds one trace: the client's span, the ingress's under it
// (its DynamoDB calls and the SendMessage under that), the consumer's record span under
// the ingress's (the message carried its context), linked to the consumer's invocation;
// under the record the decision with its PutItem, the handler, the commit with its
// transaction, the send with its SendMessageBatch and its mark; and the receipt carrying
// the send's context. No span holds the key or the body.
func TestOneTracePerRequest(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	ex := exampletest.Example(t)
	st := exampletest.Up(t, ex)
	vars := st.Vars(exampletest.TestEnv)
	lookup := exampletest.LookupIn(vars)
	awsCfg := awstest.Config(t)
	tracing.InstrumentAWSWith(&awsCfg, tp)
	ddb, sq := dynamodb.NewFromConfig(awsCfg), sqs.NewFromConfig(awsCfg)

	icfg, err := ingressapp.FromEnvOf([]example.Example{ex}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	app, err := ingressapp.New(icfg, ingressapp.Deps{DynamoDB: ddb, SQS: sq, Logs: io.Discard, Metrics: io.Discard, Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	url, stop, err := funcurl.Listen("127.0.0.1:0", &funcurl.Server{Invoke: app.Invoke, Caller: funcurl.LocalCaller("test")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)

	// The client: a span of its own, its context in the traceparent header.
	msg := exampletest.Traffic(t, ex).Traffic(rand.New(rand.NewPCG(1, 2)), "tr"+awstest.RunID(), 1, 1)[0]
	if err := example.Prepare(context.Background(), ex, st.DynamoDB, st.Lookup, []example.Message{msg}); err != nil {
		t.Fatal(err)
	}
	key := "customer-4711@example.com:" + awstest.RunID() // a key that holds personal data
	ctx, client := tp.Tracer("test").Start(context.Background(), "client POST", trace.WithSpanKind(trace.SpanKindClient))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+ingressapp.RequestsPath, strings.NewReader(msg.Body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(ingressapp.KeyHeader, key)
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	client.End()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST: %d %s", resp.StatusCode, body)
	}

	// The consumer, as main.go builds it, on the instrumented clients.
	cfg := st.Config(t)
	h, err := consumerapp.New(cfg, consumerapp.Deps{DynamoDB: ddb, SQS: sq, Logs: io.Discard, Metrics: io.Discard, Owner: t.Name(), Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	if done := exampletest.Consume(t, st.SQS, st.Must(t, "QUEUE_URL"), h); done.Received != 1 || done.Deleted != 1 {
		t.Fatalf("consumed %+v, want the one message applied", done)
	}

	ss := spans(exp.GetSpans())
	traceID := client.SpanContext().TraceID()
	ingress := ss.one(t, "POST "+ingressapp.RequestsPath)
	if ingress.Parent.SpanID() != client.SpanContext().SpanID() || ingress.SpanContext.TraceID() != traceID || ingress.SpanKind != trace.SpanKindServer {
		t.Errorf("the ingress's span: parent %s trace %s kind %v; want the client's %s in %s, server", ingress.Parent.SpanID(), ingress.SpanContext.TraceID(),
			ingress.SpanKind, client.SpanContext().SpanID(), traceID)
	}
	pk, err := idem.RecordKey(cfg.Scope, key, false)
	if err != nil {
		t.Fatal(err)
	}
	if attr(ingress, "http.response.status_code") != "202" || attr(ingress, telemetry.AttrRecord) != telemetry.RecordTraceID(pk) {
		t.Errorf("the ingress's span attributes %v", ingress.Attributes)
	}
	ss.childNamed(t, ingress, "SQS.SendMessage")
	ss.childNamed(t, ingress, "DynamoDB.PutItem")

	process := ss.one(t, telemetry.SpanProcess)
	if process.Parent.SpanID() != ingress.SpanContext.SpanID() || process.SpanContext.TraceID() != traceID {
		t.Errorf("the record's span: parent %s trace %s; want the ingress's %s in %s", process.Parent.SpanID(), process.SpanContext.TraceID(),
			ingress.SpanContext.SpanID(), traceID)
	}
	invocation := ss.one(t, "consumer")
	if len(process.Links) != 1 || process.Links[0].SpanContext.SpanID() != invocation.SpanContext.SpanID() {
		t.Errorf("the record's span links %v, want the consumer's invocation %s", process.Links, invocation.SpanContext.SpanID())
	}
	if attr(process, telemetry.AttrRecord) != telemetry.RecordTraceID(pk) || attr(process, telemetry.AttrOutcome) != "applied" || attr(process, telemetry.AttrAttempt) != "1" {
		t.Errorf("the record's span attributes %v", process.Attributes)
	}
	acquire := ss.childNamed(t, process, telemetry.SpanAcquire)
	// The holder is the invocation's request id (Consume names them consume-N).
	if attr(acquire, telemetry.AttrDecision) != telemetry.DecisionAcquired || !strings.HasPrefix(attr(acquire, telemetry.AttrOwner), "consume-") {
		t.Errorf("the decision %v", acquire.Attributes)
	}
	ss.childNamed(t, acquire, "DynamoDB.PutItem")
	ss.childNamed(t, process, telemetry.SpanHandler)
	commit := ss.childNamed(t, process, telemetry.SpanCommit)
	ss.childNamed(t, commit, "DynamoDB.TransactWriteItems")

	// The record's outbound messages (the ledger's receipt) go in one send, a
	// SendMessageBatch per queue (the record has at most 10 per queue), marked sent once;
	// those on the example's outbound queue carry the send's context.
	if _, outVar := exampletest.Confirms(ex); outVar != "" {
		send := ss.childNamed(t, process, telemetry.SpanSend)
		messages := int(value(send, telemetry.AttrMessages).AsInt64())
		if batches := len(ss.childrenNamed(send, "SQS.SendMessageBatch")); batches < 1 || batches > messages {
			t.Errorf("%d SendMessageBatch under the send of %d messages, want 1 to %d (one per queue)", batches, messages, messages)
		}
		ss.childNamed(t, send, telemetry.SpanMark)
		receipts := exampletest.DrainAll(t, st.SQS, st.Must(t, outVar))
		if len(receipts) < 1 || len(receipts) > messages {
			t.Fatalf("%d messages on %s, want 1 to the record's %d", len(receipts), outVar, messages)
		}
		for _, r := range receipts {
			tp := aws.ToString(r.MessageAttributes[telemetry.TraceParentAttribute].StringValue)
			if want := fmt.Sprintf("00-%s-%s-01", traceID, send.SpanContext.SpanID()); tp != want {
				t.Errorf("the outbound message's traceparent %q, want the send's %q", tp, want)
			}
		}
	}

	// One trace: every span but the consumer's invocation (linked) is in the client's.
	for _, s := range ss {
		if s.SpanContext.TraceID() != traceID && s.Name != "consumer" {
			t.Errorf("span %s is in trace %s, not the request's %s", s.Name, s.SpanContext.TraceID(), traceID)
		}
		raw, _ := json.Marshal(s.Attributes)
		for _, secret := range []string{key, msg.Body, msg.Key} {
			if secret != "" && bytes.Contains(raw, []byte(secret)) {
				t.Errorf("span %s carries %q: %s", s.Name, secret, raw)
			}
		}
	}
	t.Logf("%d spans in trace %s", len(ss), traceID)
}
