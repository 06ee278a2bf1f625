package consumerapp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/emf"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/syncw"
	"github.com/idemgo/sqs-lambda-consumer/internal/tracing"
)

// Handler is the consumer's Lambda handler: a partial batch response for an SQS event.
type Handler func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// SQSAPI is the part of the SQS client the consumer uses: the example's outbound
// messages and dead letters. The handler gets the same client (example.Deps).
type SQSAPI = example.SQS

// Deps are the consumer's outside connections. The example's handler gets them too
// (example.Deps), so it reads and calls through the same endpoint and retries. HTTP
// defaults to a client of the consumer's own; Logs and Metrics to os.Stdout, where
// Lambda sends both to CloudWatch Logs (metrics as EMF lines).
type Deps struct {
	DynamoDB persistence.DynamoDBAPI
	SQS      SQSAPI
	HTTP     *http.Client // the handler's calls outside AWS
	Logs     io.Writer
	Metrics  io.Writer
	Owner    string // names this process in records when there is no Lambda request id
	// Clock is the idempotency layer's clock (default time.Now). Tests move it forward
	// to play deliveries that come after a record's TTL.
	Clock func() time.Time
	// Tracer, when set, traces each invocation, record and call (internal/tracing; the
	// clients above instrumented with it too); nil: no tracing, no cost.
	Tracer trace.TracerProvider
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
	// One writer may serve both, and a handler may be invoked from several goroutines
	// (idemctl run, tests): writes are serialized.
	d.Logs, d.Metrics = syncw.Outputs(d.Logs, d.Metrics)
	log := slog.New(slog.NewJSONHandler(d.Logs, nil)).With("service", "consumer")
	metrics := emf.NewMetrics(d.Metrics, cfg.MetricsNamespace, "consumer")

	layout := cfg.Layout
	if layout.Table == "" {
		layout.Table = cfg.IdempotencyTable
	}
	store, err := persistence.NewDynamoStoreLayout(d.DynamoDB, layout)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	dlq := &sqsmsg.SQSDeadLetter{API: d.SQS, QueueURL: cfg.DLQURL, Source: "consumer", Keys: cfg.Keys}
	client, err := idem.New(idem.Config{
		Store: store, Scope: cfg.Scope, TTL: cfg.TTL, DLQRetention: cfg.DLQRetention, LeaseGrace: cfg.LeaseGrace,
		Shards: cfg.Shards, CacheSize: cfg.CacheSize, Owner: d.Owner, Clock: d.Clock, Sender: d.SQS,
		Mode: cfg.Mode, OutboxDeadLetter: dlq, MaxLease: cfg.maxLease(), Tracer: d.Tracer,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	business, err := handler(cfg, d)
	if err != nil {
		return nil, err
	}
	// A client that can also change a message's visibility (*sqs.Client can) hides a
	// message that waits on a lease until the lease ends (sqsbatch.Visibility).
	var vis *sqsbatch.Visibility
	if api, ok := d.SQS.(sqsbatch.VisibilityAPI); ok {
		vis = &sqsbatch.Visibility{API: api, Clock: d.Clock, Logger: log}
	}
	record, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{
		Client: client, Handler: business, KeyField: cfg.KeyField, KeySource: cfg.KeySource, Logger: log, Metrics: metrics,
		Visibility: vis, Keys: cfg.Keys,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	batch, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{
		Handle:         record,
		DeadLetter:     dlq,
		Concurrency:    cfg.Concurrency,
		DeadlineMargin: cfg.DeadlineMargin,
		Logger:         log,
		Metrics:        metrics,
		Outbox:         client,
		Tracer:         d.Tracer,
		Keys:           cfg.Keys,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	return tracing.Invocation(d.Tracer, "consumer", trace.SpanKindConsumer, "pubsub", nil, func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		resp, err := batch.Process(ctx, ev)
		if ferr := metrics.Flush(); ferr != nil {
			log.Warn("metrics flush failed", "error", ferr.Error())
		}
		return resp, err
	}), nil
}

// handler is cfg.Handler, or else the business handler cfg.Example builds from cfg.Env
// and d's clients.
func handler(cfg Config, d Deps) (idem.Handler, error) {
	if cfg.Handler != nil {
		return cfg.Handler, nil
	}
	if cfg.Example == nil || cfg.Env == nil {
		return nil, errors.New("consumer: Config has neither a Handler nor an Example and its Env (FromEnv sets both)")
	}
	deps := example.Deps{Env: cfg.Env, DynamoDB: d.DynamoDB, SQS: d.SQS, HTTP: d.HTTP}
	if deps.HTTP == nil {
		deps.HTTP = &http.Client{}
	}
	h, err := cfg.Example.NewHandler(deps)
	if err != nil {
		return nil, fmt.Errorf("consumer configuration: %w", err)
	}
	return h, nil
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
func Clients(ddb *dynamodb.Client, q *sqs.Client, web *http.Client) Deps {
	return Deps{DynamoDB: ddb, SQS: q, HTTP: web}
}
