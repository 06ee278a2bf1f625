package ingressapp_test

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// quietSpan is a caller's span that is not recording, yet keeps what it is given.
type quietSpan struct {
	noop.Span
	attrs  []attribute.KeyValue
	name   string
	status codes.Code
}

func (*quietSpan) IsRecording() bool                        { return false }
func (s *quietSpan) SetAttributes(kv ...attribute.KeyValue) { s.attrs = append(s.attrs, kv...) }
func (s *quietSpan) SetName(name string)                    { s.name = name }
func (s *quietSpan) SetStatus(code codes.Code, _ string)    { s.status = code }

// TestIngressWritesNothingToASpanThatIsNotRecording: an ingress without a tracer, called
// under a span of the caller's that says it does not record, writes nothing to it:
// neither the request's records, nor its route, nor its answer.
func TestIngressWritesNothingToASpanThatIsNotRecording(t *testing.T) {
	f := newFixture(t, options{})
	m := f.traffic(t, 1)[0]
	app := f.direct(t, f.cfg)
	span := &quietSpan{}
	resp, err := app.Handler()(trace.ContextWithSpan(context.Background(), span), postEvent(f.key("quiet"), m.Body))
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST: %d %v, want 202", resp.StatusCode, err)
	}
	if len(span.attrs) != 0 || span.name != "" || span.status != codes.Unset {
		t.Errorf("a span that is not recording was given %v, the name %q, the status %v", span.attrs, span.name, span.status)
	}
}
