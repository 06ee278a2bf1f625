package tracing

import (
	"context"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"go.opentelemetry.io/contrib/propagators/aws/xray"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// flushTimeout bounds the flush at the end of an invocation: a collector that does not
// answer costs an invocation this much at most, never its records (done by then).
const flushTimeout = 2 * time.Second

// Invocation wraps a Lambda handler so that each invocation is a span named name, of
// kind kind, under what parent finds in the event (nil, or an invalid context: the
// Lambda's own X-Ray trace header when it is sampled, else a new trace), and so that tp
// is flushed once the handler returned: Lambda may freeze the process as soon as the
// invocation ends. With tp nil it returns h itself.
func Invocation[E, R any](tp trace.TracerProvider, name string, kind trace.SpanKind, trigger string,
	parent func(ctx context.Context, ev E) trace.SpanContext, h func(context.Context, E) (R, error),
) func(context.Context, E) (R, error) {
	if tp == nil {
		return h
	}
	tracer := tp.Tracer("github.com/idemgo/sqs-lambda-consumer/internal/tracing")
	flusher, _ := tp.(interface{ ForceFlush(context.Context) error })
	return func(ctx context.Context, ev E) (R, error) {
		var sc trace.SpanContext
		if parent != nil {
			sc = parent(ctx, ev)
		}
		if !sc.IsValid() {
			sc = lambdaTrace(ctx)
		}
		opts := []trace.SpanStartOption{trace.WithSpanKind(kind), trace.WithAttributes(attribute.String("faas.trigger", trigger))}
		if sc.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		} else {
			opts = append(opts, trace.WithNewRoot())
		}
		if lc, ok := lambdacontext.FromContext(ctx); ok {
			opts = append(opts, trace.WithAttributes(attribute.String("faas.invocation_id", lc.AwsRequestID),
				attribute.String("cloud.resource_id", lc.InvokedFunctionArn)))
		}
		ctx, span := tracer.Start(ctx, name, opts...)
		out, err := h(ctx, ev)
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		if flusher != nil {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
			_ = flusher.ForceFlush(fctx) // a lost export must not fail the invocation
			cancel()
		}
		return out, err
	}
}

// lambdaTrace is the X-Ray trace header Lambda gave the invocation, when it is sampled
// (with the function's tracing PassThrough, Lambda passes one that is not sampled,
// which would leave the invocation untraced).
func lambdaTrace(ctx context.Context) trace.SpanContext {
	h, _ := ctx.Value("x-amzn-trace-id").(string) // aws-lambda-go's key for it
	if h == "" {
		return trace.SpanContext{}
	}
	sc := trace.SpanContextFromContext(xray.Propagator{}.Extract(context.Background(), propagation.MapCarrier{"X-Amzn-Trace-Id": h}))
	if !sc.IsSampled() {
		return trace.SpanContext{}
	}
	return sc
}

// HeaderParent is the trace context an HTTP request's headers carry (traceparent), for
// the ingress's invocation.
func HeaderParent(headers map[string]string) trace.SpanContext {
	c := propagation.MapCarrier{}
	for k, v := range headers {
		c[k] = v
	}
	// MapCarrier's Get is exact; a function URL gives header names in lower case.
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), c))
}
