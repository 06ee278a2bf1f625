package idem

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
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

// Tracing (OpenTelemetry). A Client, a BatchProcessor and a Reaper given a
// TracerProvider (Config.Tracer, BatchConfig.Tracer, Reaper.Tracer) record spans; without
// one they record nothing and cost nothing: every hook is one nil check.
//
// Per SQS record, BatchProcessor starts SpanProcess (kind consumer). Its parent is the
// context the message carries: the W3C traceparent message attribute (TraceParentAttribute),
// else the AWSTraceHeader system attribute when it is sampled, so that the producer's
// span (the ingress's, another consumer's outbound send) and the record's are one trace.
// It links to the span of the invocation (and to an AWSTraceHeader of another trace).
// Under it: SpanAcquire with the idempotency decision (AttrDecision), SpanHandler, a
// SpanStep per step, SpanCommit, SpanRelease, SpanSend per record's outbound messages
// (with SpanMark under it), SpanDeadLetter; and the DynamoDB and SQS calls themselves
// when the SDK clients are instrumented (otelaws). The Reaper records SpanSweep, a
// SpanReap per lease it fails, and SpanSend for the messages it sends. Outbound messages
// carry their SpanSend's context on: a traceparent attribute when the message has room
// for it (SQS's 10 attributes, and the size its queue is known to take: queueRoom), and
// an AWSTraceHeader system attribute, which counts against neither; a message its queue
// refuses with the traceparent is sent again without it.
//
// No span carries a payload, a raw key or a plain hash of one (which anyone could check a
// guess against): keys appear as AttrRecord (the scope alone, as errors show them) and
// AttrKeyHash (Keys.LogHash of the key, as the logs show it), FIFO groups as
// AttrGroupHash (Keys.LogHash); without Keys the hashes are left out.

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
type tracer struct {
	t    trace.Tracer
	room *queueRoom
}

func newTracer(tp trace.TracerProvider) tracer {
	if tp == nil {
		return tracer{}
	}
	return tracer{t: tp.Tracer(tracerName), room: &queueRoom{takes: map[string]int{}}}
}

// queueRoom is what a tracer learned of its outbound queues' own MaximumMessageSize,
// which the outbox cannot read (the functions may only send to those queues): for each
// queue, the largest message it is known to take. Every queue takes MinSQSMessageBytes;
// a queue that took a larger message takes one of that size again; one that refused a
// message with a traceparent takes less than that. A traceparent goes only on a message
// that stays, with it, within what its queue is known to take: it never takes a message
// over its queue's limit.
type queueRoom struct {
	mu    sync.Mutex
	takes map[string]int
}

// limit is the largest message, traceparent included, known to fit queue.
func (r *queueRoom) limit(queue string) int {
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
func (r *queueRoom) took(queue string, size int) {
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
func (r *queueRoom) refused(queue string, size int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n, ok := r.takes[queue]; ok && n >= size {
		r.takes[queue] = max(size-1, sqsmsg.MinSQSMessageBytes)
	}
}

func (t tracer) on() bool { return t.t != nil }

// records reports whether a span started under ctx may be recorded: not when ctx's span
// was not sampled (the provider's sampler follows its parent), which spares an
// unsampled record the spans and their attributes.
func (t tracer) records(ctx context.Context) bool {
	if t.t == nil {
		return false
	}
	sc := trace.SpanContextFromContext(ctx)
	return !sc.IsValid() || sc.IsSampled()
}

func (t tracer) start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return t.t.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// endSpan ends span (nil: tracing off) with err's status.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

var (
	w3c        propagation.TraceContext
	xrayHeader xray.Propagator
)

// recordAttr is AttrRecord of the record key pk.
func recordAttr(pk string) attribute.KeyValue {
	return attribute.String(AttrRecord, persistence.Redact(pk))
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// RecordTraceID is the value of AttrRecord for the record key pk (Client.RecordKey):
// what a span of the key carries instead of the key.
func RecordTraceID(pk string) string { return persistence.Redact(pk) }

// ---------------------------------------------------------------- the record's span

// messageCarrier reads a received message's trace context: its traceparent attribute,
// or its AWSTraceHeader.
type messageCarrier struct{ msg *events.SQSMessage }

func (m messageCarrier) Get(key string) string {
	switch {
	case strings.EqualFold(key, TraceParentAttribute):
		if a, ok := m.msg.MessageAttributes[TraceParentAttribute]; ok && a.StringValue != nil {
			return *a.StringValue
		}
	case strings.EqualFold(key, "X-Amzn-Trace-Id"):
		return m.msg.Attributes[AWSTraceHeader]
	}
	return ""
}
func (m messageCarrier) Set(string, string) {}
func (m messageCarrier) Keys() []string     { return []string{TraceParentAttribute, "X-Amzn-Trace-Id"} }

// startRecord starts the span of one SQS record, under the context the message carries
// and linked to the invocation's span (ctx's).
func (p *BatchProcessor) startRecord(ctx context.Context, msg events.SQSMessage) (context.Context, trace.Span) {
	carrier := messageCarrier{msg: &msg}
	links := make([]trace.Link, 0, 2)
	if inv := trace.SpanContextFromContext(ctx); inv.IsValid() {
		links = append(links, trace.Link{SpanContext: inv})
	}
	parent := trace.SpanContextFromContext(w3c.Extract(context.Background(), carrier))
	amzn := trace.SpanContextFromContext(xrayHeader.Extract(context.Background(), carrier))
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
		attrs = append(attrs, attribute.String(AttrGroupHash, h))
	}
	if n, err := strconv.Atoi(msg.Attributes["ApproximateReceiveCount"]); err == nil {
		attrs = append(attrs, attribute.Int(AttrReceiveCount, n))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...), trace.WithAttributes(attrs...)}
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	} else {
		opts = append(opts, trace.WithNewRoot()) // the invocation is linked, not the parent
	}
	return p.tr.t.Start(ctx, SpanProcess, opts...)
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
		endSpan(span, err)
		return
	}
	span.End()
}

// traceRecord puts what the SQS handler learned of its record on the record's span;
// keyHash is the key's Keys.LogHash ("": left out).
func (c *Client) traceRecord(ctx context.Context, key, keyHash, outcome string, res *Result) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String(AttrScope, c.cfg.Scope), attribute.String(AttrOutcome, outcome))
	if keyHash != "" {
		span.SetAttributes(attribute.String(AttrKeyHash, keyHash))
	}
	if key != "" {
		if pk, err := c.RecordKey(key); err == nil {
			span.SetAttributes(recordAttr(pk))
		}
	}
	if res != nil && res.Attempt > 0 {
		span.SetAttributes(attribute.Int(AttrAttempt, res.Attempt))
	}
}

// ---------------------------------------------------------------- the decision

// decision is the span of an acquire (nil: tracing off).
type decision struct{ span trace.Span }

func (c *Client) startDecision(ctx context.Context, pk string) (context.Context, *decision) {
	if !c.tr.records(ctx) {
		return ctx, nil
	}
	ctx, span := c.tr.start(ctx, SpanAcquire, trace.SpanKindInternal, recordAttr(pk), attribute.String(AttrScope, c.cfg.Scope))
	return ctx, &decision{span: span}
}

// end records what the acquire decided: att (a lease), replay (a stored outcome) or err.
func (d *decision) end(att *Attempt, replay *Result, err error) {
	if d == nil {
		return
	}
	s := d.span
	var held *LeaseHeldError
	switch {
	case att != nil:
		dec := DecisionAcquired
		if att.number > 1 || att.prev != nil {
			dec = DecisionTakenOver
		}
		s.SetAttributes(attribute.String(AttrDecision, dec), attribute.Int(AttrAttempt, att.number),
			attribute.String(AttrOwner, att.lease.Owner), attribute.String(AttrLeaseToken, shortTokenOf(att.lease.Token)),
			attribute.String(AttrLeaseUntil, stamp(att.lease.Until)))
		if old := att.prev; old != nil {
			s.SetAttributes(attribute.String(AttrPreviousOwner, old.Owner), attribute.String(AttrPreviousStatus, string(old.Status)),
				attribute.String(AttrPreviousLease, stamp(old.LeaseUntil)))
		}
	case replay != nil:
		s.SetAttributes(attribute.String(AttrDecision, DecisionReplayed), attribute.Int(AttrMessages, pendingCount(replay.pending)))
	case errors.As(err, &held):
		s.SetAttributes(attribute.String(AttrDecision, DecisionInProgress), attribute.String(AttrOwner, held.Owner),
			attribute.String(AttrLeaseUntil, stamp(held.Until)))
	case errors.Is(err, ErrInProgress):
		s.SetAttributes(attribute.String(AttrDecision, DecisionInProgress))
	case errors.Is(err, ErrPayloadMismatch):
		s.SetAttributes(attribute.String(AttrDecision, DecisionMismatch))
	default:
		var stored *StoredError
		if errors.As(err, &stored) {
			s.SetAttributes(attribute.String(AttrDecision, DecisionStored))
		} else {
			s.SetAttributes(attribute.String(AttrDecision, DecisionError))
			s.SetStatus(codes.Error, err.Error())
		}
	}
	s.End()
}

func pendingCount(p *Pending) int {
	if p == nil {
		return 0
	}
	return len(p.Messages)
}

// traceCached records a decision taken from the in-process cache.
func (c *Client) traceCached(ctx context.Context, pk string, mismatch bool) {
	if !c.tr.records(ctx) {
		return
	}
	dec := DecisionCached
	if mismatch {
		dec = DecisionMismatch
	}
	_, span := c.tr.start(ctx, SpanAcquire, trace.SpanKindInternal, recordAttr(pk), attribute.String(AttrScope, c.cfg.Scope),
		attribute.String(AttrDecision, dec))
	span.End()
}

func shortTokenOf(tok string) string {
	if len(tok) > 8 {
		return tok[:8]
	}
	return tok
}

// startSpan starts a span of c's (nil when tracing is off).
func (c *Client) startSpan(ctx context.Context, name string, pk string) (context.Context, trace.Span) {
	if !c.tr.records(ctx) {
		return ctx, nil
	}
	return c.tr.start(ctx, name, trace.SpanKindInternal, recordAttr(pk))
}

// ---------------------------------------------------------------- outbound messages

// traceOrigin keeps, on p, the span whose record committed it: its send span goes under it.
func (c *Client) traceOrigin(ctx context.Context, p *Pending) {
	if c.tr.on() && p != nil {
		p.origin = trace.SpanContextFromContext(ctx)
	}
}

// sendTrace is the span of one pending's send, with the context its messages carry.
type sendTrace struct {
	span        trace.Span
	ctx         context.Context
	traceparent string
	amzn        string
}

// startSends starts the span of each pending's send (nil: tracing off).
func startSends(ctx context.Context, tr tracer, pendings []*Pending) []sendTrace {
	if !tr.on() {
		return nil
	}
	out := make([]sendTrace, len(pendings))
	for i, p := range pendings {
		pctx := ctx
		if p.origin.IsValid() {
			pctx = trace.ContextWithSpanContext(ctx, p.origin)
		}
		sctx, span := tr.start(pctx, SpanSend, trace.SpanKindProducer, recordAttr(p.Key), attribute.Int(AttrMessages, len(p.Messages)),
			attribute.String("messaging.system", "aws_sqs"), attribute.String("messaging.operation.type", "send"))
		c := propagation.MapCarrier{}
		w3c.Inject(sctx, c)
		xrayHeader.Inject(sctx, c)
		out[i] = sendTrace{span: span, ctx: sctx, traceparent: c[TraceParentAttribute], amzn: c["X-Amzn-Trace-Id"]}
	}
	return out
}

// traceSize is what carrying traceparent adds to a message, as SQS counts its size.
func traceSize(tp string) int { return sqsmsg.StringAttributeCost(TraceParentAttribute, tp) }

// traceRoom reports whether m can carry tp as an attribute within SQS's limits and
// limit, the size its queue is known to take (queueRoom.limit); a message that sets
// traceparent itself keeps its own. A message its queue refuses all the same (its limit
// was lowered) is sent again without it (outboxRun.refused): tracing never costs a
// delivery.
func traceRoom(m *persistence.Message, tp string, limit int) bool {
	if tp == "" || len(m.Attributes) >= sqsmsg.MaxMessageAttributes {
		return false
	}
	if _, ok := m.Attributes[TraceParentAttribute]; ok {
		return false
	}
	return outboundSize(m)+traceSize(tp) <= limit
}

// endSends ends the send spans with each pending's result.
func endSends(sends []sendTrace, pendings []*Pending, errs []error) {
	for i, s := range sends {
		s.span.SetAttributes(attribute.Int(AttrDeadLettered, len(pendings[i].Dead)))
		endSpan(s.span, errs[i])
	}
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
	w3c.Inject(ctx, c)
	xrayHeader.Inject(ctx, c)
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

// ---------------------------------------------------------------- the reaper

func startSweep(ctx context.Context, tr tracer) (context.Context, trace.Span) {
	if tr.on() {
		return tr.start(ctx, SpanSweep, trace.SpanKindInternal)
	}
	return ctx, nil
}

func endSweep(span trace.Span, res SweepResult, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Int(AttrReaped, res.Reaped), attribute.Int("idem.scanned", res.Scanned), attribute.Int("idem.sent", res.Sent),
		attribute.Int("idem.unsent", res.Unsent), attribute.Bool("idem.truncated", res.Truncated))
	endSpan(span, err)
}

// startReap starts the span of the reap of one listed lease (nil: tracing off).
func startReap(ctx context.Context, tr tracer, s persistence.StaleLease) (context.Context, trace.Span) {
	if !tr.records(ctx) {
		return ctx, nil
	}
	return tr.start(ctx, SpanReap, trace.SpanKindInternal, recordAttr(s.Key),
		attribute.String(AttrPreviousOwner, s.Owner), attribute.Int(AttrAttempt, s.Attempt),
		attribute.String(AttrPreviousLease, stamp(s.LeaseUntil)), attribute.String(AttrLeaseToken, shortTokenOf(s.Token)))
}

// endReap ends a reap's span: the lease failed (reaped), or found moved on.
func endReap(span trace.Span, late time.Duration, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Bool(AttrReaped, err == nil))
	if err == nil {
		span.SetAttributes(attribute.Int64(AttrLate, late.Milliseconds()))
	}
	if errors.Is(err, persistence.ErrLeaseLost) {
		err = nil // moved on: not a failure of the sweep
	}
	endSpan(span, err)
}

// ---------------------------------------------------------------- handler, commit, release

func endHandler(span trace.Span, att *Attempt, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Int(AttrAttempt, att.number))
	endSpan(span, err)
}

// endCommit ends a commit's span: what was committed (counts, never contents).
func endCommit(span trace.Span, res, out Result, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Int("idem.writes", len(res.Writes)), attribute.Int(AttrMessages, len(res.Messages)),
		attribute.Bool("idem.guarded", out.Guarded))
	if out.Attempt > 0 {
		span.SetAttributes(attribute.Int(AttrAttempt, out.Attempt))
	}
	endSpan(span, err)
}

func endRelease(span trace.Span, retryable bool, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Bool(AttrRetryable, retryable))
	endSpan(span, err)
}

// startStep starts the span of a step that runs.
func (c *Client) startStep(ctx context.Context, pk, name string) (context.Context, trace.Span) {
	if !c.tr.records(ctx) {
		return ctx, nil
	}
	return c.tr.start(ctx, SpanStep, trace.SpanKindInternal, recordAttr(pk), attribute.String(AttrStep, name))
}

// traceStepDone records a step an earlier attempt completed, skipped.
func (c *Client) traceStepDone(ctx context.Context, pk, name string) {
	if !c.tr.records(ctx) {
		return
	}
	_, span := c.tr.start(ctx, SpanStep, trace.SpanKindInternal, recordAttr(pk), attribute.String(AttrStep, name), attribute.Bool(AttrStepDone, true))
	span.End()
}

// startSpan starts a span of p's under ctx (nil when tracing is off).
func (p *BatchProcessor) startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	if !p.tr.records(ctx) {
		return ctx, nil
	}
	return p.tr.start(ctx, name, trace.SpanKindInternal)
}

// startMark starts the span of the mark that pending i's messages were sent, under its
// send's span (nil: tracing off).
func startMark(ctx context.Context, tr tracer, sends []sendTrace, i int, p *Pending) (context.Context, trace.Span) {
	if sends == nil || !sends[i].span.IsRecording() {
		return ctx, nil
	}
	return tr.start(trace.ContextWithSpan(ctx, sends[i].span), SpanMark, trace.SpanKindInternal, recordAttr(p.Key))
}

// handleRoot is handle under a span of its own, for a call with no span in its context
// (the library used without a BatchProcessor): the request's spans are one trace.
func (c *Client) handleRoot(ctx context.Context, req *Request, next Handler) (Result, error) {
	ctx, span := c.tr.start(ctx, SpanRequest, trace.SpanKindInternal, attribute.String(AttrScope, c.cfg.Scope))
	if pk, err := c.RecordKey(req.Key); err == nil {
		span.SetAttributes(recordAttr(pk)) // no key hash: a Client has no Keys to key it with
	}
	res, err := c.handle(ctx, req, next)
	span.SetAttributes(attribute.Bool("idem.replayed", res.Replayed))
	if res.Attempt > 0 {
		span.SetAttributes(attribute.Int(AttrAttempt, res.Attempt))
	}
	endSpan(span, err)
	return res, err
}
