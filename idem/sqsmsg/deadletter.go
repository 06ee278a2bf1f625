package sqsmsg

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// SQSSender is the one SQS call SQSDeadLetter makes; *sqs.Client implements it.
type SQSSender interface {
	SendMessage(ctx context.Context, params *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// Message attributes SQSDeadLetter adds to a dead-lettered message.
const (
	// DLQReasonAttribute holds the error text, at most MaxDLQReasonBytes of it.
	DLQReasonAttribute = "dlq-reason"
	// DLQSourceMessageIDAttribute holds the id of the message in the source queue.
	DLQSourceMessageIDAttribute = "dlq-source-message-id"
	// DLQSourceQueueAttribute holds the ARN of the source queue.
	DLQSourceQueueAttribute = "dlq-source-queue"
	// DLQFailedAtAttribute holds when the message was dead-lettered (RFC 3339, UTC).
	DLQFailedAtAttribute = "dlq-failed-at"
	// DLQSourceAttribute holds SQSDeadLetter.Source, when set.
	DLQSourceAttribute = "dlq-source"
	// DLQOutboundQueueAttribute marks an outbound message (Result.Messages) that SQS
	// refused for good: it holds the queue the message was for. Such a dead letter is
	// not an input message: redriven, it goes back to that queue, not to the input.
	DLQOutboundQueueAttribute = "dlq-outbound-queue"
	// DLQAttributesAttribute holds, on the dead letter of an outbound message, all the
	// message's attributes but its KeyAttribute, as one JSON object of names to values:
	// with the dlq-* attributes beside them, a message's own 10 would not fit SQS's
	// limit of 10 (MaxMessageAttributes). OriginalAttributes restores them.
	DLQAttributesAttribute = "dlq-attributes"
	// DLQBodyCutAttribute marks the dead letter of an input message too large for the
	// dead-letter queue once its key and reason are added (a producer's message near
	// the limit, keyed by a long MessageDeduplicationId): its body is the message's first
	// bytes, and this says how long the whole body was and its SHA-256 ("N bytes, sha256
	// HEX"), so the producer's copy can be found and checked. idemctl redrive leaves
	// such a dead letter where it is.
	DLQBodyCutAttribute = "dlq-body-cut"
)

// MaxDLQReasonBytes bounds the error text kept in DLQReasonAttribute.
const MaxDLQReasonBytes = 1024

// dlqAttributePrefix starts the name of every attribute a dead letter has of its own.
const dlqAttributePrefix = "dlq-"

// MinDLQReasonBytes is the shortest SQSDeadLetter cuts DLQReasonAttribute to when a
// message would otherwise exceed the dead-letter queue's size limit.
const MinDLQReasonBytes = 128

// reasonCut marks a reason shortened to fit the message size limit.
const reasonCut = "…"

// SQSDeadLetter is a DeadLetterer that sends a message that failed permanently to a
// dead-letter queue: the original body unchanged, the original message attributes, and
// attributes saying why, from where and when (see the DLQ*Attribute constants). A FIFO
// dead-letter queue (URL ending in ".fifo") keeps the message group and deduplicates
// on the source message id, so a poison message dead-lettered twice (its record was
// redelivered before the acknowledgement reached SQS) appears once.
//
// SQS allows 10 message attributes. The dlq-* attributes always go, then the original
// KeyAttribute, then the other original attributes in name order until the limit; the
// rest are dropped. When the original has no KeyAttribute but was keyed by its FIFO
// MessageDeduplicationId, that id is added as KeyAttribute, so a message redriven from
// the dead-letter queue keeps its idempotency key. An outbound message's attributes are
// never dropped: they travel together in DLQAttributesAttribute (DeadLetterOutbound).
//
// SQS also counts the attributes (names, data types and values) with the body against
// the queue's maximum message size, so a message near that size would be refused once
// the dlq-* attributes are added. When body and attributes exceed MaxMessageBytes,
// SQSDeadLetter drops, until the message fits: the copied original attributes (last in
// name order first; KeyAttribute stays, redrive needs it), then shortens dlq-reason down
// to MinDLQReasonBytes (cut at a rune boundary and ending in "…"), then drops
// dlq-source, dlq-failed-at and dlq-source-queue. If the message still does not fit (a
// producer's message at the limit, keyed by a long MessageDeduplicationId that becomes
// KeyAttribute), its body is cut to the longest prefix that fits, at a rune boundary,
// and DLQBodyCutAttribute gives the whole body's length and SHA-256: the message is
// dead-lettered at once with its key, its reason and dlq-source-message-id, rather than
// retried until SQS's redrive parks it, holding its FIFO group, with no reason. An
// outbound message's body is never cut (dlq-source-message-id, which it does not have,
// and dlq-reason go instead). When the
// attributes that always stay leave no room for a byte of the body, DeadLetter returns
// an error and sends nothing.
//
// The zero value is not usable: API and QueueURL are required. Its methods are safe for
// concurrent use when API is.
type SQSDeadLetter struct {
	// API sends the message (required).
	API SQSSender
	// QueueURL is the dead-letter queue (required).
	QueueURL string
	// Source names the consumer, e.g. the function name (optional).
	Source string
	// Clock returns the current time (default time.Now).
	Clock func() time.Time
	// MaxMessageBytes is the size SQS allows a message on the dead-letter queue,
	// counted as SQS does: body plus attribute names, data types and values (default
	// MaxSQSMessageBytes). Set it to the queue's MaximumMessageSize when that is lower.
	MaxMessageBytes int
	// Keys sign every dead letter (DLQSignatureAttribute), so that `idemctl redrive`
	// tells it from a message a producer forged (Keys.VerifyDeadLetter) and honours its
	// dlq-outbound-queue (optional: without them, a redrive sends this dead letter to the
	// input queue whatever it says).
	Keys *Keys
}

// DeadLetterOutbound sends an outbound message that SQS refused for good to the
// dead-letter queue: its body, its KeyAttribute, its other attributes all together in
// DLQAttributesAttribute (so none is dropped for want of room among SQS's 10), the
// reason, and DLQOutboundQueueAttribute with the queue it was for. On a FIFO
// dead-letter queue it keeps its group and deduplicates on its key, so a message
// refused on two tries is kept once. Redriven, it is the committed message again
// (OriginalAttributes).
func (d *SQSDeadLetter) DeadLetterOutbound(ctx context.Context, m persistence.Message, cause error) error {
	key := m.Attributes[KeyAttribute]
	src := events.SQSMessage{Body: m.Body, MessageAttributes: map[string]events.SQSMessageAttribute{}, Attributes: map[string]string{}}
	if key != "" {
		src.MessageAttributes[KeyAttribute] = events.SQSMessageAttribute{DataType: stringType, StringValue: aws.String(key)}
	}
	if m.GroupID != "" {
		src.Attributes["MessageGroupId"] = m.GroupID
	}
	in, err := d.inputFor(src, cause, m.QueueURL, key, outboundEnvelope(m.Attributes))
	if err == nil {
		_, err = d.API.SendMessage(ctx, in)
	}
	if err != nil {
		return fmt.Errorf("idem: dead-letter outbound message %s: %w", persistence.Redact(key), err)
	}
	return nil
}

// outboundEnvelope is the value of DLQAttributesAttribute for an outbound message's
// attributes: all but KeyAttribute, as a JSON object ("" when there are none).
func outboundEnvelope(attrs map[string]string) string {
	rest := maps.Clone(attrs)
	delete(rest, KeyAttribute)
	if len(rest) == 0 {
		return ""
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(rest) // a map of strings always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// OriginalAttributes returns the message attributes of the message a dead letter holds,
// from the dead letter's attributes as received: all but the dlq-* ones, and those of an
// outbound message carried in DLQAttributesAttribute (as String attributes).
func OriginalAttributes(attrs map[string]types.MessageAttributeValue) (map[string]types.MessageAttributeValue, error) {
	out := map[string]types.MessageAttributeValue{}
	for name, v := range attrs {
		if !strings.HasPrefix(name, dlqAttributePrefix) {
			out[name] = types.MessageAttributeValue{DataType: v.DataType, StringValue: v.StringValue, BinaryValue: v.BinaryValue}
		}
	}
	env, ok := attrs[DLQAttributesAttribute]
	if !ok {
		return out, nil
	}
	var carried map[string]string
	if err := json.Unmarshal([]byte(aws.ToString(env.StringValue)), &carried); err != nil {
		return nil, fmt.Errorf("idem: the dead letter's %s attribute: %w", DLQAttributesAttribute, err)
	}
	for name, v := range carried {
		out[name] = StringAttribute(v)
	}
	return out, nil
}

// DeadLetter sends msg, failed with cause, to the dead-letter queue.
func (d *SQSDeadLetter) DeadLetter(ctx context.Context, msg events.SQSMessage, cause error) error {
	in, err := d.input(msg, cause)
	if err == nil {
		_, err = d.API.SendMessage(ctx, in)
	}
	if err != nil {
		return fmt.Errorf("idem: dead-letter %s: %w", msg.MessageId, err)
	}
	return nil
}

// input builds the SendMessage request for msg.
func (d *SQSDeadLetter) input(msg events.SQSMessage, cause error) (*sqs.SendMessageInput, error) {
	return d.inputFor(msg, cause, "", "", "")
}

// inputFor builds the SendMessage request for an input message (outbound ""), or for
// an outbound message to the queue outbound, whose key dedups it on a FIFO queue and
// whose other attributes are envelope (outboundEnvelope), never dropped.
func (d *SQSDeadLetter) inputFor(msg events.SQSMessage, cause error, outbound, key, envelope string) (*sqs.SendMessageInput, error) {
	switch {
	case d == nil || d.API == nil:
		return nil, errors.New("SQSDeadLetter.API is nil")
	case d.QueueURL == "":
		return nil, errors.New("SQSDeadLetter.QueueURL is empty")
	case msg.MessageId == "" && outbound == "":
		return nil, errors.New("message has no id")
	case d.MaxMessageBytes < 0:
		return nil, fmt.Errorf("SQSDeadLetter.MaxMessageBytes is negative (%d)", d.MaxMessageBytes)
	}
	limit := d.MaxMessageBytes
	if limit == 0 {
		limit = MaxSQSMessageBytes
	}
	now := time.Now
	if d.Clock != nil {
		now = d.Clock
	}
	reason := "unknown error"
	if cause != nil && cause.Error() != "" {
		reason = cause.Error()
	}
	attrs := map[string]types.MessageAttributeValue{}
	add := func(name, value string) {
		if value = AttributeText(value, MaxDLQReasonBytes); value != "" {
			attrs[name] = StringAttribute(value)
		}
	}
	add(DLQReasonAttribute, reason)
	add(DLQSourceMessageIDAttribute, msg.MessageId)
	add(DLQSourceQueueAttribute, msg.EventSourceARN)
	add(DLQFailedAtAttribute, now().UTC().Format(time.RFC3339))
	add(DLQSourceAttribute, d.Source)
	add(DLQOutboundQueueAttribute, outbound)
	if envelope != "" {
		attrs[DLQAttributesAttribute] = StringAttribute(envelope)
	}

	if v, ok := copyAttribute(msg.MessageAttributes[KeyAttribute]); ok {
		attrs[KeyAttribute] = v
	} else if id := msg.Attributes["MessageDeduplicationId"]; DedupIDIsKey(id, msg.Body) {
		if _, present := msg.MessageAttributes[KeyAttribute]; !present {
			add(KeyAttribute, id)
		}
	}
	// The ingress's signature goes with the key, never dropped: redriven, the message
	// must still show that the ingress sent its key (KeyRule.Keys).
	if v, ok := copyAttribute(msg.MessageAttributes[IngressSignatureAttribute]); ok {
		attrs[IngressSignatureAttribute] = v
	}
	if d.Keys != nil {
		// A placeholder of the signature's size, so that the message is fitted with it;
		// the signature, over what is sent, is written once the message fits.
		attrs[DLQSignatureAttribute] = StringAttribute(strings.Repeat("0", sha256.Size*2))
	}
	names := make([]string, 0, len(msg.MessageAttributes))
	for name := range msg.MessageAttributes {
		if _, taken := attrs[name]; !taken && name != KeyAttribute && !isDLQAttribute(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	copied := make([]string, 0, len(names))
	for _, name := range names {
		if len(attrs) == MaxMessageAttributes {
			break
		}
		if v, ok := copyAttribute(msg.MessageAttributes[name]); ok {
			attrs[name] = v
			copied = append(copied, name)
		}
	}
	body, err := fitMessage(msg.Body, attrs, copied, limit, outbound == "")
	if err != nil {
		return nil, err
	}

	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(d.QueueURL),
		MessageBody:       aws.String(body),
		MessageAttributes: attrs,
	}
	if strings.HasSuffix(d.QueueURL, ".fifo") {
		group := msg.Attributes["MessageGroupId"]
		if group == "" {
			group = "dead-letter"
		}
		in.MessageGroupId = aws.String(group)
		if outbound != "" {
			in.MessageDeduplicationId = aws.String(dlqDeduplicationID("outbound#" + key))
		} else {
			in.MessageDeduplicationId = aws.String(dlqDeduplicationID(msg.MessageId))
		}
	}
	if d.Keys != nil {
		sig := d.Keys.deadLetterSignature(body, aws.ToString(in.MessageGroupId), attrs)
		attrs[DLQSignatureAttribute] = StringAttribute(sig)
	}
	return in, nil
}

// fitMessage removes or shortens attributes, in place, until body and attrs fit in
// limit bytes as SQS counts them, and returns the body to send: first the copied
// original attributes go (copied, in the order they were added: the last goes first),
// then the reason is cut down to MinDLQReasonBytes, then the optional dlq-* attributes
// go. If that is not enough, an input message's body is cut (cutBody): its first bytes
// are sent, at a rune boundary, with DLQBodyCutAttribute naming the whole body's length
// and SHA-256, so that it is dead-lettered at once with its key, its reason and its
// source message id rather than retried until SQS parks it; an outbound message's
// reason goes instead (its body, whole, is what a redrive sends). KeyAttribute, the ingress's signature, dlq-attributes
// and dlq-signature are never dropped; when they leave no room, fitMessage fails.
func fitMessage(body string, attrs map[string]types.MessageAttributeValue, copied []string, limit int, cutBody bool) (string, error) {
	size := messageSize(body, attrs)
	for i := len(copied) - 1; i >= 0 && size > limit; i-- {
		size -= attributeSize(copied[i], attrs[copied[i]])
		delete(attrs, copied[i])
	}
	if v, ok := attrs[DLQReasonAttribute]; ok && size > limit {
		reason := aws.ToString(v.StringValue)
		short := shortenText(reason, max(len(reason)-(size-limit), MinDLQReasonBytes))
		attrs[DLQReasonAttribute] = types.MessageAttributeValue{DataType: v.DataType, StringValue: aws.String(short)}
		size -= len(reason) - len(short)
	}
	optional := []string{DLQSourceAttribute, DLQFailedAtAttribute, DLQSourceQueueAttribute}
	if !cutBody {
		optional = append(optional, DLQSourceMessageIDAttribute, DLQReasonAttribute)
	}
	for _, name := range optional {
		if size <= limit {
			break
		}
		if v, ok := attrs[name]; ok {
			size -= attributeSize(name, v)
			delete(attrs, name)
		}
	}
	if size <= limit {
		return body, nil
	}
	if cutBody {
		sum := sha256.Sum256([]byte(body))
		mark := fmt.Sprintf("%d bytes, sha256 %s", len(body), hex.EncodeToString(sum[:]))
		size += StringAttributeCost(DLQBodyCutAttribute, mark)
		if kept := runePrefix(body, len(body)-(size-limit)); kept != "" {
			attrs[DLQBodyCutAttribute] = StringAttribute(mark)
			return kept, nil
		}
	}
	return "", fmt.Errorf("no room for the body (%d bytes) beside the attributes the dead letter must keep (%d bytes: %s, its signatures, dlq-attributes, its reason or %s) within the dead-letter queue's message size limit of %d bytes (SQSDeadLetter.MaxMessageBytes)",
		len(body), size-len(body), KeyAttribute, DLQBodyCutAttribute, limit)
}

// messageSize is the size of a message as SQS counts it against the maximum message
// size: the body's bytes plus, for each message attribute, the bytes of its name, its
// data type and its value (see MaxSQSMessageBytes).
func messageSize(body string, attrs map[string]types.MessageAttributeValue) int {
	n := len(body)
	for name, v := range attrs {
		n += attributeSize(name, v)
	}
	return n
}

// attributeSize is what one message attribute adds to a message's size.
func attributeSize(name string, v types.MessageAttributeValue) int {
	return attributeCost(name, aws.ToString(v.DataType), len(aws.ToString(v.StringValue))+len(v.BinaryValue))
}

// shortenText cuts s to at most limit bytes, at a rune boundary, ending it with
// reasonCut to show it was cut. s is returned unchanged when it fits.
func shortenText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	n, mark := limit-len(reasonCut), reasonCut
	if n < 0 {
		n, mark = max(limit, 0), ""
	}
	return runePrefix(s, n) + mark
}

// runePrefix is the longest prefix of s of at most n bytes that ends at a rune boundary
// ("" when n < 1).
func runePrefix(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// isDLQAttribute reports whether name is one of the attributes DeadLetter sets: the
// values of an earlier dead-lettering (a message redriven and failed again) are
// replaced, not kept beside the new ones.
func isDLQAttribute(name string) bool {
	switch name {
	case DLQReasonAttribute, DLQSourceMessageIDAttribute, DLQSourceQueueAttribute, DLQFailedAtAttribute, DLQSourceAttribute, DLQOutboundQueueAttribute,
		DLQSignatureAttribute, DLQAttributesAttribute, DLQBodyCutAttribute:
		return true
	}
	return false
}

// copyAttribute converts a Lambda event attribute to an SQS one. Attributes SQS would
// refuse (no value, or a list type, which SQS does not support yet) are left out.
func copyAttribute(a events.SQSMessageAttribute) (types.MessageAttributeValue, bool) {
	base, _, _ := strings.Cut(a.DataType, ".")
	switch base {
	case "String", "Number":
		if a.StringValue == nil || *a.StringValue == "" {
			return types.MessageAttributeValue{}, false
		}
		return types.MessageAttributeValue{DataType: aws.String(a.DataType), StringValue: aws.String(*a.StringValue)}, true
	case "Binary":
		if len(a.BinaryValue) == 0 {
			return types.MessageAttributeValue{}, false
		}
		return types.MessageAttributeValue{DataType: aws.String(a.DataType), BinaryValue: slices.Clone(a.BinaryValue)}, true
	}
	return types.MessageAttributeValue{}, false
}

// attributeText makes s acceptable as an SQS string attribute: characters SQS refuses
// (most control characters, U+FFFE, U+FFFF) become U+FFFD, as does invalid UTF-8,
// and the result is cut at a rune boundary to at most limit bytes.
func AttributeText(s string, limit int) string {
	var b strings.Builder
	for _, r := range s {
		if !SQSAllowed(r) {
			r = utf8.RuneError
		}
		if b.Len()+utf8.RuneLen(r) > limit {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// sqsAllowed reports whether SQS accepts r in a message or attribute value:
// #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF.
func SQSAllowed(r rune) bool {
	switch {
	case r == 0x9 || r == 0xA || r == 0xD:
		return true
	case r >= 0x20 && r <= 0xD7FF:
		return true
	case r >= 0xE000 && r <= 0xFFFD:
		return true
	case r >= 0x10000 && r <= utf8.MaxRune:
		return true
	}
	return false
}

// dlqDeduplicationID derives the MessageDeduplicationId of a dead-lettered message
// from its source message id: "dlq-" and the id when that fits SQS's 128 characters of
// alphanumerics and punctuation, else "dlq-" and the id's SHA-256 in hex.
func dlqDeduplicationID(msgID string) string {
	id := "dlq-" + msgID
	if len(id) <= MaxDeduplicationIDChars && DedupChars(id) {
		return id
	}
	sum := sha256.Sum256([]byte(msgID))
	return "dlq-" + hex.EncodeToString(sum[:])
}

// dedupChars reports whether s has only the characters SQS allows in a
// MessageDeduplicationId: ASCII letters, digits and punctuation.
func DedupChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < '!' || c > '~' {
			return false
		}
	}
	return true
}

// KeyAttribute is the SQS message attribute that carries the producer's idempotency
// key. Its data type must be String (or a custom String.* type).
const KeyAttribute = "idempotency-key"
