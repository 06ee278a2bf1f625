package outbox

import (
	"context"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// sendTrace is the span of one pending's send, with the context its messages carry.
type sendTrace struct {
	span        trace.Span
	ctx         context.Context
	traceparent string
	amzn        string
}

// startSends starts the span of each pending's send (nil: tracing off).
func startSends(ctx context.Context, tr telemetry.Tracer, pendings []*Pending) []sendTrace {
	if !tr.On() {
		return nil
	}
	out := make([]sendTrace, len(pendings))
	for i, p := range pendings {
		pctx := ctx
		if p.Origin.IsValid() {
			pctx = trace.ContextWithSpanContext(ctx, p.Origin)
		}
		sctx, span := tr.Start(pctx, telemetry.SpanSend, trace.SpanKindProducer, telemetry.RecordAttr(p.Key), attribute.Int(telemetry.AttrMessages, len(p.Messages)),
			attribute.String("messaging.system", "aws_sqs"), attribute.String("messaging.operation.type", "send"))
		c := propagation.MapCarrier{}
		telemetry.W3C.Inject(sctx, c)
		telemetry.XRayHeader.Inject(sctx, c)
		out[i] = sendTrace{span: span, ctx: sctx, traceparent: c[telemetry.TraceParentAttribute], amzn: c["X-Amzn-Trace-Id"]}
	}
	return out
}

// traceSize is what carrying traceparent adds to a message, as SQS counts its size.
func traceSize(tp string) int { return sqsmsg.StringAttributeCost(telemetry.TraceParentAttribute, tp) }

// traceRoom reports whether m can carry tp as an attribute within SQS's limits and
// limit, the size its queue is known to take (queueRoom.limit); a message that sets
// traceparent itself keeps its own. A message its queue refuses all the same (its limit
// was lowered) is sent again without it (outboxRun.refused): tracing never costs a
// delivery.
func traceRoom(m *persistence.Message, tp string, limit int) bool {
	if tp == "" || len(m.Attributes) >= sqsmsg.MaxMessageAttributes {
		return false
	}
	if _, ok := m.Attributes[telemetry.TraceParentAttribute]; ok {
		return false
	}
	return outboundSize(m)+traceSize(tp) <= limit
}

// endSends ends the send spans with each pending's result.
func endSends(sends []sendTrace, pendings []*Pending, errs []error) {
	for i, s := range sends {
		s.span.SetAttributes(attribute.Int(telemetry.AttrDeadLettered, len(pendings[i].Dead)))
		telemetry.EndSpan(s.span, errs[i])
	}
}

// startMark starts the span of the mark that pending i's messages were sent, under its
// send's span (nil: tracing off).
func startMark(ctx context.Context, tr telemetry.Tracer, sends []sendTrace, i int, p *Pending) (context.Context, trace.Span) {
	if sends == nil || !sends[i].span.IsRecording() {
		return ctx, nil
	}
	return tr.Start(trace.ContextWithSpan(ctx, sends[i].span), telemetry.SpanMark, trace.SpanKindInternal, telemetry.RecordAttr(p.Key))
}
