package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// KeyAttribute is the SQS message attribute that carries the producer's idempotency
// key. Its data type must be String (or a custom String.* type).
const KeyAttribute = "idempotency-key"

// ErrMissingKey means an SQS message carries no idempotency key: no KeyAttribute, no
// FIFO MessageDeduplicationId and no configured JSON field. MessageKey returns it
// wrapped as a permanent error: redelivering the same message cannot give it a key.
var ErrMissingKey = errors.New("idem: message has no idempotency key")

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
	if attr, ok := msg.MessageAttributes[KeyAttribute]; ok {
		if attr.DataType != "String" && !strings.HasPrefix(attr.DataType, "String.") {
			return "", Permanent(fmt.Errorf("idem: key of message %s: attribute %q has data type %q, want String: %w",
				msg.MessageId, KeyAttribute, attr.DataType, ErrInvalidKey))
		}
		if attr.StringValue == nil || *attr.StringValue == "" {
			return "", Permanent(fmt.Errorf("idem: key of message %s: attribute %q is empty: %w",
				msg.MessageId, KeyAttribute, ErrInvalidKey))
		}
		return *attr.StringValue, nil
	}
	id := msg.Attributes["MessageDeduplicationId"]
	contentBased := id != "" && contentDeduplicationID(id, msg.Body)
	if id != "" && !contentBased {
		return id, nil
	}
	noID := "no MessageDeduplicationId"
	if contentBased {
		noID = "a MessageDeduplicationId that is the SHA-256 of its body (content-based deduplication), which names a body, " +
			"not an operation: the same body sent again after SQS's 5-minute deduplication interval would be taken for a duplicate"
	}
	if jsonField == "" {
		return "", Permanent(fmt.Errorf("idem: key of message %s: no %q attribute and %s: %w",
			msg.MessageId, KeyAttribute, noID, ErrMissingKey))
	}
	return bodyKey(msg, jsonField, noID)
}

// contentDeduplicationID reports whether id is the deduplication id SQS derives for a
// FIFO queue with ContentBasedDeduplication: the SHA-256 of the body, in hex
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_CreateQueue.html).
// Such an id identifies a body, not an operation: two operations with the same body (the
// same credit, sent twice on purpose) share it, and SQS only deduplicates them for 5
// minutes, so it must not key a record kept for days.
func contentDeduplicationID(id, body string) bool {
	if len(id) != sha256.Size*2 {
		return false
	}
	sum := sha256.Sum256([]byte(body))
	return strings.EqualFold(id, hex.EncodeToString(sum[:]))
}

// bodyKey reads the key from a top-level field of the JSON body.
func bodyKey(msg events.SQSMessage, field, noID string) (string, error) {
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(strings.NewReader(msg.Body))
	if err := dec.Decode(&obj); err != nil {
		return "", Permanent(fmt.Errorf("idem: key of message %s: body is not a JSON object: %w", msg.MessageId, err))
	}
	if obj == nil {
		return "", Permanent(fmt.Errorf("idem: key of message %s: body is not a JSON object: null", msg.MessageId))
	}
	if dec.More() {
		return "", Permanent(fmt.Errorf("idem: key of message %s: body has data after the JSON object", msg.MessageId))
	}
	raw, ok := obj[field]
	if !ok || bytes.Equal(raw, []byte("null")) {
		return "", Permanent(fmt.Errorf("idem: key of message %s: no %q attribute, %s, and no JSON field %q: %w",
			msg.MessageId, KeyAttribute, noID, field, ErrMissingKey))
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", Permanent(fmt.Errorf("idem: key of message %s: JSON field %q: %w", msg.MessageId, field, err))
		}
		if s == "" {
			return "", Permanent(fmt.Errorf("idem: key of message %s: JSON field %q is empty: %w", msg.MessageId, field, ErrMissingKey))
		}
		return s, nil
	case c == '-' || c >= '0' && c <= '9':
		// The decoder has validated the number; an integer has no fraction or exponent.
		// The literal is kept as written, so 12345678901234567890 stays exact.
		if bytes.ContainsAny(raw, ".eE") {
			return "", Permanent(fmt.Errorf("idem: key of message %s: JSON field %q is %s, not an integer", msg.MessageId, field, raw))
		}
		return string(raw), nil
	default:
		return "", Permanent(fmt.Errorf("idem: key of message %s: JSON field %q must be a string or an integer", msg.MessageId, field))
	}
}
