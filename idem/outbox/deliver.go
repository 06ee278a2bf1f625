package outbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
)

// deliverTimeout bounds the sends and the marking of one Deliver call when the caller's
// context has no deadline or has already ended (the invocation's deadline is the
// commonest reason to be late, and a pending message must still get its chance).
const deliverTimeout = 10 * time.Second

// OutboundDeadLetterer keeps an outbound message that SQS refuses for good (too large
// for its queue's MaximumMessageSize, characters it does not accept, ...): sent
// nowhere else, it would stay pending for the record's whole retention, and on a FIFO
// queue hold up the messages after it in its group. SQSDeadLetter implements it.
type OutboundDeadLetterer interface {
	DeadLetterOutbound(ctx context.Context, m persistence.Message, cause error) error
}

// sendEntry is one message of one pending.
type sendEntry struct {
	pending int
	index   int // position in the pending's messages
	msg     *persistence.Message
	// The trace context the message carries (tracing on): traceparent when the message
	// has room for it, the AWSTraceHeader system attribute always.
	traceparent, amzn string
}

// size is the entry's size as SQS counts it, the traceparent it carries included.
func (e sendEntry) size() int {
	if e.traceparent == "" {
		return outboundSize(e.msg)
	}
	return outboundSize(e.msg) + traceSize(e.traceparent)
}

// outboxRun is the state of one deliver call.
type outboxRun struct {
	api      SQSBatchSender
	dl       OutboundDeadLetterer
	room     *telemetry.QueueRoom // the queues' room for a traceparent (nil: tracing off)
	pendings []*Pending

	mu    sync.Mutex
	errs  []error
	first []int // the order of the error kept: the queues run at once, the first in order is told
	dead  [][]persistence.DeadMessage
}

// fail records why pending i was not sent; of several, the one first in queue order
// is kept, so what a caller is told does not depend on which queue answered first.
func (d *outboxRun) fail(i int, err error, order int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.errs[i] == nil || order < d.first[i] {
		d.errs[i], d.first[i] = err, order
	}
}

func (d *outboxRun) deadLettered(e sendEntry, queue string, cause error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead[e.pending] = append(d.dead[e.pending], persistence.DeadMessage{Index: e.index, Queue: queue, Reason: persistence.Truncate(cause.Error(), 512)})
}

func Deliver(ctx context.Context, tr telemetry.Tracer, api SQSBatchSender, dl OutboundDeadLetterer, store persistence.Store, clock func() time.Time, pendings []*Pending) []error {
	d := &outboxRun{api: api, dl: dl, room: tr.Room, pendings: pendings, errs: make([]error, len(pendings)), first: make([]int, len(pendings)), dead: make([][]persistence.DeadMessage, len(pendings))}
	if len(pendings) == 0 {
		return d.errs
	}
	if api == nil {
		for i, p := range pendings {
			d.errs[i] = fmt.Errorf("idem: deliver %s: outbound messages pending but no SQS sender is configured (Config.Sender)", persistence.Redact(p.Key))
		}
		return d.errs
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deliverTimeout)
	defer cancel()
	sends := startSends(ctx, tr, pendings)
	defer endSends(sends, pendings, d.errs)
	rctx := ctx // the requests' context: the send's span when they send one record's messages
	if len(sends) == 1 {
		rctx = sends[0].ctx
	}
	// Group by queue, keeping the order of pendings and of their messages.
	var queues []string
	byQueue := map[string][]sendEntry{}
	for i, p := range pendings {
		for j := range p.Messages {
			m := &p.Messages[j]
			if _, ok := byQueue[m.QueueURL]; !ok {
				queues = append(queues, m.QueueURL)
			}
			e := sendEntry{pending: i, index: j, msg: m}
			if sends != nil {
				if traceRoom(m, sends[i].traceparent, tr.Room.Limit(m.QueueURL)) {
					e.traceparent = sends[i].traceparent
				}
				e.amzn = sends[i].amzn
			}
			byQueue[m.QueueURL] = append(byQueue[m.QueueURL], e)
		}
	}
	var wg sync.WaitGroup
	for n, q := range queues {
		wg.Go(func() { d.sendQueue(rctx, n, q, byQueue[q]) })
	}
	wg.Wait()
	sem := make(chan struct{}, maxMarks)
	for i, p := range pendings {
		p.Dead = d.dead[i]
		if d.errs[i] != nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			mctx, span := startMark(ctx, tr, sends, i, p)
			err := store.MarkSent(mctx, p.Key, p.Token, len(p.Messages)-len(p.Dead), p.Dead, clock())
			telemetry.EndSpan(span, err)
			if err != nil {
				d.fail(i, err, len(queues))
			}
		})
	}
	wg.Wait()
	return d.errs
}

// maxMarks bounds the MarkSent requests of one Deliver in flight at once (a batch has
// 10 records; a reaper after an outage may have many more).
const maxMarks = 16

// sendQueue sends one queue's entries in order, in requests of up to 10 (and under
// maxBatchBytes), skipping the later entries of a FIFO group that had one not sent.
func (d *outboxRun) sendQueue(ctx context.Context, qn int, queue string, entries []sendEntry) {
	fifo := fifoQueue(queue)
	stopped := map[string]error{} // FIFO group -> why its later messages are not sent
	var batch []sendEntry
	size := 0
	flush := func() {
		if len(batch) > 0 {
			d.sendRequest(ctx, qn, queue, batch, fifo, stopped, true)
		}
		batch, size = nil, 0
	}
	for _, e := range entries {
		if why, ok := stopped[e.msg.GroupID]; ok && fifo {
			d.fail(e.pending, why, qn)
			continue
		}
		n := e.size()
		if len(batch) == sqsmsg.MaxBatchEntries || (len(batch) > 0 && size+n > sqsmsg.MaxBatchBytes) {
			flush()
			if why, ok := stopped[e.msg.GroupID]; ok && fifo {
				d.fail(e.pending, why, qn)
				continue
			}
		}
		batch = append(batch, e)
		size += n
	}
	flush()
}

// sendRequest sends one SendMessageBatch. A request refused as a whole for a reason of
// the sender (a message SQS will never take) is sent again one message at a time, to
// find the message at fault; a message refused for good is dead-lettered. Any other
// failure fails the entry (and, on a FIFO queue, stops its group).
func (d *outboxRun) sendRequest(ctx context.Context, qn int, queue string, batch []sendEntry, fifo bool, stopped map[string]error, split bool) {
	notSent := func(e sendEntry, err error) {
		d.fail(e.pending, err, qn)
		if fifo {
			if _, ok := stopped[e.msg.GroupID]; !ok {
				// The group is not named: it is often a business id (the ledger's account).
				stopped[e.msg.GroupID] = fmt.Errorf("idem: outbound message of %s to %s not sent: an earlier message of its group was not sent",
					persistence.Redact(d.pendings[e.pending].Key), queue)
			}
		}
	}
	in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(queue), Entries: make([]sqstypes.SendMessageBatchRequestEntry, len(batch))}
	for i, e := range batch {
		in.Entries[i] = batchEntry(i, e)
	}
	out, err := d.api.SendMessageBatch(ctx, in)
	if err != nil {
		if refusedForGood(err) {
			if split && len(batch) > 1 {
				for _, e := range batch {
					if why, ok := stopped[e.msg.GroupID]; ok && fifo {
						d.fail(e.pending, why, qn)
						continue
					}
					d.sendRequest(ctx, qn, queue, []sendEntry{e}, fifo, stopped, false)
				}
				return
			}
			if len(batch) == 1 {
				d.refused(ctx, qn, queue, batch[0], err, fifo, stopped, notSent)
				return
			}
		}
		for _, e := range batch {
			notSent(e, fmt.Errorf("idem: send outbound messages of %s to %s: %w", persistence.Redact(d.pendings[e.pending].Key), queue, err))
		}
		return
	}
	ok := make([]bool, len(batch))
	for _, s := range out.Successful {
		if i, err := strconv.Atoi(aws.ToString(s.Id)); err == nil && i >= 0 && i < len(batch) {
			ok[i] = true
		}
	}
	failed := map[int]sqstypes.BatchResultErrorEntry{}
	for _, f := range out.Failed {
		if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(batch) && !ok[i] {
			failed[i] = f
		}
	}
	for i, e := range batch {
		switch f, isFailed := failed[i]; {
		case ok[i]:
			d.room.Took(queue, e.size())
		case isFailed && f.SenderFault && laterOfGroupSent(batch, ok, i, fifo):
			// Sent again, it would overtake the later message of its group.
			d.poison(ctx, queue, e, fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)), notSent)
		case isFailed && f.SenderFault:
			d.refused(ctx, qn, queue, e, fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)), fifo, stopped, notSent)
		case isFailed:
			notSent(e, fmt.Errorf("idem: send outbound message of %s to %s: %s: %s", persistence.Redact(d.pendings[e.pending].Key), queue, aws.ToString(f.Code), aws.ToString(f.Message)))
		default:
			// An entry neither reported successful nor failed is not known to be sent.
			notSent(e, fmt.Errorf("idem: send outbound message of %s to %s: not confirmed by SQS", persistence.Redact(d.pendings[e.pending].Key), queue))
		}
	}
}

// refused handles a message SQS refused for good. One that carried a traceparent is
// sent again without it, alone, since the trace context may be what took it over its
// queue's own MaximumMessageSize (lowered since the queue took a larger message:
// queueRoom): tracing never costs a delivery. Any other is dead-lettered (poison).
func (d *outboxRun) refused(ctx context.Context, qn int, queue string, e sendEntry, cause error, fifo bool, stopped map[string]error, notSent func(sendEntry, error)) {
	if e.traceparent == "" {
		d.poison(ctx, queue, e, cause, notSent)
		return
	}
	d.room.Refused(queue, e.size())
	e.traceparent = ""
	d.sendRequest(ctx, qn, queue, []sendEntry{e}, fifo, stopped, false)
}

// laterOfGroupSent reports whether, on a FIFO queue, a message after batch[i] in its
// group went out in the same request.
func laterOfGroupSent(batch []sendEntry, ok []bool, i int, fifo bool) bool {
	if !fifo {
		return false
	}
	for j := i + 1; j < len(batch); j++ {
		if ok[j] && batch[j].msg.GroupID == batch[i].msg.GroupID {
			return true
		}
	}
	return false
}

// poison dead-letters a message SQS refused for good. Once kept there, it holds up
// nothing: it will never be delivered, so the messages after it may go. When it
// cannot be kept (no dead-letterer, or the dead-letter queue refused it too), it counts
// as not sent.
func (d *outboxRun) poison(ctx context.Context, queue string, e sendEntry, cause error, notSent func(sendEntry, error)) {
	refusal := fmt.Errorf("idem: outbound message %d of %s refused by %s: %w", e.index, persistence.Redact(d.pendings[e.pending].Key), queue, cause)
	if d.dl == nil {
		notSent(e, fmt.Errorf("%w (no dead-letter queue for outbound messages: Config.OutboxDeadLetter)", refusal))
		return
	}
	if err := d.dl.DeadLetterOutbound(ctx, *e.msg, refusal); err != nil {
		notSent(e, errors.Join(refusal, err))
		return
	}
	d.deadLettered(e, queue, cause)
}

// refusedForGood reports whether SQS refused a request for the sender's fault: the
// same request can never pass (a message too large for the queue, characters it does
// not accept, a batch over its size limit).
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html
func refusedForGood(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode() {
	case "InvalidParameterValue", "InvalidMessageContents", "AWS.SimpleQueueService.BatchRequestTooLong", "BatchRequestTooLong",
		"AWS.SimpleQueueService.InvalidMessageContents":
		return true
	}
	return false
}

func batchEntry(i int, e sendEntry) sqstypes.SendMessageBatchRequestEntry {
	m := e.msg
	entry := sqstypes.SendMessageBatchRequestEntry{
		Id:          aws.String(strconv.Itoa(i)),
		MessageBody: aws.String(m.Body),
	}
	if m.GroupID != "" {
		entry.MessageGroupId = aws.String(m.GroupID)
	}
	if m.DeduplicationID != "" {
		entry.MessageDeduplicationId = aws.String(m.DeduplicationID)
	}
	if len(m.Attributes) > 0 {
		entry.MessageAttributes = make(map[string]sqstypes.MessageAttributeValue, len(m.Attributes))
		for _, name := range slices.Sorted(maps.Keys(m.Attributes)) {
			entry.MessageAttributes[name] = sqsmsg.StringAttribute(m.Attributes[name])
		}
	}
	if e.traceparent != "" {
		if entry.MessageAttributes == nil {
			entry.MessageAttributes = map[string]sqstypes.MessageAttributeValue{}
		}
		entry.MessageAttributes[telemetry.TraceParentAttribute] = sqsmsg.StringAttribute(e.traceparent)
	}
	if e.amzn != "" {
		entry.MessageSystemAttributes = map[string]sqstypes.MessageSystemAttributeValue{
			telemetry.AWSTraceHeader: {DataType: aws.String("String"), StringValue: aws.String(e.amzn)},
		}
	}
	return entry
}
