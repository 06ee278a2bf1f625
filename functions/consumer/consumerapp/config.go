// Package consumerapp builds the consumer Lambda's handler from its configuration: the
// one value functions/consumer/main.go hands to lambda.Start and `idemctl run` calls,
// so local runs exercise exactly the deployed code.
package consumerapp

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/envconf"
)

// Config is the consumer's configuration, read from the environment by FromEnv.
type Config struct {
	// FUNCTION_TIMEOUT and VISIBILITY_TIMEOUT (optional; the template sets both): the
	// function's Timeout (Lambda does not tell a function its timeout before the first
	// event) and its queue's visibility timeout, for Check at init. 0: unknown, not
	// checked.
	FunctionTimeout   time.Duration
	VisibilityTimeout time.Duration

	// Example is the message type (EXAMPLE: one of functions/consumer/wiring's, by name;
	// unset: the first), and Env the variables its handler reads (the function's): New
	// builds the handler from them and its clients (example.Deps). Handler, when set, is
	// the business handler instead, and Example only names it (a test's own handler).
	Example example.Example
	Env     example.Lookup
	Handler idem.Handler

	IdempotencyTable string // IDEMPOTENCY_TABLE (required)
	// Layout is where the records live in that table (the IDEMPOTENCY_* layout variables:
	// envconf.Reader.Layout); its Table, when empty, is IdempotencyTable.
	Layout persistence.Layout
	DLQURL string        // DLQ_URL (required): permanent failures go here
	Scope  string        // IDEMPOTENCY_SCOPE (required; the template's ScopeName parameter)
	TTL    time.Duration // IDEMPOTENCY_TTL (default 168h): retention of records
	// DLQRetention is DLQ_RETENTION (default DefaultDLQRetention): how long the
	// dead-letter queue keeps a message; a FAILED record that holds steps is kept at
	// least that long (idem.Config.DLQRetention).
	DLQRetention     time.Duration
	LeaseGrace       time.Duration  // LEASE_GRACE (default 30s): added to the invocation deadline
	Shards           int            // INFLIGHT_SHARDS (default 4): must match the reaper
	Concurrency      int            // MAX_CONCURRENCY (default 10): groups or records at once
	DeadlineMargin   time.Duration  // DEADLINE_MARGIN (default 2s): no record starts closer to the deadline
	CacheSize        int            // CACHE_SIZE (default 10000): warm-container cache of completed keys
	KeyField         string         // KEY_FIELD (optional; the template's KeyField parameter): JSON fallback for the key
	KeySource        idem.KeySource // KEY_SOURCE (default "message"; "field": KEY_FIELD alone is the key)
	MetricsNamespace string         // METRICS_NAMESPACE (default "IdempotentConsumer")
	Mode             idem.Mode      // IDEMPOTENCY_MODE (default "lease"; or "single-transaction")

	// Keys are the stack's keys (STACK_SECRET locally; deployed, main loads the secret
	// STACK_SECRET_ARN names, SecretARN, at init): they verify the ingress's signature of a
	// key in the HTTP callers' namespace, sign dead letters and hash keys and groups in
	// the logs. Nil (no secret): such keys are refused, dead letters go unsigned and logs
	// leave keys and groups out. New refuses a SecretARN without Keys.
	Keys      *sqsmsg.Keys
	SecretARN string
}

// DefaultDLQRetention is DLQ_RETENTION's default: the template's DeadLetterQueue keeps a
// message 14 days (MessageRetentionPeriod 1209600, SQS's most;
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html),
// which TestRecordsOutliveTheirDeadLetters checks.
const DefaultDLQRetention = 14 * 24 * time.Hour

// FromEnv reads the configuration through lookup (os.LookupEnv in main). It reports every
// missing or malformed variable of the consumer at once; New reports the example's (its
// NewHandler reads them). The example is one of the build's (functions/consumer/wiring),
// and one that cannot run in IDEMPOTENCY_MODE is refused here (example.CheckMode).
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	return FromEnvOf(wiring.Examples, lookup)
}

// FromEnvOf is FromEnv with the example picked from examples instead of the build's:
// for a test's own message type. The consumer needs only example.Example's methods.
func FromEnvOf(examples []example.Example, lookup func(string) (string, bool)) (Config, error) {
	e := envconf.New(lookup)
	cfg := Config{
		FunctionTimeout:   e.Duration("FUNCTION_TIMEOUT", 0),
		VisibilityTimeout: e.Duration("VISIBILITY_TIMEOUT", 0),

		Layout:           e.Layout(),
		DLQURL:           e.Required("DLQ_URL"),
		Scope:            e.Required("IDEMPOTENCY_SCOPE"),
		TTL:              e.TTL(),
		DLQRetention:     e.Duration("DLQ_RETENTION", DefaultDLQRetention),
		LeaseGrace:       e.LeaseGrace(),
		Shards:           e.Int("INFLIGHT_SHARDS", 4, 1, 1000),
		Concurrency:      e.Int("MAX_CONCURRENCY", 10, 1, 1000),
		DeadlineMargin:   e.Duration("DEADLINE_MARGIN", 2*time.Second),
		CacheSize:        e.Int("CACHE_SIZE", 10000, 0, 10_000_000),
		MetricsNamespace: e.MetricsNamespace(),
	}
	cfg.IdempotencyTable = cfg.Layout.Table
	cfg.Keys, cfg.SecretARN = e.StackSecret()
	rule := e.KeyRule()
	cfg.KeyField, cfg.KeySource = rule.Field, rule.Source
	// The single-transaction mode needs a handler whose effects are its writes and its
	// outbound messages: an example that is not such says so (example.LeaseOnly).
	mode := e.OneOf("IDEMPOTENCY_MODE", idem.ModeLease.String(), idem.ModeLease.String(), idem.ModeSingleTransaction.String())
	ex, exErr := example.FromEnv(examples, lookup)
	cfg.Example, cfg.Env = ex, lookup
	if err := errors.Join(e.Err(), exErr); err != nil {
		return Config{}, fmt.Errorf("consumer configuration: %w", err)
	}
	var err error
	if cfg.Mode, err = idem.ParseMode(mode); err != nil {
		return Config{}, fmt.Errorf("consumer configuration: %w", err)
	}
	if err := cfg.Check(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
