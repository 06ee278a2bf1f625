package idem

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idemgo/sqs-lambda-consumer/idem/canonjson"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
)

// ErrMissingKey means an SQS message carries no idempotency key: no KeyAttribute, no
// FIFO MessageDeduplicationId and no configured JSON field. MessageKey returns it
// wrapped as a permanent error: redelivering the same message cannot give it a key.
var ErrMissingKey = errors.New("idem: message has no idempotency key")

// KeySource says where the idempotency key of an SQS message comes from.
type KeySource int

const (
	// KeyFromMessage takes the key a producer gives the message: its KeyAttribute, else
	// its FIFO MessageDeduplicationId, else the configured JSON field (MessageKey).
	KeyFromMessage KeySource = iota
	// KeyFromField takes the configured JSON field of the body alone, whatever the
	// attribute or the deduplication id say: the business id is the key, so one
	// business operation has one record under whatever keys its producers send it (two
	// HTTP requests with two Idempotency-Keys, one copy through the ingress and one
	// straight to SQS). A record that is its operation's guard (Result.HomeGuard) needs
	// it: the guard stands for the business id.
	KeyFromField
)

// ParseKeySource returns the KeySource named s: "message" or "field", as String writes
// them.
func ParseKeySource(s string) (KeySource, error) {
	for _, k := range []KeySource{KeyFromMessage, KeyFromField} {
		if s == k.String() {
			return k, nil
		}
	}
	return 0, fmt.Errorf("idem: key source %q is not %q or %q", s, KeyFromMessage, KeyFromField)
}

func (k KeySource) String() string {
	switch k {
	case KeyFromMessage:
		return "message"
	case KeyFromField:
		return "field"
	}
	return fmt.Sprintf("KeySource(%d)", int(k))
}

// KeyRule is how a consumer finds a message's idempotency key: the one rule the consumer
// keys its records by, and the ingress reads them by.
type KeyRule struct {
	Source KeySource
	// Field is the top-level JSON field of the body: the fallback of KeyFromMessage
	// ("" for none), the key of KeyFromField (required).
	Field string
	// Keys verify the ingress's signature (IngressSignatureAttribute) of a message whose
	// key is in the HTTP callers' namespace (CallerKeyPrefix): such a key, from any source,
	// is taken only from a message the ingress signed, so that no other producer takes a
	// key an HTTP caller uses (ErrForgedKey). Nil: every such key is refused.
	Keys *sqsmsg.Keys
}

// Check reports a rule that cannot key any message.
func (r KeyRule) Check() error {
	switch r.Source {
	case KeyFromMessage:
		return nil
	case KeyFromField:
		if r.Field == "" {
			return errors.New("idem: the key source field needs a JSON field to read the key from")
		}
		return nil
	}
	return fmt.Errorf("idem: %s is not a key source", r.Source)
}

// Key returns the idempotency key of msg under the rule. A key in the HTTP callers'
// namespace (CallerKeyPrefix) is refused with ErrForgedKey unless the ingress signed msg
// (Keys). Every error is permanent (see MessageKey).
func (r KeyRule) Key(msg events.SQSMessage) (string, error) {
	key, err := r.key(msg)
	if err != nil {
		return "", err
	}
	if err := checkNamespace(r.Keys, msg, key); err != nil {
		return "", err
	}
	return key, nil
}

func (r KeyRule) key(msg events.SQSMessage) (string, error) {
	if r.Source == KeyFromField {
		if r.Field == "" {
			return "", Permanent(fmt.Errorf("idem: key of message %s: %w", msg.MessageId, r.Check()))
		}
		return bodyKey(msg, r.Field, fmt.Sprintf("no JSON field %q, which is the key of every message (key source %s)", r.Field, KeyFromField))
	}
	return MessageKey(msg, r.Field)
}

// MessageKey returns the idempotency key of an SQS message, looked up in this order:
//  1. the message attribute KeyAttribute, which must be of data type String or
//     String.* and non-empty; a present but unusable attribute is an error, it does not
//     fall through to the next source (a producer that sets it means it);
//  2. the FIFO system attribute MessageDeduplicationId, unless it is the SHA-256 of the
//     body that a queue with content-based deduplication derives: that id names a body,
//     not an operation, so such a message needs the attribute or the JSON field;
//  3. when jsonField is not empty, that top-level field of the JSON body: a non-empty
//     string, or an integer number rendered exactly as written (no float rounding).
//
// Every error is permanent (IsPermanent reports true); a message without any key
// matches errors.Is(err, ErrMissingKey).
func MessageKey(msg events.SQSMessage, jsonField string) (string, error) {
	if attr, ok := msg.MessageAttributes[sqsmsg.KeyAttribute]; ok {
		if attr.DataType != "String" && !strings.HasPrefix(attr.DataType, "String.") {
			return "", Permanent(fmt.Errorf("idem: key of message %s: attribute %q has data type %q, want String: %w",
				msg.MessageId, sqsmsg.KeyAttribute, attr.DataType, ErrInvalidKey))
		}
		if attr.StringValue == nil || *attr.StringValue == "" {
			return "", Permanent(fmt.Errorf("idem: key of message %s: attribute %q is empty: %w",
				msg.MessageId, sqsmsg.KeyAttribute, ErrInvalidKey))
		}
		return *attr.StringValue, nil
	}
	id := msg.Attributes["MessageDeduplicationId"]
	if sqsmsg.DedupIDIsKey(id, msg.Body) {
		return id, nil
	}
	noID := "no MessageDeduplicationId"
	switch {
	case sqsmsg.ContentDeduplicationID(id, msg.Body):
		noID = "a MessageDeduplicationId that is the SHA-256 of its body (content-based deduplication), which names a body, " +
			"not an operation: the same body sent again after SQS's 5-minute deduplication interval would be taken for a duplicate"
	case id != "":
		noID = fmt.Sprintf("a MessageDeduplicationId that a redrive gave it (%s...), which names the redrive, not an operation", sqsmsg.RedriveDedupPrefix)
	}
	if jsonField == "" {
		return "", Permanent(fmt.Errorf("idem: key of message %s: no %q attribute and %s: %w",
			msg.MessageId, sqsmsg.KeyAttribute, noID, ErrMissingKey))
	}
	return bodyKey(msg, jsonField, fmt.Sprintf("no %q attribute, %s, and no JSON field %q", sqsmsg.KeyAttribute, noID, jsonField))
}

// bodyKey reads the key from a top-level field of the JSON body; missing says what the
// message lacks when the field is not there.
func bodyKey(msg events.SQSMessage, field, missing string) (string, error) {
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(strings.NewReader(msg.Body))
	if err := dec.Decode(&obj); err != nil {
		return "", Permanent(fmt.Errorf("idem: key of message %s: body is not a JSON object: %s", msg.MessageId, jsonFault(err)))
	}
	if obj == nil {
		return "", Permanent(fmt.Errorf("idem: key of message %s: body is not a JSON object: null", msg.MessageId))
	}
	if !canonjson.AtEnd(dec) {
		return "", Permanent(fmt.Errorf("idem: key of message %s: body has data after the JSON object", msg.MessageId))
	}
	raw, ok := obj[field]
	if !ok || bytes.Equal(raw, []byte("null")) {
		return "", Permanent(fmt.Errorf("idem: key of message %s: %s: %w", msg.MessageId, missing, ErrMissingKey))
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", Permanent(fmt.Errorf("idem: key of message %s: JSON field %q: %s", msg.MessageId, field, jsonFault(err)))
		}
		if s == "" {
			return "", Permanent(fmt.Errorf("idem: key of message %s: JSON field %q is empty: %w", msg.MessageId, field, ErrMissingKey))
		}
		return s, nil
	case c == '-' || c >= '0' && c <= '9':
		// The decoder has validated the number; an integer has no fraction or exponent.
		// The literal is kept as written, so 12345678901234567890 stays exact.
		if bytes.ContainsAny(raw, ".eE") {
			return "", Permanent(fmt.Errorf("idem: key of message %s: JSON field %q is a number with a fraction or an exponent, not an integer", msg.MessageId, field))
		}
		return string(raw), nil
	default:
		return "", Permanent(fmt.Errorf("idem: key of message %s: JSON field %q must be a string or an integer", msg.MessageId, field))
	}
}

// KeyAttribute is the SQS message attribute that carries the producer's idempotency
// key (sqsmsg.KeyAttribute).
const KeyAttribute = sqsmsg.KeyAttribute

// jsonFault describes a decoding error without the body's bytes, which encoding/json
// quotes ("invalid character 'x'"): the text goes to logs, which carry no payload.
func jsonFault(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("invalid JSON at byte %d", syntax.Offset)
	case errors.As(err, &typ): // its Value quotes a number
		return "another JSON value"
	case errors.Is(err, io.EOF):
		return "empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	}
	return "undecodable JSON"
}
