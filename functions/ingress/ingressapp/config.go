// Package ingressapp is the front door: an HTTP function (a Lambda function URL, AuthType
// AWS_IAM) that turns a client's POST with an Idempotency-Key header into one message on
// the consumer's input FIFO queue, answers 202 Accepted at once, and reports the
// request's status from the consumer's own idempotency record. functions/ingress/main.go
// hands its Handler to lambda.Start; `idemctl serve` and the tests call the same value
// behind real HTTP on loopback (internal/funcurl).
//
// The ingress keeps a record of its own per key, in its own table (INGRESS_TABLE): the
// body's fingerprint and whether the message was sent. It never writes the consumer's
// record, whose acquire would take an existing record for the key's outcome. The
// status a GET reports is the consumer's record, in the consumer's layout, of the key
// the consumer derives from the message the ingress sends (its KEY_SOURCE rule: the
// idempotency-key attribute the ingress sets, or the body's field), which the ingress
// keeps in its record: there is no second copy of the result.
// See docs/ingress.md for the status codes and the record layout.
package ingressapp

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

// Limits of a request.
const (
	// DefaultMaxBodyBytes is the largest body accepted by default: 256 KiB. The message
	// sent is the body plus the idempotency-key attribute (at most 15 + 6 + MaxKeyLength
	// bytes as SQS counts it), far inside SQS's limit of 1 MiB per message
	// (sqsmsg.MaxSQSMessageBytes), so the consumer can still dead-letter it with its
	// reason attributes; and a body of that size, base64-encoded in the event, is far
	// inside Lambda's 6 MB invocation payload
	// (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
	DefaultMaxBodyBytes = 256 * 1024
	// maxBodyLimit is the most MAX_BODY_BYTES may be: SQS's message limit less room for
	// the key attribute and the consumer's dead-letter attributes.
	maxBodyLimit = sqsmsg.MaxSQSMessageBytes - 8*1024
	// MaxKeyLength is the longest Idempotency-Key accepted, in characters (Stripe's
	// limit). Keys up to 128 characters are the SQS deduplication id as they are;
	// longer ones are hashed to one (outbox.DeduplicationID).
	MaxKeyLength = 255
)

// Config is the ingress's configuration, read from the environment by FromEnv.
type Config struct {
	// Example is the message type (EXAMPLE: one of functions/consumer/wiring's; unset:
	// the first, whose block template.yaml carries, the one the consumer runs). Its
	// Decode validates a body and gives its FIFO group.
	Example example.Example

	Scope            string // IDEMPOTENCY_SCOPE (required): the consumer's scope
	IdempotencyTable string // IDEMPOTENCY_TABLE (required): the consumer's records, read for the status
	// Layout is where the consumer keeps its records (the IDEMPOTENCY_* layout variables,
	// read as the consumer and the reaper read them: envconf.Reader.Layout); its Table,
	// when empty, is IdempotencyTable.
	Layout persistence.Layout
	// KeyRule is how the consumer keys a message (KEY_SOURCE, KEY_FIELD: envconf.Reader.KeyRule):
	// the ingress reads a request's status from the record of the key the consumer
	// derives from the message it sends.
	KeyRule      idem.KeyRule
	IngressTable string        // INGRESS_TABLE (required): the ingress's own records
	QueueURL     string        // INPUT_QUEUE_URL (required): the consumer's input FIFO queue
	TTL          time.Duration // IDEMPOTENCY_TTL (default 168h): how long a key stays taken
	// AcceptWindow (ACCEPT_WINDOW, default 10s) is the longest a request holds its key
	// while its message is being sent: the function's timeout. A retry inside it
	// answers 409; after it (the first request died), the retry sends the message itself.
	AcceptWindow time.Duration
	// LeaseGrace (LEASE_GRACE, default 30s: the consumer's) is the most the hosts' clocks
	// may be apart (RELIABILITY.md, clock drift). A POST counts the consumer's record of
	// its key live for this long past its expiry: a consumer whose clock is behind the
	// ingress's still finds it live, and would take a message sent then for a duplicate
	// and write nothing, leaving the new request accepted for a whole TTL.
	LeaseGrace   time.Duration
	MaxBodyBytes int // MAX_BODY_BYTES (default DefaultMaxBodyBytes)
	// RequireIAMCaller (REQUIRE_IAM_CALLER, default true) refuses with 403 any event that
	// carries no IAM caller: a function URL switched to AuthType NONE, or an API in front
	// without IAM authorization, fails closed.
	RequireIAMCaller bool
	MetricsNamespace string // METRICS_NAMESPACE (default "IdempotentConsumer")
	// KeyScope (INGRESS_KEY_SCOPE, default ScopeCaller) is whose requests share the
	// Idempotency-Keys: each IAM caller its own (caller), every caller of one account
	// (account), or every caller (shared). Whatever the scope, the keys of HTTP callers
	// are apart from those direct SQS producers send (idem.CallerKey).
	KeyScope string
	// Keys are the stack's keys (STACK_SECRET locally; deployed, main loads the secret
	// STACK_SECRET_ARN names, SecretARN, at init): the ingress signs every message it
	// sends with them, which is what makes the consumer take its keys (idem.KeyRule.Keys),
	// and hashes keys in its logs. New refuses a configuration without them.
	Keys      *sqsmsg.Keys
	SecretARN string
}

// FromEnv reads the configuration through lookup (os.LookupEnv in main), reporting every
// missing or malformed variable at once. The example is one of the build's.
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	return FromEnvOf(wiring.Examples, lookup)
}

// FromEnvOf is FromEnv with the example picked from examples: for a test's own type.
// (Shaped like consumerapp.FromEnvOf, but each function's settings change on their own.)
func FromEnvOf(examples []example.Example, lookup func(string) (string, bool)) (Config, error) {
	e := envconf.New(lookup)
	cfg := Config{
		Scope:            e.Required("IDEMPOTENCY_SCOPE"),
		Layout:           e.Layout(),
		KeyRule:          e.KeyRule(),
		IngressTable:     e.Required("INGRESS_TABLE"),
		QueueURL:         e.Required("INPUT_QUEUE_URL"),
		TTL:              e.TTL(),
		AcceptWindow:     e.Duration("ACCEPT_WINDOW", 10*time.Second),
		LeaseGrace:       e.LeaseGrace(),
		MaxBodyBytes:     e.Int("MAX_BODY_BYTES", DefaultMaxBodyBytes, 1, maxBodyLimit),
		RequireIAMCaller: e.OneOf("REQUIRE_IAM_CALLER", "true", "true", "false") == "true",
		MetricsNamespace: e.MetricsNamespace(),
		KeyScope:         e.OneOf("INGRESS_KEY_SCOPE", ScopeCaller, ScopeCaller, ScopeAccount, ScopeShared),
	}
	cfg.Keys, cfg.SecretARN = e.StackSecret()
	cfg.IdempotencyTable = cfg.Layout.Table
	ex, exErr := example.FromEnv(examples, lookup)
	cfg.Example = ex
	if err := errors.Join(e.Err(), exErr); err != nil {
		return Config{}, fmt.Errorf("ingress configuration: %w", err)
	}
	if err := cfg.Check(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Check reports a configuration that cannot work.
func (c Config) Check() error {
	var errs []error
	if c.Example == nil {
		errs = append(errs, errors.New("no example"))
	}
	for name, v := range map[string]string{"IDEMPOTENCY_SCOPE": c.Scope, "IDEMPOTENCY_TABLE": c.IdempotencyTable,
		"INGRESS_TABLE": c.IngressTable, "INPUT_QUEUE_URL": c.QueueURL} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is not set", name))
		}
	}
	if c.QueueURL != "" {
		if err := example.CheckFIFOQueueURL(c.QueueURL); err != nil {
			errs = append(errs, fmt.Errorf("INPUT_QUEUE_URL %q %w", c.QueueURL, err))
		}
	}
	if err := c.KeyRule.Check(); err != nil {
		errs = append(errs, err)
	}
	if l := c.layout(); l.Table != "" {
		if err := l.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.IdempotencyTable != "" && c.IdempotencyTable == c.IngressTable {
		errs = append(errs, errors.New("INGRESS_TABLE must not be the consumer's IDEMPOTENCY_TABLE: the consumer's acquire would take the ingress's record for the key's outcome"))
	}
	if c.TTL <= 0 || c.AcceptWindow <= 0 || c.LeaseGrace <= 0 {
		errs = append(errs, errors.New("IDEMPOTENCY_TTL, ACCEPT_WINDOW and LEASE_GRACE must be positive"))
	}
	if c.MaxBodyBytes <= 0 || c.MaxBodyBytes > maxBodyLimit {
		errs = append(errs, fmt.Errorf("MAX_BODY_BYTES must be from 1 to %d", maxBodyLimit))
	}
	switch c.KeyScope {
	case "", ScopeCaller, ScopeAccount:
		if !c.RequireIAMCaller {
			errs = append(errs, errors.New("REQUIRE_IAM_CALLER=false needs INGRESS_KEY_SCOPE=shared: the caller and account scopes keep keys apart by the IAM caller an event without one does not name"))
		}
	case ScopeShared:
	default:
		errs = append(errs, fmt.Errorf("INGRESS_KEY_SCOPE %q is not %s, %s or %s", c.KeyScope, ScopeCaller, ScopeAccount, ScopeShared))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ingress configuration: %w", err)
	}
	return nil
}

// layout is where the consumer's records live: Layout, in IdempotencyTable when it names
// no table.
func (c Config) layout() persistence.Layout {
	l := c.Layout
	if l.Table == "" {
		l.Table = c.IdempotencyTable
	}
	return l
}
