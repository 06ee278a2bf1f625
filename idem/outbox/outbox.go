package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"go.opentelemetry.io/otel/trace"
)

// OutboundKey is the idempotency key of the outbound message at position i of the
// Result.Messages committed under the record key pk (Client.RecordKey): pk, "#", i. The
// middleware puts it in the message's KeyAttribute, and its FIFO deduplication id is
// DeduplicationID(OutboundKey(pk, i)). Each message of a record has a key of its own, and
// a resent message (a crash between its send and the mark that it was sent) carries the
// same key again: a receiver that keys on it, as a consumer built on this package does,
// applies every message once, even a resend that comes after SQS's 5-minute
// deduplication interval. The scope in pk keeps two scopes' messages apart on a shared
// queue.
func OutboundKey(pk string, i int) string { return pk + "#" + strconv.Itoa(i) }

// MaxOutboundMessages bounds Result.Messages. SQS's own limits on a message are in
// sqslimits.go (MaxOutboundMessageBytes, MaxMessageAttributes, ...).
const MaxOutboundMessages = 50

// ErrInvalidMessage means an outbound message in Result.Messages can never be sent (no
// queue, an empty body, a missing FIFO group, too large...). It is permanent, and it is
// found before anything is committed.
var ErrInvalidMessage = errors.New("idem: invalid outbound message")

// SQSBatchSender is the SQS call the outbox makes; *sqs.Client implements it.
type SQSBatchSender interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// Pending is a committed record's outbound messages that are not known to be sent yet.
// The middleware hands it to the BatchProcessor, which sends the pendings of a whole
// batch together (Client.Deliver), or sends it itself when there is no batch.
type Pending struct {
	Key      string                // record key
	Token    string                // lease token of the completion that stored the messages
	Messages []persistence.Message // with DeduplicationID and KeyAttribute filled in
	// Dead lists, once Deliver has run, the messages SQS refused for good and that were
	// dead-lettered instead of sent.
	Dead []persistence.DeadMessage

	// OnSent, when set, runs once the messages are all sent and marked (Client.Deliver).
	OnSent    func()
	Committed time.Time         // when they were committed (the reaper sends in that order)
	Origin    trace.SpanContext // the span of the record that committed them: their send's parent
}

// prepareMessages validates a handler's outbound messages and fills in what the
// middleware derives: the deduplication id of FIFO messages and the key attribute.
func PrepareMessages(pk string, msgs []persistence.Message) ([]persistence.Message, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if len(msgs) > MaxOutboundMessages {
		return nil, fmt.Errorf("%w: %d messages, at most %d", ErrInvalidMessage, len(msgs), MaxOutboundMessages)
	}
	out := make([]persistence.Message, len(msgs))
	keys := make(map[string]int, len(msgs))
	dedup := make(map[[2]string]int, len(msgs))
	for i, m := range msgs {
		m.Attributes = maps.Clone(m.Attributes)
		if m.Attributes == nil {
			m.Attributes = map[string]string{}
		}
		if _, ok := m.Attributes[sqsmsg.KeyAttribute]; !ok {
			m.Attributes[sqsmsg.KeyAttribute] = OutboundKey(pk, i)
		}
		if fifoQueue(m.QueueURL) && m.DeduplicationID == "" {
			m.DeduplicationID = DeduplicationID(OutboundKey(pk, i))
		}
		if err := validateMessage(&m); err != nil {
			return nil, fmt.Errorf("%w: message %d: %w", ErrInvalidMessage, i, err)
		}
		// A receiver keyed on the message's key would apply the first of two messages
		// that share one and refuse the other as a payload mismatch.
		if j, dup := keys[m.Attributes[sqsmsg.KeyAttribute]]; dup {
			return nil, fmt.Errorf("%w: messages %d and %d have the same %s attribute: each needs a key of its own", ErrInvalidMessage, j, i, sqsmsg.KeyAttribute)
		}
		keys[m.Attributes[sqsmsg.KeyAttribute]] = i
		// SQS accepts a second message with a deduplication id its FIFO queue has seen in
		// the last 5 minutes and never delivers it: one of the two would be lost. The
		// check is per queue, group or not, since a queue deduplicates across its groups
		// unless its DeduplicationScope is messageGroup.
		if fifoQueue(m.QueueURL) {
			id := [2]string{m.QueueURL, m.DeduplicationID}
			if j, dup := dedup[id]; dup {
				return nil, fmt.Errorf("%w: messages %d and %d go to %s with the same DeduplicationID: SQS would deliver only the first", ErrInvalidMessage, j, i, m.QueueURL)
			}
			dedup[id] = i
		}
		out[i] = m
	}
	return out, nil
}

func fifoQueue(queueURL string) bool { return strings.HasSuffix(queueURL, ".fifo") }

// validate checks what SQS would refuse for good, so the refusal comes before the commit.
func validateMessage(m *persistence.Message) error {
	u, err := url.Parse(m.QueueURL)
	switch {
	case m.QueueURL == "":
		return errors.New("QueueURL is empty")
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
		return fmt.Errorf("QueueURL %q is not an http(s) queue URL", m.QueueURL)
	case m.Body == "":
		return errors.New("body is empty")
	case !sqsText(m.Body):
		return errors.New("body has characters SQS does not accept")
	}
	if fifoQueue(m.QueueURL) {
		if !validSQSID(m.GroupID) {
			return errors.New("GroupID must be 1 to 128 ASCII letters, digits or punctuation on a FIFO queue")
		}
		if !validSQSID(m.DeduplicationID) {
			return errors.New("DeduplicationID must be 1 to 128 ASCII letters, digits or punctuation")
		}
	} else if m.DeduplicationID != "" {
		return errors.New("DeduplicationID is only for FIFO queues")
	}
	if len(m.Attributes) > sqsmsg.MaxMessageAttributes {
		return fmt.Errorf("%d attributes, SQS allows %d (KeyAttribute included)", len(m.Attributes), sqsmsg.MaxMessageAttributes)
	}
	for name, v := range m.Attributes {
		if name == "" || len(name) > 256 || v == "" || !sqsText(v) {
			return fmt.Errorf("attribute %q: name must be 1 to 256 bytes and the value non-empty SQS text", sqsmsg.AttributeText(name, 40))
		}
	}
	if n := outboundSize(m); n > sqsmsg.MaxOutboundMessageBytes {
		return fmt.Errorf("%d bytes with its attributes, at most %d", n, sqsmsg.MaxOutboundMessageBytes)
	}
	return nil
}

// size is the message's size as SQS counts it: the body, and each attribute's name,
// data type and value (attributeCost).
func outboundSize(m *persistence.Message) int {
	n := len(m.Body)
	for name, v := range m.Attributes {
		n += sqsmsg.StringAttributeCost(name, v)
	}
	return n
}

func sqsText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !sqsmsg.SQSAllowed(r) {
			return false
		}
	}
	return true
}

func validSQSID(s string) bool {
	return len(s) > 0 && len(s) <= sqsmsg.MaxDeduplicationIDChars && sqsmsg.DedupChars(s)
}

// hashedIDPrefix starts every id DeduplicationID derives by hashing.
const hashedIDPrefix = "sha256-"

// DeduplicationID returns s as an SQS MessageDeduplicationId or MessageGroupId: s itself
// when it is 1 to 128 characters of ASCII letters, digits and punctuation (what SQS
// accepts) and does not start with "sha256-", otherwise "sha256-" and the hex SHA-256 of
// s. The same input always gives the same id, which is what makes a resent message a
// duplicate, and two inputs never give the same id: an input that already looks like a
// hashed id is hashed too, so no key can take the id of a long key's hash (two
// requests sharing a deduplication id would have SQS drop the second for 5 minutes).
func DeduplicationID(s string) string {
	if validSQSID(s) && !strings.HasPrefix(s, hashedIDPrefix) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return hashedIDPrefix + hex.EncodeToString(sum[:])
}
