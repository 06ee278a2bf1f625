package sqsbatch

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/emf"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// SQSConfig configures NewSQSHandler. Client and Handler are required.
type SQSConfig struct {
	// Client runs Handler idempotently (required).
	Client *idem.Client
	// Handler is the business handler (required). Request.Payload is the message body.
	Handler idem.Handler
	// KeyField is the top-level JSON field of the body used as the key when the message
	// has neither the KeyAttribute attribute nor a MessageDeduplicationId ("" = none);
	// with KeySource KeyFromField, the key of every message.
	KeyField string
	// KeySource says where the key comes from (default KeyFromMessage; see KeySource).
	KeySource idem.KeySource
	// Logger receives one line per record (default: discard) when the RecordFunc runs
	// outside a BatchProcessor. Under a BatchProcessor, which logs every record, the
	// key hash, outcome and attempt go on the processor's line instead: one per record.
	Logger *slog.Logger
	// Metrics counts acquisitions, duplicates, in-progress and lost leases, and observes
	// the handler duration (optional). Failures are counted by BatchProcessor.
	Metrics *emf.Metrics
	// Visibility, when set, hides a message that finds its key held by a live lease
	// until that lease ends, and a message whose handler extends its lease until the new
	// end, so that waiting on a lease never costs a receive (optional; see Visibility).
	Visibility *Visibility
	// Keys are the stack's keys (optional): they verify the ingress's signature of a key
	// in the HTTP callers' namespace (KeyRule.Keys; without them every such key is
	// refused), and the key is logged as its keyed hash, key_hash (Keys.LogHash; without
	// them it is left out).
	Keys *sqsmsg.Keys
}

// NewSQSHandler returns a RecordFunc for BatchProcessor that runs cfg.Handler through
// cfg.Client's middleware, keyed by MessageKey, with the body as the payload. The
// error is returned unchanged, so a permanent one (a missing key, a payload mismatch,
// a handler's Permanent error) is dead-lettered and any other is retried.
func NewSQSHandler(cfg SQSConfig) (RecordFunc, error) {
	if cfg.Client == nil {
		return nil, errors.New("idem: SQSConfig.Client is nil")
	}
	if cfg.Handler == nil {
		return nil, errors.New("idem: SQSConfig.Handler is nil")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rule := idem.KeyRule{Source: cfg.KeySource, Field: cfg.KeyField, Keys: cfg.Keys}
	if err := rule.Check(); err != nil {
		return nil, err
	}
	h := cfg.Client.Middleware(cfg.Handler)
	client, metrics, vis := cfg.Client, cfg.Metrics, cfg.Visibility
	return func(ctx context.Context, msg events.SQSMessage) error {
		key, err := rule.Key(msg)
		if err != nil {
			traceRecord(ctx, client, "", "", "permanent", nil)
			logRecordOutcome(ctx, log, msg, "permanent", slog.LevelWarn, nil, 0, err)
			return err
		}
		var attrs []slog.Attr
		if h := cfg.Keys.LogHash(key); h != "" {
			attrs = append(attrs, slog.String("key_hash", h)) // keyed: a guessed key cannot be checked against it
		}

		start := time.Now()
		res, err := h.Handle(vis.withDelivery(ctx, msg), &idem.Request{Key: key, Payload: []byte(msg.Body)})
		d := time.Since(start)
		metrics.Observe(emf.MetricHandlerDuration, float64(d.Microseconds())/1000)

		level := slog.LevelInfo
		var outcome string
		switch {
		case err == nil && res.Replayed:
			outcome = "duplicate"
			metrics.Add(emf.MetricDuplicate, 1)
		case err == nil && res.Guarded:
			outcome = "guarded_duplicate"
			metrics.Add(emf.MetricGuarded, 1)
			attrs = append(attrs, slog.Int("attempt", res.Attempt))
		case err == nil:
			outcome = "applied"
			metrics.Add(emf.MetricAcquired, 1)
			attrs = append(attrs, slog.Int("attempt", res.Attempt))
		case errors.Is(err, idem.ErrInProgress):
			outcome = "in_progress"
			metrics.Add(emf.MetricInProgress, 1)
			vis.inProgress(ctx, msg, err)
		case errors.Is(err, persistence.ErrLeaseLost):
			outcome, level = "lease_lost", slog.LevelError
			metrics.Add(emf.MetricLeaseLost, 1)
		case idem.IsPermanent(err):
			outcome, level = "permanent", slog.LevelWarn
		default:
			outcome, level = "retry", slog.LevelWarn
		}
		traceRecord(ctx, client, key, cfg.Keys.LogHash(key), outcome, &res)
		logRecordOutcome(ctx, log, msg, outcome, level, attrs, d, err)
		return err
	}, nil
}

// logRecordOutcome hands what the handler learned to the BatchProcessor running the
// record, which logs it on its one line per record; without one it writes that line.
func logRecordOutcome(ctx context.Context, log *slog.Logger, msg events.SQSMessage, outcome string, level slog.Level, attrs []slog.Attr, d time.Duration, err error) {
	if noteRecord(ctx, outcome, level, attrs) {
		return
	}
	line := make([]slog.Attr, 0, len(attrs)+5)
	line = append(line, slog.String("message_id", msg.MessageId))
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		line = append(line, slog.String("aws_request_id", lc.AwsRequestID))
	}
	line = append(line, attrs...)
	line = append(line, slog.String("outcome", outcome), slog.Float64("duration_ms", float64(d.Microseconds())/1000))
	if err != nil {
		line = append(line, slog.String("error", err.Error()))
	}
	// The record's own context may be done; the line must still be written.
	log.LogAttrs(context.WithoutCancel(ctx), level, "idempotent handler", line...)
}

// traceRecord puts what the SQS handler learned of its record on the record's span;
// keyHash is the key's Keys.LogHash ("": left out).
func traceRecord(ctx context.Context, c *idem.Client, key, keyHash, outcome string, res *idem.Result) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String(telemetry.AttrScope, c.Scope()), attribute.String(telemetry.AttrOutcome, outcome))
	if keyHash != "" {
		span.SetAttributes(attribute.String(telemetry.AttrKeyHash, keyHash))
	}
	if key != "" {
		if pk, err := c.RecordKey(key); err == nil {
			span.SetAttributes(telemetry.RecordAttr(pk))
		}
	}
	if res != nil && res.Attempt > 0 {
		span.SetAttributes(attribute.Int(telemetry.AttrAttempt, res.Attempt))
	}
}
