package consumerapp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/syncw"
)

// Handler is the consumer's Lambda handler: a partial batch response for an SQS event.
type Handler func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// SQSAPI is the part of the SQS client the consumer uses: the example's outbound
// messages and dead letters.
type SQSAPI interface {
	idem.SQSSender
	idem.SQSBatchSender
}

// Deps are the consumer's outside connections. Logs and Metrics default to os.Stdout,
// where Lambda sends both to CloudWatch Logs (metrics as EMF lines).
type Deps struct {
	DynamoDB idem.DynamoDBAPI
	SQS      SQSAPI
	Logs     io.Writer
	Metrics  io.Writer
	Owner    string // names this process in records when there is no Lambda request id
	// Clock is the idempotency layer's clock (default time.Now). Tests move it forward
	// to play deliveries that come after a record's TTL.
	Clock func() time.Time
}

// New builds the handler. Build it once per process, outside the handler, so the
// completed-key cache survives between invocations of a warm container.
func New(cfg Config, d Deps) (Handler, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if d.DynamoDB == nil || d.SQS == nil {
		return nil, errors.New("consumer: DynamoDB and SQS clients are required")
	}
	if cfg.Keys == nil && cfg.SecretARN != "" {
		return nil, fmt.Errorf("consumer: the stack secret %s is not loaded (Config.Keys; main loads it with internal/stacksecret)", cfg.SecretARN)
	}
	if d.Logs == nil {
		d.Logs = os.Stdout
	}
	if d.Metrics == nil {
		d.Metrics = os.Stdout
	}
	// One writer may serve both, and a handler may be invoked from several goroutines
	// (idemctl run, tests): writes are serialized.
	d.Logs, d.Metrics = syncw.New(d.Logs), syncw.New(d.Metrics)
	log := slog.New(slog.NewJSONHandler(d.Logs, nil)).With("service", "consumer")
	metrics := idem.NewMetrics(d.Metrics, cfg.MetricsNamespace, "consumer")

	layout := cfg.Layout
	if layout.Table == "" {
		layout.Table = cfg.IdempotencyTable
	}
	store, err := idem.NewDynamoStoreLayout(d.DynamoDB, layout)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	dlq := &idem.SQSDeadLetter{API: d.SQS, QueueURL: cfg.DLQURL, Source: "consumer", Keys: cfg.Keys}
	client, err := idem.New(idem.Config{
		Store: store, Scope: cfg.Scope, TTL: cfg.TTL, LeaseGrace: cfg.LeaseGrace,
		Shards: cfg.Shards, CacheSize: cfg.CacheSize, Owner: d.Owner, Clock: d.Clock, Sender: d.SQS,
		Mode: cfg.Mode, OutboxDeadLetter: dlq, MaxLease: cfg.maxLease(),
	})
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	business := cfg.Handler
	if business == nil {
		return nil, errors.New("consumer: Config.Handler is nil (FromEnv builds it from the example)")
	}
	// A client that can also change a message's visibility (*sqs.Client can) hides a
	// message that waits on a lease until the lease ends (idem.Visibility).
	var vis *idem.Visibility
	if api, ok := d.SQS.(idem.VisibilityAPI); ok {
		vis = &idem.Visibility{API: api, Clock: d.Clock, Logger: log}
	}
	record, err := idem.NewSQSHandler(idem.SQSConfig{
		Client: client, Handler: business, KeyField: cfg.KeyField, KeySource: cfg.KeySource, Logger: log, Metrics: metrics,
		Visibility: vis, Keys: cfg.Keys,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	batch, err := idem.NewBatchProcessor(idem.BatchConfig{
		Handle:         record,
		DeadLetter:     dlq,
		Concurrency:    cfg.Concurrency,
		DeadlineMargin: cfg.DeadlineMargin,
		Logger:         log,
		Metrics:        metrics,
		Outbox:         client,
		Keys:           cfg.Keys,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		resp, err := batch.Process(ctx, ev)
		if ferr := metrics.Flush(); ferr != nil {
			log.Warn("metrics flush failed", "error", ferr.Error())
		}
		return resp, err
	}, nil
}

// maxLease caps a lease, extensions included, at what an invocation can use: the
// function timeout plus the grace (the reaper, told the same, relies on it to send
// pending outbound messages in commit order). Unknown timeout: idem's default.
func (c Config) maxLease() time.Duration {
	if c.FunctionTimeout <= 0 {
		return 0
	}
	return c.FunctionTimeout + c.LeaseGrace
}

// Clients adapts SDK clients to Deps.
func Clients(ddb *dynamodb.Client, q *sqs.Client) Deps {
	return Deps{DynamoDB: ddb, SQS: q}
}
