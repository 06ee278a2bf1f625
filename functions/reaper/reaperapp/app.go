// Package reaperapp builds the reaper Lambda's handler: one sweep of the idempotency
// table's in-flight index per scheduled event (see reaper.Reaper).
package reaperapp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/emf"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/envconf"
	"github.com/idemgo/sqs-lambda-consumer/internal/syncw"
	"github.com/idemgo/sqs-lambda-consumer/internal/tracing"
)

// Config is the reaper's configuration.
type Config struct {
	IdempotencyTable string             // IDEMPOTENCY_TABLE (required)
	Layout           persistence.Layout // the IDEMPOTENCY_* layout variables; its Table, when empty, is IdempotencyTable
	// Scope (IDEMPOTENCY_SCOPE, optional; the template sets the consumer's): the reaper
	// sweeps only that scope's records, and leaves those of other consumers sharing the
	// table and layout to their own reaper (reaper.Reaper.Scope). Unset: every record.
	Scope            string
	Shards           int           // INFLIGHT_SHARDS (default 4): as the consumer's
	Grace            time.Duration // LEASE_GRACE (default 30s): how long past its end a lease is reaped
	Margin           time.Duration // SWEEP_MARGIN (default 2s): stop this long before the deadline
	MetricsNamespace string        // METRICS_NAMESPACE (default "IdempotentConsumer")
	DLQURL           string        // DLQ_URL (optional): where outbound messages SQS refuses for good go
	// MaxLease is the longest lease a consumer takes: CONSUMER_TIMEOUT (the consumer's
	// function timeout, optional) + LEASE_GRACE; 0 (unset) takes idem's 15 minutes.
	MaxLease        time.Duration
	FunctionTimeout time.Duration // FUNCTION_TIMEOUT (optional): the function's Timeout, checked against SWEEP_MARGIN
	// Keys sign the outbound messages the reaper dead-letters, so that `idemctl redrive`
	// sends them back to their queue (STACK_SECRET locally; deployed, main loads the secret
	// SecretARN names). New refuses a SecretARN without Keys.
	Keys      *sqsmsg.Keys
	SecretARN string
}

// FromEnv reads the configuration through lookup (os.LookupEnv in main).
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	e := envconf.New(lookup)
	cfg := Config{
		Layout:           e.Layout(),
		Scope:            e.String("IDEMPOTENCY_SCOPE", ""),
		Shards:           e.Int("INFLIGHT_SHARDS", 4, 1, 1000),
		Grace:            e.LeaseGrace(),
		Margin:           e.Duration("SWEEP_MARGIN", 2*time.Second),
		MetricsNamespace: e.MetricsNamespace(),
		FunctionTimeout:  e.Duration("FUNCTION_TIMEOUT", 0),
		DLQURL:           e.String("DLQ_URL", ""),
	}
	cfg.IdempotencyTable = cfg.Layout.Table
	cfg.Keys, cfg.SecretARN = e.StackSecret()
	if consumer := e.Duration("CONSUMER_TIMEOUT", 0); consumer > 0 {
		cfg.MaxLease = consumer + cfg.Grace
	}
	if err := e.Err(); err != nil {
		return Config{}, fmt.Errorf("reaper configuration: %w", err)
	}
	if cfg.Scope != "" {
		if err := idem.CheckScope(cfg.Scope); err != nil {
			return Config{}, fmt.Errorf("reaper configuration: IDEMPOTENCY_SCOPE: %w", err)
		}
	}
	if cfg.FunctionTimeout > 0 && cfg.FunctionTimeout <= cfg.Margin {
		return Config{}, fmt.Errorf("reaper configuration: FUNCTION_TIMEOUT %s is not more than SWEEP_MARGIN %s: no sweep could ever start (raise the function's Timeout in template.yaml, and FUNCTION_TIMEOUT with it, or lower SWEEP_MARGIN)",
			cfg.FunctionTimeout, cfg.Margin)
	}
	return cfg, nil
}

// SQSAPI is what the reaper sends with: pending outbound messages, and the dead letters
// of those SQS refuses for good; *sqs.Client implements it.
type SQSAPI interface {
	outbox.SQSBatchSender
	sqsmsg.SQSSender
}

// MetricSweepIncomplete counts sweeps that did not go through every shard: stopped at
// their deadline margin (reaper.SweepResult.Truncated) or by an error. It is emitted on
// every sweep, 0 when the sweep completed, so an alarm on it always has data. Emitted
// here rather than by idem: completing a sweep within one invocation is the reaper
// function's contract, not the library's.
const MetricSweepIncomplete = "SweepIncomplete"

// Handler is the reaper's Lambda handler for an EventBridge scheduled event.
type Handler func(ctx context.Context, ev events.EventBridgeEvent) (reaper.SweepResult, error)

// Deps are the reaper's outside connections; Logs and Metrics default to os.Stdout.
type Deps struct {
	DynamoDB persistence.DynamoDBAPI
	// SQS sends outbound messages that a consumer committed and could not send (it
	// crashed in between), and dead-letters to DLQ_URL those SQS refuses for good.
	// Without it such records are only counted (unsent).
	SQS     SQSAPI
	Logs    io.Writer
	Metrics io.Writer
	Clock   func() time.Time
	// Tracer, when set, traces each sweep (internal/tracing); nil: no tracing.
	Tracer trace.TracerProvider
}

// New builds the handler. Each call sweeps every shard once, logs one summary line and
// emits the StaleLocksReaped and SweepIncomplete metrics (zero included, so the alarms
// see data).
func New(cfg Config, d Deps) (Handler, error) {
	if d.DynamoDB == nil {
		return nil, errors.New("reaper: DynamoDB client is required")
	}
	if cfg.Keys == nil && cfg.SecretARN != "" {
		return nil, fmt.Errorf("reaper: the stack secret %s is not loaded (Config.Keys; main loads it with internal/stacksecret)", cfg.SecretARN)
	}
	d.Logs, d.Metrics = syncw.Outputs(d.Logs, d.Metrics)
	layout := cfg.Layout
	if layout.Table == "" {
		layout.Table = cfg.IdempotencyTable
	}
	if layout.InflightIndex == persistence.NoIndex {
		return nil, fmt.Errorf("reaper: %w; give the table the index (persistence.TableInputFor) or do not deploy the reaper (IDEMPOTENCY_INDEX=%s)", persistence.ErrNoIndex, persistence.NoIndex)
	}
	store, err := persistence.NewDynamoStoreLayout(d.DynamoDB, layout)
	if err != nil {
		return nil, fmt.Errorf("reaper: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(d.Logs, nil)).With("service", "reaper")
	metrics := emf.NewMetrics(d.Metrics, cfg.MetricsNamespace, "reaper")
	r := &reaper.Reaper{Store: store, Scope: cfg.Scope, Shards: cfg.Shards, Grace: cfg.Grace, Margin: cfg.Margin, MaxLease: cfg.MaxLease, Clock: d.Clock, Sender: d.SQS, Tracer: d.Tracer}
	if cfg.DLQURL != "" && d.SQS != nil {
		r.DeadLetter = &sqsmsg.SQSDeadLetter{API: d.SQS, QueueURL: cfg.DLQURL, Source: "reaper", Keys: cfg.Keys}
	}
	return tracing.Invocation(d.Tracer, "reaper", trace.SpanKindInternal, "timer", nil, func(ctx context.Context, ev events.EventBridgeEvent) (reaper.SweepResult, error) {
		start := time.Now()
		res, err := r.Sweep(ctx)
		metrics.Add(emf.MetricReaped, res.Reaped)
		metrics.Add(emf.MetricOutboundByReaper, res.Sent)
		metrics.Add(emf.MetricOutboundDeadLettered, res.DeadLettered)
		incomplete := 0
		if err != nil || res.Truncated {
			incomplete = 1
		}
		metrics.Add(MetricSweepIncomplete, incomplete)
		if ferr := metrics.Flush(); ferr != nil {
			log.Warn("metrics flush failed", "error", ferr.Error())
		}
		attrs := []any{"event_id", ev.ID, "scanned", res.Scanned, "reaped", res.Reaped, "lost_race", res.Lost, "other_scopes", res.Skipped,
			"outbound_sent", res.Sent, "outbound_unsent", res.Unsent, "outbound_dead_lettered", res.DeadLettered,
			"truncated", res.Truncated, "max_late_ms", res.MaxLate.Milliseconds(), "duration_ms", time.Since(start).Milliseconds()}
		if err != nil {
			log.Error("sweep failed", append(attrs, "error", err.Error())...)
			return res, fmt.Errorf("reaper: %w", err)
		}
		log.Info("sweep done", attrs...)
		return res, nil
	}), nil
}
