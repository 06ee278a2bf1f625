// Package envconf reads a Lambda function's settings from its environment.
package envconf

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
)

// New returns a Reader over lookup (os.LookupEnv in main, a map in tests).
func New(lookup func(string) (string, bool)) *Reader { return &Reader{lookup: lookup} }

// Reader reads typed settings and collects every problem instead of stopping at the
// first, so a misconfigured function reports all of them in one line.
type Reader struct {
	lookup func(string) (string, bool)
	errs   []string
}

func (e *Reader) get(name string) (string, bool) {
	v, ok := e.lookup(name)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

// Required returns the value of name and records an error when it is unset or blank.
func (e *Reader) Required(name string) string {
	v, ok := e.get(name)
	if !ok {
		e.errs = append(e.errs, name+" is not set")
	}
	return v
}

// String returns the value of name, or def when it is unset or blank.
func (e *Reader) String(name, def string) string {
	if v, ok := e.get(name); ok {
		return v
	}
	return def
}

// Duration parses name as a positive Go duration, or returns def when it is unset.
func (e *Reader) Duration(name string, def time.Duration) time.Duration {
	v, ok := e.get(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q is not a positive duration like 30s or 168h", name, v))
		return def
	}
	return d
}

// Int parses name as a whole number in [lo, hi], or returns def when it is unset.
func (e *Reader) Int(name string, def, lo, hi int) int {
	v, ok := e.get(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q is not a whole number from %d to %d", name, v, lo, hi))
		return def
	}
	return n
}

// OneOf returns the value of name when it is one of allowed, def when it is unset, and
// records an error otherwise.
func (e *Reader) OneOf(name, def string, allowed ...string) string {
	v, ok := e.get(name)
	if !ok {
		return def
	}
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	e.errs = append(e.errs, fmt.Sprintf("%s=%q is not one of %s", name, v, strings.Join(allowed, ", ")))
	return def
}

// Err returns every problem found so far, joined, or nil.
func (e *Reader) Err() error {
	if len(e.errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(e.errs, "; "))
}

// Layout reads where the idempotency records live (persistence.Layout): IDEMPOTENCY_TABLE
// (required), and IDEMPOTENCY_PARTITION_KEY, IDEMPOTENCY_SORT_KEY ("-" or unset for
// none), IDEMPOTENCY_STATIC_PARTITION_KEY (read with a sort key only),
// IDEMPOTENCY_KEY_PREFIX, IDEMPOTENCY_INDEX ("-" for none) and
// IDEMPOTENCY_ATTRIBUTE_NAMES: "default", "powertools" for AWS Lambda Powertools' names,
// and Field=name pairs separated by commas (Status=state,ExpiresAt=ttl), the preset first
// (powertools,Owner=holder). Unset: the defaults of persistence.Layout, CreateTable's table.
func (e *Reader) Layout() persistence.Layout {
	l := persistence.Layout{
		Table:         e.Required("IDEMPOTENCY_TABLE"),
		PartitionKey:  e.String("IDEMPOTENCY_PARTITION_KEY", ""),
		SortKey:       e.String("IDEMPOTENCY_SORT_KEY", ""),
		KeyPrefix:     e.String("IDEMPOTENCY_KEY_PREFIX", ""),
		InflightIndex: e.String("IDEMPOTENCY_INDEX", ""),
	}
	if l.SortKey == "-" {
		l.SortKey = ""
	}
	if l.SortKey != "" {
		l.StaticPartitionKey = e.String("IDEMPOTENCY_STATIC_PARTITION_KEY", "")
	}
	for _, part := range strings.Split(e.String("IDEMPOTENCY_ATTRIBUTE_NAMES", ""), ",") {
		part = strings.TrimSpace(part)
		switch field, name, ok := strings.Cut(part, "="); {
		case part == "", part == "default":
		case part == "powertools":
			p := persistence.PowertoolsLayout(l.Table)
			if l.PartitionKey == "" {
				l.PartitionKey = p.PartitionKey
			}
			l.Attributes = p.Attributes
		case !ok:
			e.errs = append(e.errs, fmt.Sprintf("IDEMPOTENCY_ATTRIBUTE_NAMES: %q is neither powertools nor Field=name", part))
		default:
			if err := l.Attributes.SetAttribute(strings.TrimSpace(field), strings.TrimSpace(name)); err != nil {
				e.errs = append(e.errs, "IDEMPOTENCY_ATTRIBUTE_NAMES: "+err.Error())
			}
		}
	}
	if l.Table != "" {
		if err := l.Validate(); err != nil {
			e.errs = append(e.errs, err.Error())
		}
	}
	return l
}

// KeyRule reads how the consumer finds a message's idempotency key (idem.KeyRule):
// KEY_SOURCE ("message", the default: the idempotency-key attribute, the FIFO
// deduplication id, then the body's field; or "field": the body's field alone) and
// KEY_FIELD (the field; required with "field"). The consumer keys its records by it and
// the ingress reads them by it.
func (e *Reader) KeyRule() idem.KeyRule {
	r := idem.KeyRule{Field: e.String("KEY_FIELD", "")}
	src := e.OneOf("KEY_SOURCE", idem.KeyFromMessage.String(), idem.KeyFromMessage.String(), idem.KeyFromField.String())
	r.Source, _ = idem.ParseKeySource(src) // OneOf allowed only the two names
	if r.Source == idem.KeyFromField && r.Field == "" {
		e.errs = append(e.errs, "KEY_SOURCE=field needs KEY_FIELD, the body's field that holds the key")
	}
	return r
}

// TTL reads IDEMPOTENCY_TTL (default 168h, the template's RetentionHours): how long the
// consumer keeps a record, and the ingress a key taken, alike.
func (e *Reader) TTL() time.Duration { return e.Duration("IDEMPOTENCY_TTL", 168*time.Hour) }

// LeaseGrace is LEASE_GRACE (default 30s, the template's LeaseGraceSeconds): a lease's
// grace past its invocation's deadline, and so the most the hosts' clocks may be apart
// (RELIABILITY.md, clock drift). The consumer, the reaper and the ingress read it.
func (e *Reader) LeaseGrace() time.Duration { return e.Duration("LEASE_GRACE", 30*time.Second) }

// MetricsNamespace reads METRICS_NAMESPACE (default IdempotentConsumer), the CloudWatch
// namespace of every function's EMF metrics.
func (e *Reader) MetricsNamespace() string {
	return e.String("METRICS_NAMESPACE", "IdempotentConsumer")
}

// Variables of the stack's secret.
const (
	// SecretARNVar names the stack's secret in Secrets Manager (the template's StackSecret,
	// given to every function by its Globals): the functions read it at init.
	SecretARNVar = "STACK_SECRET_ARN"
	// SecretVar holds the secret's value itself, for local runs only: `idemctl up`
	// exports it beside SecretARNVar, so that handlers built in a process (idemctl
	// --in-process, the tests) need no Secrets Manager call. The template never sets it:
	// a variable's value is readable by whoever may read the function's configuration.
	SecretVar = "STACK_SECRET"
)

// StackSecret reads the stack's secret: STACK_SECRET's value as the stack's keys when it
// is set, else the ARN in STACK_SECRET_ARN for the caller to load (internal/stacksecret);
// neither set: nil and "" (no secret: logs leave keys out, nothing is signed).
func (e *Reader) StackSecret() (keys *sqsmsg.Keys, arn string) {
	arn = e.String(SecretARNVar, "")
	v, ok := e.get(SecretVar)
	if !ok {
		return nil, arn
	}
	keys, err := sqsmsg.NewKeys([]byte(v))
	if err != nil {
		e.errs = append(e.errs, SecretVar+": "+err.Error())
	}
	return keys, arn
}
