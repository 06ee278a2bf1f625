package idem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Message is an outbound SQS message that a handler asks for in Result.Messages. It is
// stored in the record by the same transaction that commits the handler's writes, and
// sent only after that commit succeeded: a refused or guarded commit sends nothing, and a
// crash after the commit loses nothing (the next delivery of the key, or the reaper,
// sends what is still pending).
type Message struct {
	// QueueURL is the destination queue (required).
	QueueURL string `json:"q"`
	// Body is the message body (required): at most MaxOutboundMessageBytes together with
	// the attributes, in the characters SQS accepts.
	Body string `json:"b"`
	// GroupID is the MessageGroupId; required for a FIFO queue (URL ending in ".fifo").
	// Keep it a function of the idempotency key (or of something the key determines),
	// so a resend lands in the group of the first send.
	GroupID string `json:"g,omitempty"`
	// DeduplicationID is the MessageDeduplicationId for a FIFO queue. Leave it empty to
	// get one derived from the record key and the message's position in Messages, so a
	// resend is a duplicate downstream.
	DeduplicationID string `json:"d,omitempty"`
	// Attributes are String message attributes (at most 9: the middleware adds
	// KeyAttribute with the message's own idempotency key, OutboundKey, so a consumer
	// built on this package finds it where it looks first). A handler that sets
	// KeyAttribute itself must give each message of a result a key of its own.
	Attributes map[string]string `json:"a,omitempty"`
}

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

// Outbox limits.
const (
	// MaxOutboundMessages bounds Result.Messages.
	MaxOutboundMessages = 50
	// MaxOutboundMessageBytes bounds one outbound message, body and attributes counted as
	// SQS counts them. SQS accepts up to 1 MiB since 2025, but a queue's
	// MaximumMessageSize can be lower and was 256 KiB by default before; the outbox keeps
	// to 256 KiB so that every queue takes what it stores.
	// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html
	MaxOutboundMessageBytes = 256 * 1024
	// maxBatchEntries and maxBatchBytes are SendMessageBatch's limits (10 entries; the
	// sum of the messages' sizes kept under MaxOutboundMessageBytes, see above).
	maxBatchEntries = 10
	maxBatchBytes   = MaxOutboundMessageBytes
)

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
	Key      string    // record key
	Token    string    // lease token of the completion that stored the messages
	Messages []Message // with DeduplicationID and KeyAttribute filled in

	sent *cached // the completed record for the cache, once the messages are sent
}

// prepareMessages validates a handler's outbound messages and fills in what the
// middleware derives: the deduplication id of FIFO messages and the key attribute.
func prepareMessages(pk string, msgs []Message) ([]Message, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if len(msgs) > MaxOutboundMessages {
		return nil, fmt.Errorf("%w: %d messages, at most %d", ErrInvalidMessage, len(msgs), MaxOutboundMessages)
	}
	out := make([]Message, len(msgs))
	keys := make(map[string]int, len(msgs))
	for i, m := range msgs {
		m.Attributes = maps.Clone(m.Attributes)
		if m.Attributes == nil {
			m.Attributes = map[string]string{}
		}
		if _, ok := m.Attributes[KeyAttribute]; !ok {
			m.Attributes[KeyAttribute] = OutboundKey(pk, i)
		}
		if fifoQueue(m.QueueURL) && m.DeduplicationID == "" {
			m.DeduplicationID = DeduplicationID(OutboundKey(pk, i))
		}
		if err := m.validate(); err != nil {
			return nil, fmt.Errorf("%w: message %d: %w", ErrInvalidMessage, i, err)
		}
		// A receiver keyed on the message's key would apply the first of two messages
		// that share one and refuse the other as a payload mismatch.
		if j, dup := keys[m.Attributes[KeyAttribute]]; dup {
			return nil, fmt.Errorf("%w: messages %d and %d have the same %s attribute: each needs a key of its own", ErrInvalidMessage, j, i, KeyAttribute)
		}
		keys[m.Attributes[KeyAttribute]] = i
		out[i] = m
	}
	return out, nil
}

func fifoQueue(queueURL string) bool { return strings.HasSuffix(queueURL, ".fifo") }

// validate checks what SQS would refuse for good, so the refusal comes before the commit.
func (m *Message) validate() error {
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
	if len(m.Attributes) > maxMessageAttributes {
		return fmt.Errorf("%d attributes, SQS allows %d (KeyAttribute included)", len(m.Attributes), maxMessageAttributes)
	}
	for name, v := range m.Attributes {
		if name == "" || len(name) > 256 || v == "" || !sqsText(v) {
			return fmt.Errorf("attribute %q: name must be 1 to 256 bytes and the value non-empty SQS text", attributeText(name, 40))
		}
	}
	if n := m.size(); n > MaxOutboundMessageBytes {
		return fmt.Errorf("%d bytes with its attributes, at most %d", n, MaxOutboundMessageBytes)
	}
	return nil
}

// size is the message's size as SQS counts it: the body, and each attribute's name,
// data type and value.
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html
func (m *Message) size() int {
	n := len(m.Body)
	for name, v := range m.Attributes {
		n += len(name) + len("String") + len(v)
	}
	return n
}

func sqsText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !sqsAllowed(r) {
			return false
		}
	}
	return true
}

func validSQSID(s string) bool { return len(s) > 0 && len(s) <= maxDeduplicationID && dedupChars(s) }

// DeduplicationID returns s as an SQS MessageDeduplicationId or MessageGroupId: s itself
// when it is 1 to 128 characters of ASCII letters, digits and punctuation (what SQS
// accepts), otherwise "sha256-" and the hex SHA-256 of s. The same input always gives
// the same id, which is what makes a resent message a duplicate.
func DeduplicationID(s string) string {
	if validSQSID(s) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256-" + hex.EncodeToString(sum[:])
}

// encodeOutbox is the stored form of pending messages (JSON, compressed like responses).
func encodeOutbox(msgs []Message) ([]byte, string, error) {
	if len(msgs) == 0 {
		return nil, "", nil
	}
	raw, err := json.Marshal(msgs)
	if err != nil {
		return nil, "", fmt.Errorf("idem: encode outbox: %w", err)
	}
	return encodeBlob(raw, "outbox")
}

func decodeOutbox(data []byte, enc string) ([]Message, error) {
	raw, err := decodeResponse(data, enc)
	if err != nil {
		return nil, fmt.Errorf("idem: outbox: %w", err)
	}
	var msgs []Message
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, fmt.Errorf("idem: decode outbox: %w", err)
	}
	return msgs, nil
}

// DeliverTimeout bounds the sends and the marking of one Deliver call when the caller's
// context has no deadline or has already ended (the invocation's deadline is the
// commonest reason to be late, and a pending message must still get its chance).
const deliverTimeout = 10 * time.Second

// Deliver sends the messages of pendings with SendMessageBatch, at most 10 to a request
// and per queue in the order given (so a FIFO group keeps its order), then marks each
// pending whose messages were all accepted as sent in its record. It returns one error
// per pending, nil for those sent and marked. A pending whose messages were only partly
// accepted stays pending: its record is found again by the next delivery of the key or
// by the reaper, and the resent messages carry the same deduplication ids.
func (c *Client) Deliver(ctx context.Context, pendings []*Pending) []error {
	errs := deliver(ctx, c.cfg.Sender, c.cfg.Store, c.cfg.Clock, pendings)
	for i, p := range pendings {
		if errs[i] == nil && p.sent != nil {
			c.cache.put(*p.sent) // a warm duplicate is answered with no request
		}
	}
	return errs
}

// sendEntry is one message of one pending in a SendMessageBatch request.
type sendEntry struct {
	pending int
	msg     *Message
}

func deliver(ctx context.Context, api SQSBatchSender, store Store, clock func() time.Time, pendings []*Pending) []error {
	errs := make([]error, len(pendings))
	if len(pendings) == 0 {
		return errs
	}
	if api == nil {
		for i, p := range pendings {
			errs[i] = fmt.Errorf("idem: deliver %s: outbound messages pending but no SQS sender is configured (Config.Sender)", redact(p.Key))
		}
		return errs
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deliverTimeout)
	defer cancel()
	// Group by queue, keeping the order of pendings and of their messages.
	var queues []string
	byQueue := map[string][]sendEntry{}
	for i, p := range pendings {
		for j := range p.Messages {
			m := &p.Messages[j]
			if _, ok := byQueue[m.QueueURL]; !ok {
				queues = append(queues, m.QueueURL)
			}
			byQueue[m.QueueURL] = append(byQueue[m.QueueURL], sendEntry{pending: i, msg: m})
		}
	}
	var mu sync.Mutex
	fail := func(i int, err error) {
		mu.Lock()
		defer mu.Unlock()
		if errs[i] == nil {
			errs[i] = err
		}
	}
	var wg sync.WaitGroup
	for _, q := range queues {
		wg.Go(func() {
			for _, batch := range splitBatches(byQueue[q]) {
				sendBatch(ctx, api, q, batch, pendings, fail)
			}
		})
	}
	wg.Wait()
	sem := make(chan struct{}, maxMarks)
	for i, p := range pendings {
		if errs[i] != nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := store.MarkSent(ctx, p.Key, p.Token, len(p.Messages), clock()); err != nil {
				fail(i, err)
			}
		})
	}
	wg.Wait()
	return errs
}

// maxMarks bounds the MarkSent requests of one Deliver in flight at once (a batch has
// 10 records; a reaper after an outage may have many more).
const maxMarks = 16

// splitBatches cuts a queue's entries into SendMessageBatch requests.
func splitBatches(entries []sendEntry) [][]sendEntry {
	var out [][]sendEntry
	var cur []sendEntry
	size := 0
	for _, e := range entries {
		n := e.msg.size()
		if len(cur) == maxBatchEntries || (len(cur) > 0 && size+n > maxBatchBytes) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, e)
		size += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

func sendBatch(ctx context.Context, api SQSBatchSender, queue string, batch []sendEntry, pendings []*Pending, fail func(int, error)) {
	in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(queue), Entries: make([]sqstypes.SendMessageBatchRequestEntry, len(batch))}
	for i, e := range batch {
		entry := sqstypes.SendMessageBatchRequestEntry{
			Id:          aws.String(strconv.Itoa(i)),
			MessageBody: aws.String(e.msg.Body),
		}
		if e.msg.GroupID != "" {
			entry.MessageGroupId = aws.String(e.msg.GroupID)
		}
		if e.msg.DeduplicationID != "" {
			entry.MessageDeduplicationId = aws.String(e.msg.DeduplicationID)
		}
		if len(e.msg.Attributes) > 0 {
			entry.MessageAttributes = make(map[string]sqstypes.MessageAttributeValue, len(e.msg.Attributes))
			for _, name := range slices.Sorted(maps.Keys(e.msg.Attributes)) {
				entry.MessageAttributes[name] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(e.msg.Attributes[name])}
			}
		}
		in.Entries[i] = entry
	}
	out, err := api.SendMessageBatch(ctx, in)
	if err != nil {
		for _, e := range batch {
			fail(e.pending, fmt.Errorf("idem: send outbound messages of %s to %s: %w", redact(pendings[e.pending].Key), queue, err))
		}
		return
	}
	for _, f := range out.Failed {
		i, err := strconv.Atoi(aws.ToString(f.Id))
		if err != nil || i < 0 || i >= len(batch) {
			continue
		}
		p := batch[i].pending
		fail(p, fmt.Errorf("idem: send outbound message of %s to %s: %s: %s", redact(pendings[p].Key), queue, aws.ToString(f.Code), aws.ToString(f.Message)))
	}
	// An entry neither reported successful nor failed is not known to be sent.
	ok := make([]bool, len(batch))
	for _, s := range out.Successful {
		if i, err := strconv.Atoi(aws.ToString(s.Id)); err == nil && i >= 0 && i < len(batch) {
			ok[i] = true
		}
	}
	for i, e := range batch {
		if !ok[i] {
			fail(e.pending, fmt.Errorf("idem: send outbound message of %s to %s: not confirmed by SQS", redact(pendings[e.pending].Key), queue))
		}
	}
}

// pendingSlot carries a record's pending messages from the middleware to the
// BatchProcessor through the record's context.
type pendingSlot struct {
	p   *Pending
	log func(o outcome, extra error) // the record's log line, written once its outcome is final
}

type pendingSlotKey struct{}

// batchPendings is the set of lease tokens whose messages the running batch will send at
// its end: a duplicate of such a key later in the same batch is a plain replay.
type batchPendings struct {
	mu     sync.Mutex
	tokens map[string]bool
}

type batchPendingsKey struct{}

func withPendingSlot(ctx context.Context, s *pendingSlot) context.Context {
	return context.WithValue(ctx, pendingSlotKey{}, s)
}

func withBatchPendings(ctx context.Context) context.Context {
	return context.WithValue(ctx, batchPendingsKey{}, &batchPendings{tokens: map[string]bool{}})
}

// sentByThisBatch reports whether the running batch holds the messages of token.
func sentByThisBatch(ctx context.Context, token string) bool {
	b, ok := ctx.Value(batchPendingsKey{}).(*batchPendings)
	if !ok || b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens[token]
}

// hand gives p to the BatchProcessor running this record, or delivers it at once when
// there is none.
func (c *Client) hand(ctx context.Context, p *Pending) error {
	if p == nil {
		return nil
	}
	if s, ok := ctx.Value(pendingSlotKey{}).(*pendingSlot); ok && s != nil {
		s.p = p
		if b, ok := ctx.Value(batchPendingsKey{}).(*batchPendings); ok && b != nil {
			b.mu.Lock()
			b.tokens[p.Token] = true
			b.mu.Unlock()
		}
		return nil
	}
	return c.Deliver(ctx, []*Pending{p})[0]
}
