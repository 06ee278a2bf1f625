package sqsbatch

import (
	"context"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// messageCarrier reads a received message's trace context: its traceparent attribute,
// or its AWSTraceHeader.
type messageCarrier struct{ msg *events.SQSMessage }

func (m messageCarrier) Get(key string) string {
	switch {
	case strings.EqualFold(key, telemetry.TraceParentAttribute):
		if a, ok := m.msg.MessageAttributes[telemetry.TraceParentAttribute]; ok && a.StringValue != nil {
			return *a.StringValue
		}
	case strings.EqualFold(key, "X-Amzn-Trace-Id"):
		return m.msg.Attributes[telemetry.AWSTraceHeader]
	}
	return ""
}

func (m messageCarrier) Set(string, string) {}

func (m messageCarrier) Keys() []string {
	return []string{telemetry.TraceParentAttribute, "X-Amzn-Trace-Id"}
}

// startRecord starts the span of one SQS record, under the context the message carries
// and linked to the invocation's span (ctx's).
func (p *BatchProcessor) startRecord(ctx context.Context, msg events.SQSMessage) (context.Context, trace.Span) {
	carrier := messageCarrier{msg: &msg}
	links := make([]trace.Link, 0, 2)
	if inv := trace.SpanContextFromContext(ctx); inv.IsValid() {
		links = append(links, trace.Link{SpanContext: inv})
	}
	parent := trace.SpanContextFromContext(telemetry.W3C.Extract(context.Background(), carrier))
	amzn := trace.SpanContextFromContext(telemetry.XRayHeader.Extract(context.Background(), carrier))
	switch {
	case !parent.IsValid() && amzn.IsValid() && amzn.IsSampled():
		// No W3C context: an X-Ray one (a Lambda producer with active tracing, say) is
		// the parent when it was sampled. One not sampled is only linked: it would leave
		// the record untraced.
		parent = amzn
	case amzn.IsValid() && amzn.TraceID() != parent.TraceID():
		links = append(links, trace.Link{SpanContext: amzn})
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, attribute.String("messaging.system", "aws_sqs"), attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.message.id", msg.MessageId))
	if q := queueName(msg.EventSourceARN); q != "" {
		attrs = append(attrs, attribute.String("messaging.destination.name", q))
	}
	if h := p.keys.LogHash(msg.Attributes["MessageGroupId"]); h != "" && msg.Attributes["MessageGroupId"] != "" {
		attrs = append(attrs, attribute.String(telemetry.AttrGroupHash, h))
	}
	if n, err := strconv.Atoi(msg.Attributes["ApproximateReceiveCount"]); err == nil {
		attrs = append(attrs, attribute.Int(telemetry.AttrReceiveCount, n))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...), trace.WithAttributes(attrs...)}
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	} else {
		opts = append(opts, trace.WithNewRoot()) // the invocation is linked, not the parent
	}
	return p.tr.T.Start(ctx, telemetry.SpanProcess, opts...)
}

// queueName is the queue name of an SQS ARN.
func queueName(arn string) string {
	if i := strings.LastIndexByte(arn, ':'); i >= 0 {
		return arn[i+1:]
	}
	return ""
}

// endRecord ends a record's span with its final outcome.
func endRecord(span trace.Span, o outcome, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String("idem.batch_outcome", o.String()))
	if o.failed() || o == outcomeDeadLettered {
		telemetry.EndSpan(span, err)
		return
	}
	span.End()
}

// startSpan starts a span of p's under ctx (nil when tracing is off).
func (p *BatchProcessor) startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	if !p.tr.Records(ctx) {
		return ctx, nil
	}
	return p.tr.Start(ctx, name, trace.SpanKindInternal)
}
