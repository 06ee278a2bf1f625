// Package simsqs is an in-memory SQS for the deterministic simulator (internal/sim):
// FIFO and standard queues with visibility timeouts, receive counts, a redrive policy to
// a dead-letter queue, the 5-minute deduplication interval, content-based
// deduplication, a queue's MaximumMessageSize, FIFO group locking while a group has
// messages in flight, and the send, visibility and delete calls idem and the event
// source mapping make. Time comes from the caller's clock.
//
// The rules it follows are SQS's documented ones, each cited where it is coded; where
// SQS documents nothing (the order in which a standard queue returns messages), the
// simulator's random source decides.
package simsqs

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// DedupInterval is the FIFO deduplication interval: a message sent with a deduplication
// id already accepted within it is accepted and not delivered.
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/using-messagededuplicationid-property.html
const DedupInterval = 5 * time.Minute

// MaxBatchBytes is SendMessageBatch's limit on the sum of its messages' sizes, and
// MaxQueueBytes the largest MaximumMessageSize (1 MiB).
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html
const (
	MaxBatchBytes = 1 << 20
	MaxQueueBytes = 1 << 20
)

// QueueConfig is a queue's attributes.
type QueueConfig struct {
	Name         string // ends in ".fifo" for a FIFO queue
	ContentDedup bool   // ContentBasedDeduplication (FIFO only)
	MaxBytes     int    // MaximumMessageSize (default MaxQueueBytes)
	Visibility   time.Duration
	// MaxReceive and DLQ are the redrive policy: a message received MaxReceive times is
	// moved to DLQ at its next receive.
	MaxReceive int
	DLQ        string // name of the dead-letter queue
	// WholeBatchFails makes a SendMessageBatch with one invalid entry fail as a whole
	// (as moto does); otherwise the invalid entry fails alone with SenderFault set.
	WholeBatchFails bool
}

// Message is a message in a queue.
type Message struct {
	ID, Body       string
	Attributes     map[string]types.MessageAttributeValue
	Group, DedupID string
	Seq            int64 // acceptance order in the queue
	SentAt         time.Time
	// EnqueuedAt is when the queue's retention period starts for the message: when it
	// was sent, except in a FIFO dead-letter queue, which resets it when SQS moves the
	// message there (a standard one keeps the first enqueue):
	// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html
	EnqueuedAt     time.Time
	ReceiveCount   int
	FirstReceive   time.Time
	invisibleUntil time.Time
	receipt        string
	// MovedBySQS is set on a dead-letter queue's copy of a message that the source
	// queue's redrive policy moved (maxReceiveCount), as opposed to one a consumer sent.
	MovedBySQS bool
	From       string // the source queue of a moved message
}

// Receipt is the receipt handle of the message's latest receive.
func (m Message) Receipt() string { return m.receipt }

// Accepted is one message a queue accepted and stored (duplicates within the
// deduplication interval are not stored, and are not listed).
type Accepted struct {
	Queue string
	Msg   Message
	At    time.Time
}

// Service is the in-memory SQS. Its methods are safe for concurrent use.
type Service struct {
	mu       sync.Mutex
	Clock    func() time.Time
	Region   string
	Account  string
	queues   map[string]*queue // by name
	seq      int64
	ids      int64
	accepted []Accepted
	// OnAccept, when set, is called for every stored message, while the service is
	// locked.
	OnAccept func(Accepted)
}

type queue struct {
	cfg   QueueConfig
	fifo  bool
	msgs  []*Message
	dedup map[string]time.Time
}

// New returns a service with no queues.
func New(clock func() time.Time) *Service {
	return &Service{Clock: clock, Region: "us-east-1", Account: "000000000000", queues: map[string]*queue{}}
}

// CreateQueue adds a queue and returns its URL.
func (s *Service) CreateQueue(cfg QueueConfig) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = MaxQueueBytes
	}
	s.queues[cfg.Name] = &queue{cfg: cfg, fifo: strings.HasSuffix(cfg.Name, ".fifo"), dedup: map[string]time.Time{}}
	return s.url(cfg.Name)
}

func (s *Service) url(name string) string {
	return fmt.Sprintf("https://sqs.%s.amazonaws.com/%s/%s", s.Region, s.Account, name)
}

// URL returns a queue's URL, and ARN its ARN.
func (s *Service) URL(name string) string { return s.url(name) }

// ARN returns a queue's ARN.
func (s *Service) ARN(name string) string {
	return fmt.Sprintf("arn:aws:sqs:%s:%s:%s", s.Region, s.Account, name)
}

func (s *Service) byURL(u string) (*queue, error) {
	name := u[strings.LastIndexByte(u, '/')+1:]
	q, ok := s.queues[name]
	if !ok || s.url(name) != u {
		return nil, apiErr("AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.", smithy.FaultClient)
	}
	return q, nil
}

func apiErr(code, msg string, fault smithy.ErrorFault) error {
	return &smithy.GenericAPIError{Code: code, Message: msg, Fault: fault}
}

// entry is one message to send, from SendMessage or an entry of SendMessageBatch.
type entry struct {
	body    string
	attrs   map[string]types.MessageAttributeValue
	group   string
	dedupID string
}

// size counts a message as SQS does: the body, and each attribute's name, data type and
// value.
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html
func (e entry) size() int {
	n := len(e.body)
	for k, v := range e.attrs {
		n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n
}

// check validates one message for q: what SQS refuses whatever the moment.
func (q *queue) check(e *entry) error {
	if e.body == "" {
		return apiErr("InvalidParameterValue", "The request must contain the parameter MessageBody.", smithy.FaultClient)
	}
	if n := e.size(); n > q.cfg.MaxBytes {
		return apiErr("InvalidParameterValue", fmt.Sprintf("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", q.cfg.MaxBytes), smithy.FaultClient)
	}
	if len(e.attrs) > 10 {
		return apiErr("InvalidParameterValue", "Number of message attributes exceeds the limit of 10.", smithy.FaultClient)
	}
	if !q.fifo {
		if e.dedupID != "" {
			return apiErr("InvalidParameterValue", "The request include parameter MessageDeduplicationId that is not valid for this queue type.", smithy.FaultClient)
		}
		return nil
	}
	if e.group == "" {
		return apiErr("MissingParameter", "The request must contain the parameter MessageGroupId.", smithy.FaultClient)
	}
	if e.dedupID == "" {
		if !q.cfg.ContentDedup {
			return apiErr("InvalidParameterValue", "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly", smithy.FaultClient)
		}
		// Content-based deduplication: the SHA-256 of the body (not of the attributes).
		// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_CreateQueue.html
		sum := sha256.Sum256([]byte(e.body))
		e.dedupID = hex.EncodeToString(sum[:])
	}
	return nil
}

// store accepts a validated message: dropped when its deduplication id was accepted
// within the interval. It returns the message id.
func (s *Service) store(q *queue, e entry) string {
	now := s.Clock()
	s.ids++
	id := fmt.Sprintf("m-%06d", s.ids)
	if q.fifo {
		if at, ok := q.dedup[e.dedupID]; ok && now.Sub(at) < DedupInterval {
			return id
		}
		q.dedup[e.dedupID] = now
	}
	s.seq++
	m := &Message{ID: id, Body: e.body, Attributes: e.attrs, Group: e.group, DedupID: e.dedupID, Seq: s.seq, SentAt: now, EnqueuedAt: now}
	q.msgs = append(q.msgs, m)
	a := Accepted{Queue: q.cfg.Name, Msg: *m, At: now}
	s.accepted = append(s.accepted, a)
	if s.OnAccept != nil {
		s.OnAccept(a)
	}
	return id
}

// SendMessage sends one message.
func (s *Service) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.byURL(aws.ToString(in.QueueUrl))
	if err != nil {
		return nil, err
	}
	e := entry{body: aws.ToString(in.MessageBody), attrs: in.MessageAttributes, group: aws.ToString(in.MessageGroupId), dedupID: aws.ToString(in.MessageDeduplicationId)}
	if err := q.check(&e); err != nil {
		return nil, err
	}
	id := s.store(q, e)
	return &sqs.SendMessageOutput{MessageId: aws.String(id)}, nil
}

// SendMessageBatch sends up to 10 messages, each reported on its own.
func (s *Service) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.byURL(aws.ToString(in.QueueUrl))
	if err != nil {
		return nil, err
	}
	switch n := len(in.Entries); {
	case n == 0:
		return nil, apiErr("AWS.SimpleQueueService.EmptyBatchRequest", "There should be at least one SendMessageBatchRequestEntry in the request.", smithy.FaultClient)
	case n > 10:
		return nil, apiErr("AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "Maximum number of entries per request are 10.", smithy.FaultClient)
	}
	ids := map[string]bool{}
	total := 0
	entries := make([]entry, len(in.Entries))
	for i, x := range in.Entries {
		id := aws.ToString(x.Id)
		if ids[id] {
			return nil, apiErr("AWS.SimpleQueueService.BatchEntryIdsNotDistinct", "Id "+id+" repeated.", smithy.FaultClient)
		}
		ids[id] = true
		entries[i] = entry{body: aws.ToString(x.MessageBody), attrs: x.MessageAttributes, group: aws.ToString(x.MessageGroupId), dedupID: aws.ToString(x.MessageDeduplicationId)}
		total += entries[i].size()
	}
	if total > MaxBatchBytes {
		return nil, apiErr("AWS.SimpleQueueService.BatchRequestTooLong", "Batch requests cannot be longer than 1048576 bytes.", smithy.FaultClient)
	}
	errs := make([]error, len(entries))
	for i := range entries {
		errs[i] = q.check(&entries[i])
		if errs[i] != nil && q.cfg.WholeBatchFails {
			return nil, errs[i]
		}
	}
	out := &sqs.SendMessageBatchOutput{}
	for i, e := range entries {
		if errs[i] != nil {
			var ae *smithy.GenericAPIError
			code, msg := "InternalError", errs[i].Error()
			if ok := asAPI(errs[i], &ae); ok {
				code, msg = ae.Code, ae.Message
			}
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: in.Entries[i].Id, Code: aws.String(code), Message: aws.String(msg), SenderFault: true})
			continue
		}
		id := s.store(q, e)
		out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: in.Entries[i].Id, MessageId: aws.String(id), MD5OfMessageBody: aws.String(md5hex(e.body))})
	}
	return out, nil
}

func asAPI(err error, target **smithy.GenericAPIError) bool {
	return errors.As(err, target)
}

func md5hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// ChangeMessageVisibility moves the visibility of a message in flight.
func (s *Service) ChangeMessageVisibility(_ context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.byURL(aws.ToString(in.QueueUrl))
	if err != nil {
		return nil, err
	}
	now := s.Clock()
	for _, m := range q.msgs {
		if m.receipt == aws.ToString(in.ReceiptHandle) {
			if !m.invisibleUntil.After(now) {
				return nil, apiErr("AWS.SimpleQueueService.MessageNotInflight", "Message is not in flight.", smithy.FaultClient)
			}
			m.invisibleUntil = now.Add(time.Duration(in.VisibilityTimeout) * time.Second)
			return &sqs.ChangeMessageVisibilityOutput{}, nil
		}
	}
	return nil, apiErr("ReceiptHandleIsInvalid", "The receipt handle is not valid.", smithy.FaultClient)
}

// Receive returns up to max visible messages of the queue named name as the event
// source mapping receives them, and starts their visibility timeout. On a FIFO queue a
// group with a message in flight gives nothing, and a group's messages come in order;
// a message already received MaxReceive times is moved to the dead-letter queue
// instead.
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-queues-understanding-logic.html
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html
func (s *Service) Receive(name string, max int, rng *rand.Rand) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[name]
	now := s.Clock()
	busy := map[string]bool{}
	if q.fifo {
		for _, m := range q.msgs {
			if m.invisibleUntil.After(now) {
				busy[m.Group] = true
			}
		}
	}
	order := make([]*Message, len(q.msgs))
	copy(order, q.msgs)
	if !q.fifo && rng != nil {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	var out []Message
	for _, m := range order {
		if len(out) == max {
			break
		}
		if m.invisibleUntil.After(now) || busy[m.Group] {
			continue
		}
		if q.cfg.MaxReceive > 0 && m.ReceiveCount >= q.cfg.MaxReceive {
			s.moveToDLQ(q, m)
			continue
		}
		m.ReceiveCount++
		if m.FirstReceive.IsZero() {
			m.FirstReceive = now
		}
		m.invisibleUntil = now.Add(q.cfg.Visibility)
		s.ids++
		m.receipt = "rh-" + strconv.FormatInt(s.ids, 10)
		out = append(out, *m)
	}
	return out
}

func (s *Service) moveToDLQ(q *queue, m *Message) {
	s.remove(q, m)
	d, ok := s.queues[q.cfg.DLQ]
	if !ok {
		return
	}
	c := *m
	c.MovedBySQS, c.From = true, q.cfg.Name
	if d.fifo {
		c.EnqueuedAt = s.Clock()
	}
	c.invisibleUntil, c.receipt, c.ReceiveCount, c.FirstReceive = time.Time{}, "", 0, time.Time{}
	s.seq++
	c.Seq = s.seq
	d.msgs = append(d.msgs, &c)
}

func (s *Service) remove(q *queue, m *Message) {
	q.msgs = slices.DeleteFunc(q.msgs, func(x *Message) bool { return x == m })
}

// Delete deletes the message received with receipt. On a FIFO queue only the latest
// receipt handle of a message deletes it; on a standard queue an older one does too.
// It reports whether a message was deleted.
func (s *Service) Delete(name, receipt, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[name]
	for _, m := range q.msgs {
		if m.receipt == receipt || (!q.fifo && m.ID == id) {
			s.remove(q, m)
			return true
		}
	}
	return false
}

// Redrive moves every message of the queue named from back to the queue named to, as
// an operator's redrive does; only the messages for which keep returns true move.
func (s *Service) Redrive(from, to string, keep func(Message) bool) int {
	return s.Move(from, func(m Message) (string, Message, bool) { return to, m, keep(m) })
}

// Move is an operator's redrive of the messages of queue from that f picks: each goes
// as f returns it to the queue f names, as a message never received, and leaves from.
// It returns how many moved.
func (s *Service) Move(from string, f func(Message) (to string, out Message, ok bool)) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := s.queues[from]
	n := 0
	for _, m := range slices.Clone(src.msgs) {
		to, c, ok := f(*m)
		if !ok {
			continue
		}
		dst := s.queues[to]
		s.remove(src, m)
		c.MovedBySQS, c.From, c.ReceiveCount, c.FirstReceive, c.receipt, c.invisibleUntil = false, "", 0, time.Time{}, "", time.Time{}
		s.seq++
		c.Seq, c.EnqueuedAt = s.seq, s.Clock()
		dst.msgs = append(dst.msgs, &c)
		n++
	}
	return n
}

// Messages returns the messages in a queue, in order.
func (s *Service) Messages(name string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, 0, len(s.queues[name].msgs))
	for _, m := range s.queues[name].msgs {
		out = append(out, *m)
	}
	return out
}

// Accepted returns every message stored by any queue so far, in acceptance order.
func (s *Service) Accepted() []Accepted {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.accepted)
}

// NextVisible returns when the next message of the queue becomes visible (zero when
// one is visible now or the queue is empty).
func (s *Service) NextVisible(name string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Clock()
	var next time.Time
	for _, m := range s.queues[name].msgs {
		if !m.invisibleUntil.After(now) {
			return time.Time{}, true
		}
		if next.IsZero() || m.invisibleUntil.Before(next) {
			next = m.invisibleUntil
		}
	}
	return next, false
}

// Event builds the Lambda event of received messages, as the event source mapping
// does.
// https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html
func (s *Service) Event(name string, msgs []Message) events.SQSEvent {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(msgs))}
	for i, m := range msgs {
		attrs := map[string]string{
			"ApproximateReceiveCount":          strconv.Itoa(m.ReceiveCount),
			"SentTimestamp":                    strconv.FormatInt(m.SentAt.UnixMilli(), 10),
			"SenderId":                         "SIMULATOR",
			"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.FirstReceive.UnixMilli(), 10),
		}
		if m.Group != "" {
			attrs["MessageGroupId"] = m.Group
			attrs["MessageDeduplicationId"] = m.DedupID
			attrs["SequenceNumber"] = fmt.Sprintf("%020d", m.Seq)
		}
		mattrs := map[string]events.SQSMessageAttribute{}
		for k, v := range m.Attributes {
			mattrs[k] = events.SQSMessageAttribute{DataType: aws.ToString(v.DataType), StringValue: v.StringValue, BinaryValue: v.BinaryValue}
		}
		ev.Records[i] = events.SQSMessage{
			MessageId: m.ID, ReceiptHandle: m.receipt, Body: m.Body, Md5OfBody: md5hex(m.Body),
			Attributes: attrs, MessageAttributes: mattrs, EventSource: "aws:sqs",
			EventSourceARN: s.ARN(name), AWSRegion: s.Region,
		}
	}
	return ev
}
