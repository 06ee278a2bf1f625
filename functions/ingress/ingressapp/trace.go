package ingressapp

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"github.com/idemgo/sqs-lambda-consumer/internal/tracing"
)

// traced makes each invocation a span (internal/tracing), under the trace context the
// request's traceparent header carries, if any: the client's trace, continued through
// the queue into the consumer's record span (the message carries this one's context).
func traced(tp trace.TracerProvider, h Handler) Handler {
	return tracing.Invocation(tp, "ingress", trace.SpanKindServer, "http", func(_ context.Context, req LambdaFunctionURLRequest) trace.SpanContext {
		return tracing.HeaderParent(req.Headers)
	}, h)
}

// traceKeys puts the records of a POST on its span: the ingress's own and the consumer's
// (which differ when the consumer keys by a field of the body), as telemetry.RecordTraceID has
// them (never the key), and the FIFO group's keyed hash (Keys.LogHash, as the logs have it).
func (a *App) traceKeys(ctx context.Context, pk, consumerKey, group string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String(telemetry.AttrRecord, telemetry.RecordTraceID(pk)), attribute.String(telemetry.AttrScope, a.cfg.Scope))
	if h := a.cfg.Keys.LogHash(group); h != "" {
		span.SetAttributes(attribute.String(telemetry.AttrGroupHash, h))
	}
	if cpk, err := idem.RecordKey(a.cfg.Scope, consumerKey, false); err == nil {
		span.SetAttributes(attribute.String(AttrConsumerRecord, telemetry.RecordTraceID(cpk)))
	}
}

// AttrConsumerRecord is, on the ingress's span, the consumer's record of the request
// (telemetry.RecordTraceID of its record key).
const AttrConsumerRecord = "idem.consumer_record"

// traceRequest names the invocation's span after the route and puts the answer on it,
// and the key's keyed hash (keyHash, Keys.LogHash; "" for none).
func traceRequest(ctx context.Context, req LambdaFunctionURLRequest, keyHash, route string, ans answer) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if route != "" {
		span.SetName(route)
	}
	span.SetAttributes(attribute.String("http.request.method", req.RequestContext.HTTP.Method), attribute.String("http.route", route),
		attribute.Int("http.response.status_code", ans.code), attribute.String(telemetry.AttrOutcome, ans.outcome))
	if keyHash != "" {
		span.SetAttributes(attribute.String(telemetry.AttrKeyHash, keyHash))
	}
	if ans.code >= http.StatusInternalServerError {
		msg := http.StatusText(ans.code)
		if ans.err != nil {
			msg = ans.err.Error()
		}
		span.SetStatus(codes.Error, msg)
	}
}
