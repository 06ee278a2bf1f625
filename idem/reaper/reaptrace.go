package reaper

import (
	"context"
	"errors"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

func startSweep(ctx context.Context, tr telemetry.Tracer) (context.Context, trace.Span) {
	if tr.On() {
		return tr.Start(ctx, telemetry.SpanSweep, trace.SpanKindInternal)
	}
	return ctx, nil
}

func endSweep(span trace.Span, res SweepResult, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Int(telemetry.AttrReaped, res.Reaped), attribute.Int("idem.scanned", res.Scanned), attribute.Int("idem.sent", res.Sent),
		attribute.Int("idem.unsent", res.Unsent), attribute.Bool("idem.truncated", res.Truncated))
	telemetry.EndSpan(span, err)
}

// startReap starts the span of the reap of one listed lease (nil: tracing off).
func startReap(ctx context.Context, tr telemetry.Tracer, s persistence.StaleLease) (context.Context, trace.Span) {
	if !tr.Records(ctx) {
		return ctx, nil
	}
	return tr.Start(ctx, telemetry.SpanReap, trace.SpanKindInternal, telemetry.RecordAttr(s.Key),
		attribute.String(telemetry.AttrPreviousOwner, s.Owner), attribute.Int(telemetry.AttrAttempt, s.Attempt),
		attribute.String(telemetry.AttrPreviousLease, telemetry.Stamp(s.LeaseUntil)), attribute.String(telemetry.AttrLeaseToken, telemetry.ShortTokenOf(s.Token)))
}

// endReap ends a reap's span: the lease failed (reaped), or found moved on.
func endReap(span trace.Span, late time.Duration, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Bool(telemetry.AttrReaped, err == nil))
	if err == nil {
		span.SetAttributes(attribute.Int64(telemetry.AttrLate, late.Milliseconds()))
	}
	if errors.Is(err, persistence.ErrLeaseLost) {
		err = nil // moved on: not a failure of the sweep
	}
	telemetry.EndSpan(span, err)
}
