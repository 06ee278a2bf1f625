package persistence

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Layout is where DynamoStore keeps the idempotency records and what it calls their
// attributes: a table of their own (the default), a table laid out as AWS Lambda
// Powertools' idempotency utility lays out its (PowertoolsLayout), or a table that
// already holds the business's items (a single-table design: a sort key, every record
// under one static partition key value, or under a key prefix). Only the names and the
// place change; what is stored in them is this package's, so a table cannot be shared
// with a Powertools consumer of the same keys.
//
// The zero value of every field but Table takes the default documented on it.
type Layout struct {
	// Table is the table's name (required).
	Table string
	// PartitionKey is the table's partition key attribute (default "pk"; Powertools:
	// "id"). It must be of type S.
	PartitionKey string
	// SortKey is the table's sort key attribute, "" when it has none. With a sort key,
	// every record has StaticPartitionKey as its partition key value and its record key
	// (KeyPrefix + Client.RecordKey) as its sort key value. It must be of type S.
	SortKey string
	// StaticPartitionKey is the partition key value of every record when the table has a
	// sort key (default "idempotency"). Powertools' default is
	// "idempotency#<function name>": set it to keep records apart per consumer.
	StaticPartitionKey string
	// KeyPrefix is put before every record key in the table (default ""): with a table
	// that holds other items, it keeps the records' keys apart from theirs, for instance
	// "IDEMPOTENCY#".
	KeyPrefix string
	// Attributes names the record's attributes (default: the names in Attributes).
	Attributes Attributes
	// InflightIndex is the sparse global secondary index the reaper queries (default
	// "inflight"), keyed by Attributes.Inflight and Attributes.LeaseUntil. NoIndex means
	// the table has none: the consumers then write no index attribute, and the Reaper
	// cannot run, so nothing fails the leases of crashed consumers (their keys wait for
	// their lease to end, then the next delivery takes them over) and nothing sends
	// outbound messages a crash left pending (the next delivery of their key does).
	InflightIndex string
}

// NoIndex is Layout.InflightIndex for a table without the in-flight index.
const NoIndex = "-"

// Attributes names the attributes of an idempotency record. A zero field takes the
// default in its comment; PowertoolsLayout sets the Powertools names where Powertools
// has the same notion (noted).
type Attributes struct {
	Status      string // "status" (Powertools: status_attr, "status")
	LeaseToken  string // "lease_token"
	LeaseUntil  string // "lease_until", the index's sort key (Powertools: in_progress_expiry_attr, "in_progress_expiration")
	Inflight    string // "inflight", the index's partition key
	ExpiresAt   string // "expires_at", the TTL attribute (Powertools: expiry_attr, "expiration")
	PayloadHash string // "payload_hash" (Powertools: validation_key_attr, "validation")
	Response    string // "response" (Powertools: data_attr, "data")
	ResponseEnc string // "response_enc"
	Error       string // "error"
	Retryable   string // "retryable"
	// ErrorCategory and ErrorPublic: "error_category", "error_public" (Record.Category,
	// Record.Public).
	ErrorCategory string
	ErrorPublic   string
	RefusedBy     string // "refused_by" (Record.RefusedBy)
	RefusedHash   string // "refused_hash" (Record.RefusedHash)
	Attempt       string // "attempt"
	Steps         string // "steps"
	StepAnswers   string // "step_answers" (Record.Answers)
	Owner         string // "owner"
	Outbox        string // "outbox"
	OutboxEnc     string // "outbox_enc"
	OutboxGroup   string // "outbox_group"
	OutboxDead    string // "outbox_dead"
	Sent          string // "sent"
	CreatedAt     string // "created_at"
	UpdatedAt     string // "updated_at"
}

// PowertoolsLayout is the layout of AWS Lambda Powertools' idempotency table: partition
// key "id", and its names for the expiry, the status, the data, the validation hash and
// the in-progress expiry; the other attributes keep this package's names.
// https://docs.powertools.aws.dev/lambda/python/latest/utilities/idempotency/
func PowertoolsLayout(table string) Layout {
	return Layout{Table: table, PartitionKey: "id", Attributes: Attributes{
		Status: "status", ExpiresAt: "expiration", Response: "data", PayloadHash: "validation", LeaseUntil: "in_progress_expiration",
	}}
}

// Validate reports what is wrong with the layout (an error wrapping ErrLayout that names
// every problem), or nil.
func (l Layout) Validate() error {
	_, err := l.Schema()
	return err
}

// SetAttribute sets the name of the record attribute field (an Attributes field name,
// such as "ExpiresAt") to name.
func (a *Attributes) SetAttribute(field, name string) error {
	for _, c := range a.canonical() {
		if fieldName(c.name) == field {
			*c.set = name
			return nil
		}
	}
	var fields []string
	for _, c := range a.canonical() {
		fields = append(fields, fieldName(c.name))
	}
	return fmt.Errorf("%w: no record attribute %q (one of %s)", ErrLayout, field, strings.Join(fields, ", "))
}

// schema is a Layout resolved: every name set, checked.
type Schema struct {
	Table, pk, sk, static, prefix, index string
	names                                map[string]string // canonical attribute -> name in the table
}

// canonical lists the record's attributes by their default names, with a pointer into
// an Attributes for their configured name.
func (a *Attributes) canonical() []struct {
	name string
	set  *string
} {
	return []struct {
		name string
		set  *string
	}{
		{attrStatus, &a.Status}, {attrLeaseToken, &a.LeaseToken}, {AttrLeaseUntil, &a.LeaseUntil}, {AttrInflight, &a.Inflight},
		{AttrExpiresAt, &a.ExpiresAt}, {attrPayloadHash, &a.PayloadHash}, {attrResponse, &a.Response}, {AttrResponseEnc, &a.ResponseEnc},
		{attrError, &a.Error}, {attrRetryable, &a.Retryable}, {attrErrorCategory, &a.ErrorCategory}, {attrErrorPublic, &a.ErrorPublic},
		{attrRefusedBy, &a.RefusedBy}, {attrRefusedHash, &a.RefusedHash}, {AttrAttempt, &a.Attempt}, {attrSteps, &a.Steps}, {attrStepAnswers, &a.StepAnswers}, {attrOwner, &a.Owner},
		{attrOutbox, &a.Outbox}, {attrOutboxEnc, &a.OutboxEnc}, {attrOutboxGroup, &a.OutboxGroup}, {attrOutboxDead, &a.OutboxDead},
		{attrSent, &a.Sent}, {attrCreatedAt, &a.CreatedAt}, {attrUpdatedAt, &a.UpdatedAt},
	}
}

// attrName is what DynamoDB accepts as an attribute name, kept to what expressions can
// name through a placeholder and a person can type: letters, digits, _ - . #, 1 to 255.
var attrName = regexp.MustCompile(`^[A-Za-z0-9_.#-]{1,255}$`)

// ErrLayout is wrapped by the errors of an invalid Layout.
var ErrLayout = errors.New("idem: invalid layout")

func (l Layout) Schema() (*Schema, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	s := &Schema{Table: l.Table, pk: or(l.PartitionKey, attrPK), sk: l.SortKey, prefix: l.KeyPrefix, index: or(l.InflightIndex, InflightIndex), names: map[string]string{}}
	if l.Table == "" {
		bad("Table is empty")
	}
	if s.sk != "" {
		s.static = or(l.StaticPartitionKey, "idempotency")
	} else if l.StaticPartitionKey != "" {
		bad("StaticPartitionKey %q needs a SortKey: without one, every record would have the same key", l.StaticPartitionKey)
	}
	taken := map[string]string{}
	claim := func(what, name string) {
		if !attrName.MatchString(name) {
			bad("%s %q is not an attribute name (1 to 255 of letters, digits, _ - . #)", what, name)
			return
		}
		if other, ok := taken[name]; ok {
			bad("%s and %s are both %q", other, what, name)
			return
		}
		taken[name] = what
	}
	claim("PartitionKey", s.pk)
	if s.sk != "" {
		claim("SortKey", s.sk)
	}
	a := l.Attributes
	for _, c := range a.canonical() {
		name := or(*c.set, c.name)
		claim("Attributes."+fieldName(c.name), name)
		s.names[c.name] = name
	}
	if s.index != NoIndex && !attrName.MatchString(s.index) {
		bad("InflightIndex %q is not an index name", s.index)
	}
	if strings.ContainsAny(l.KeyPrefix, "\x00") {
		bad("KeyPrefix holds a NUL byte")
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLayout, err)
	}
	return s, nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// fieldName is the Attributes field of a canonical name: lease_until -> LeaseUntil.
func fieldName(canonical string) string {
	var b strings.Builder
	for _, part := range strings.Split(canonical, "_") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

// defaultSchema is the layout of CreateTable's table (its table name aside); the
// defaults are valid, and TestLayouts checks it.
var defaultSchema, _ = Layout{Table: "idempotency"}.Schema()

// n returns the attribute's name in the table.
func (s *Schema) n(canonical string) string { return s.names[canonical] }

// hasIndex reports whether the table has the in-flight index.
func (s *Schema) hasIndex() bool { return s.index != NoIndex }

// key returns the table key of the record key rk.
func (s *Schema) key(rk string) map[string]types.AttributeValue {
	if s.sk == "" {
		return map[string]types.AttributeValue{s.pk: AvS(s.prefix + rk)}
	}
	return map[string]types.AttributeValue{s.pk: AvS(s.static), s.sk: AvS(s.prefix + rk)}
}

// recordKey returns the record key of an item of the table, and whether the item is a
// record of this layout at all (its key attributes are there and carry the prefix and
// the static value).
func (s *Schema) recordKey(item map[string]types.AttributeValue) (string, bool) {
	attr := s.pk
	if s.sk != "" {
		pk, ok := item[s.pk].(*types.AttributeValueMemberS)
		if !ok || pk.Value != s.static {
			return "", false
		}
		attr = s.sk
	}
	v, ok := item[attr].(*types.AttributeValueMemberS)
	if !ok || !strings.HasPrefix(v.Value, s.prefix) {
		return "", false
	}
	return strings.TrimPrefix(v.Value, s.prefix), true
}

// keyAttr is the key attribute whose absence means "no record" in a condition.
func (s *Schema) keyAttr() string {
	if s.sk != "" {
		return s.sk
	}
	return s.pk
}
