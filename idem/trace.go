package idem

import (
	"context"
	"errors"

	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// ---------------------------------------------------------------- the record's span

// ---------------------------------------------------------------- the decision

// decision is the span of an acquire (nil: tracing off).
type decision struct{ span trace.Span }

func (c *Client) startDecision(ctx context.Context, pk string) (context.Context, *decision) {
	if !c.tr.Records(ctx) {
		return ctx, nil
	}
	ctx, span := c.tr.Start(ctx, telemetry.SpanAcquire, trace.SpanKindInternal, telemetry.RecordAttr(pk), attribute.String(telemetry.AttrScope, c.cfg.Scope))
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
		dec := telemetry.DecisionAcquired
		if att.number > 1 || att.prev != nil {
			dec = telemetry.DecisionTakenOver
		}
		s.SetAttributes(attribute.String(telemetry.AttrDecision, dec), attribute.Int(telemetry.AttrAttempt, att.number),
			attribute.String(telemetry.AttrOwner, att.lease.Owner), attribute.String(telemetry.AttrLeaseToken, telemetry.ShortTokenOf(att.lease.Token)),
			attribute.String(telemetry.AttrLeaseUntil, telemetry.Stamp(att.lease.Until)))
		if old := att.prev; old != nil {
			s.SetAttributes(attribute.String(telemetry.AttrPreviousOwner, old.Owner), attribute.String(telemetry.AttrPreviousStatus, string(old.Status)),
				attribute.String(telemetry.AttrPreviousLease, telemetry.Stamp(old.LeaseUntil)))
		}
	case replay != nil:
		s.SetAttributes(attribute.String(telemetry.AttrDecision, telemetry.DecisionReplayed), attribute.Int(telemetry.AttrMessages, pendingCount(replay.pending)))
	case errors.As(err, &held):
		s.SetAttributes(attribute.String(telemetry.AttrDecision, telemetry.DecisionInProgress), attribute.String(telemetry.AttrOwner, held.Owner),
			attribute.String(telemetry.AttrLeaseUntil, telemetry.Stamp(held.Until)))
	case errors.Is(err, ErrInProgress):
		s.SetAttributes(attribute.String(telemetry.AttrDecision, telemetry.DecisionInProgress))
	case errors.Is(err, ErrPayloadMismatch):
		s.SetAttributes(attribute.String(telemetry.AttrDecision, telemetry.DecisionMismatch))
	default:
		var stored *StoredError
		if errors.As(err, &stored) {
			s.SetAttributes(attribute.String(telemetry.AttrDecision, telemetry.DecisionStored))
		} else {
			s.SetAttributes(attribute.String(telemetry.AttrDecision, telemetry.DecisionError))
			s.SetStatus(codes.Error, err.Error())
		}
	}
	s.End()
}

func pendingCount(p *outbox.Pending) int {
	if p == nil {
		return 0
	}
	return len(p.Messages)
}

// traceCached records a decision taken from the in-process cache.
func (c *Client) traceCached(ctx context.Context, pk string, mismatch bool) {
	if !c.tr.Records(ctx) {
		return
	}
	dec := telemetry.DecisionCached
	if mismatch {
		dec = telemetry.DecisionMismatch
	}
	_, span := c.tr.Start(ctx, telemetry.SpanAcquire, trace.SpanKindInternal, telemetry.RecordAttr(pk), attribute.String(telemetry.AttrScope, c.cfg.Scope),
		attribute.String(telemetry.AttrDecision, dec))
	span.End()
}

// startSpan starts a span of c's (nil when tracing is off).
func (c *Client) startSpan(ctx context.Context, name string, pk string) (context.Context, trace.Span) {
	if !c.tr.Records(ctx) {
		return ctx, nil
	}
	return c.tr.Start(ctx, name, trace.SpanKindInternal, telemetry.RecordAttr(pk))
}

// ---------------------------------------------------------------- outbound messages

// traceOrigin keeps, on p, the span whose record committed it: its send span goes under it.
func (c *Client) traceOrigin(ctx context.Context, p *outbox.Pending) {
	if c.tr.On() && p != nil {
		p.Origin = trace.SpanContextFromContext(ctx)
	}
}

// ---------------------------------------------------------------- the reaper

// ---------------------------------------------------------------- handler, commit, release

func endHandler(span trace.Span, att *Attempt, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Int(telemetry.AttrAttempt, att.number))
	telemetry.EndSpan(span, err)
}

// endCommit ends a commit's span: what was committed (counts, never contents).
func endCommit(span trace.Span, res, out Result, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Int("idem.writes", len(res.Writes)), attribute.Int(telemetry.AttrMessages, len(res.Messages)),
		attribute.Bool("idem.guarded", out.Guarded))
	if out.Attempt > 0 {
		span.SetAttributes(attribute.Int(telemetry.AttrAttempt, out.Attempt))
	}
	telemetry.EndSpan(span, err)
}

func endRelease(span trace.Span, retryable bool, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Bool(telemetry.AttrRetryable, retryable))
	telemetry.EndSpan(span, err)
}

// startStep starts the span of a step that runs.
func (c *Client) startStep(ctx context.Context, pk, name string) (context.Context, trace.Span) {
	if !c.tr.Records(ctx) {
		return ctx, nil
	}
	return c.tr.Start(ctx, telemetry.SpanStep, trace.SpanKindInternal, telemetry.RecordAttr(pk), attribute.String(telemetry.AttrStep, name))
}

// traceStepDone records a step an earlier attempt completed, skipped.
func (c *Client) traceStepDone(ctx context.Context, pk, name string) {
	if !c.tr.Records(ctx) {
		return
	}
	_, span := c.tr.Start(ctx, telemetry.SpanStep, trace.SpanKindInternal, telemetry.RecordAttr(pk), attribute.String(telemetry.AttrStep, name), attribute.Bool(telemetry.AttrStepDone, true))
	span.End()
}

// handleRoot is handle under a span of its own, for a call with no span in its context
// (the library used without a BatchProcessor): the request's spans are one trace.
func (c *Client) handleRoot(ctx context.Context, req *Request, next Handler) (Result, error) {
	ctx, span := c.tr.Start(ctx, telemetry.SpanRequest, trace.SpanKindInternal, attribute.String(telemetry.AttrScope, c.cfg.Scope))
	if pk, err := c.RecordKey(req.Key); err == nil {
		span.SetAttributes(telemetry.RecordAttr(pk)) // no key hash: a Client has no Keys to key it with
	}
	res, err := c.handle(ctx, req, next)
	span.SetAttributes(attribute.Bool("idem.replayed", res.Replayed))
	if res.Attempt > 0 {
		span.SetAttributes(attribute.Int(telemetry.AttrAttempt, res.Attempt))
	}
	telemetry.EndSpan(span, err)
	return res, err
}
