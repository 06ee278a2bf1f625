package telemetry

import (
	"context"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"go.opentelemetry.io/contrib/propagators/aws/xray"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Span names.
const (
	SpanProcess    = "idem.process"
	SpanRequest    = "idem.request" // Client.Do or Middleware called with no span in its context
	SpanAcquire    = "idem.acquire"
	SpanHandler    = "idem.handler"
	SpanStep       = "idem.step"
	SpanCommit     = "idem.commit"
	SpanRelease    = "idem.release"
	SpanSend       = "idem.send"
	SpanMark       = "idem.mark"
	SpanDeadLetter = "idem.dead_letter"
	SpanSweep      = "idem.sweep"
	SpanReap       = "idem.reap"
)

// Span attributes.
const (
	AttrRecord         = "idem.record"     // scope#h:<HashKey of the key part>: the record, never the key
	AttrKeyHash        = "idem.key_hash"   // Keys.LogHash(key), as the log lines have it
	AttrScope          = "idem.scope"      // Config.Scope
	AttrAttempt        = "idem.attempt"    // which acquisition of the key
	AttrDecision       = "idem.decision"   // SpanAcquire: Decision*
	AttrOutcome        = "idem.outcome"    // SpanProcess: what became of the record (the log line's outcome)
	AttrGroupHash      = "idem.group_hash" // Keys.LogHash(MessageGroupId), as the log lines have it
	AttrOwner          = "idem.owner"      // who holds the lease: the Lambda request id, or Config.Owner
	AttrLeaseToken     = "idem.lease_token"
	AttrLeaseUntil     = "idem.lease_until" // RFC 3339, UTC
	AttrPreviousOwner  = "idem.previous_owner"
	AttrPreviousLease  = "idem.previous_lease_until"
	AttrPreviousStatus = "idem.previous_status"
	AttrReceiveCount   = "idem.receive_count"
	AttrStep           = "idem.step"
	AttrStepDone       = "idem.step_done" // the step was completed by an earlier attempt: skipped
	AttrMessages       = "idem.messages"  // outbound messages
	AttrDeadLettered   = "idem.dead_lettered"
	AttrRetryable      = "idem.retryable"
	AttrReaped         = "idem.reaped"
	AttrLate           = "idem.late_ms" // SpanReap: how long past its end plus the grace the lease was
	AttrMode           = "idem.mode"
)

// Decisions of SpanAcquire (AttrDecision).
const (
	DecisionAcquired   = "acquired"    // a first lease on the key
	DecisionTakenOver  = "taken_over"  // the lease of a holder that ended (or failed retryably), taken over
	DecisionReplayed   = "replayed"    // the key is completed: its stored response
	DecisionCached     = "cached"      // completed, answered from the in-process cache without a request
	DecisionInProgress = "in_progress" // a live lease holds the key
	DecisionMismatch   = "mismatch"    // the key was used with another payload
	DecisionStored     = "stored_failure"
	DecisionError      = "error" // the store failed: nothing decided
)

// TraceParentAttribute is the String message attribute that carries the W3C trace
// context (https://www.w3.org/TR/trace-context/) of the span that sent a message.
const TraceParentAttribute = "traceparent"

// AWSTraceHeader is the SQS system attribute that carries an X-Ray trace header.
// https://docs.aws.amazon.com/xray/latest/devguide/xray-services-sqs.html
const AWSTraceHeader = "AWSTraceHeader"

// tracerName names the instrumentation scope of this package's spans.
const tracerName = "github.com/idemgo/sqs-lambda-consumer/idem"

// tracer is a Tracer, or nothing (the zero value): tracing off.
type Tracer struct {
	T    trace.Tracer
	Room *QueueRoom
}

func NewTracer(tp trace.TracerProvider) Tracer {
	if tp == nil {
		return Tracer{}
	}
	return Tracer{T: tp.Tracer(tracerName), Room: &QueueRoom{takes: map[string]int{}}}
}

// queueRoom is what a tracer learned of its outbound queues' own MaximumMessageSize,
// which the outbox cannot read (the functions may only send to those queues): for each
// queue, the largest message it is known to take. Every queue takes MinSQSMessageBytes;
// a queue that took a larger message takes one of that size again; one that refused a
// message with a traceparent takes less than that. A traceparent goes only on a message
// that stays, with it, within what its queue is known to take: it never takes a message
// over its queue's limit.
type QueueRoom struct {
	mu    sync.Mutex
	takes map[string]int
}

// limit is the largest message, traceparent included, known to fit queue.
func (r *QueueRoom) Limit(queue string) int {
	if r == nil {
		return sqsmsg.MinSQSMessageBytes
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n, ok := r.takes[queue]; ok {
		return n
	}
	return sqsmsg.MinSQSMessageBytes
}

// took notes that queue took a message of size bytes.
func (r *QueueRoom) Took(queue string, size int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if size > r.takes[queue] {
		r.takes[queue] = min(size, sqsmsg.MaxOutboundMessageBytes)
	}
}

// refused notes that queue refused a message of size bytes with a traceparent: its
// limit was lowered since it took a larger one.
func (r *QueueRoom) Refused(queue string, size int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n, ok := r.takes[queue]; ok && n >= size {
		r.takes[queue] = max(size-1, sqsmsg.MinSQSMessageBytes)
	}
}

func (t Tracer) On() bool { return t.T != nil }

// records reports whether a span started under ctx may be recorded: not when ctx's span
// was not sampled (the provider's sampler follows its parent), which spares an
// unsampled record the spans and their attributes.
func (t Tracer) Records(ctx context.Context) bool {
	if t.T == nil {
		return false
	}
	sc := trace.SpanContextFromContext(ctx)
	return !sc.IsValid() || sc.IsSampled()
}

func (t Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return t.T.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// endSpan ends span (nil: tracing off) with err's status.
func EndSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

var (
	W3C        propagation.TraceContext
	XRayHeader xray.Propagator
)

// recordAttr is AttrRecord of the record key pk.
func RecordAttr(pk string) attribute.KeyValue {
	return attribute.String(AttrRecord, persistence.Redact(pk))
}

func Stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// RecordTraceID is the value of AttrRecord for the record key pk (Client.RecordKey):
// what a span of the key carries instead of the key.
func RecordTraceID(pk string) string { return persistence.Redact(pk) }

func ShortTokenOf(tok string) string {
	if len(tok) > 8 {
		return tok[:8]
	}
	return tok
}

// InjectTrace puts the trace context of ctx's span on a message a producer sends: the
// traceparent attribute (when the message has fewer than 10 attributes and none of
// that name) and the AWSTraceHeader system attribute, so that the consumer's record span
// is in the producer's trace. Without a span in ctx it changes nothing.
func InjectTrace(ctx context.Context, in *sqs.SendMessageInput) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	c := propagation.MapCarrier{}
	W3C.Inject(ctx, c)
	XRayHeader.Inject(ctx, c)
	if tp := c[TraceParentAttribute]; tp != "" && len(in.MessageAttributes) < sqsmsg.MaxMessageAttributes {
		if _, ok := in.MessageAttributes[TraceParentAttribute]; !ok {
			if in.MessageAttributes == nil {
				in.MessageAttributes = map[string]sqstypes.MessageAttributeValue{}
			}
			in.MessageAttributes[TraceParentAttribute] = sqsmsg.StringAttribute(tp)
		}
	}
	if h := c["X-Amzn-Trace-Id"]; h != "" {
		if in.MessageSystemAttributes == nil {
			in.MessageSystemAttributes = map[string]sqstypes.MessageSystemAttributeValue{}
		}
		in.MessageSystemAttributes[AWSTraceHeader] = sqstypes.MessageSystemAttributeValue{DataType: aws.String("String"), StringValue: aws.String(h)}
	}
}
