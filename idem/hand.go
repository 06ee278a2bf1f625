package idem

import (
	"context"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idemgo/sqs-lambda-consumer/idem/internal/handoff"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// hand gives p to the BatchProcessor running this record, or delivers it at once when
// there is none.
func (c *Client) hand(ctx context.Context, p *outbox.Pending) error {
	if p == nil {
		return nil
	}
	c.traceOrigin(ctx, p)
	if handoff.Hand(ctx, p) {
		return nil
	}
	return c.Deliver(ctx, []*outbox.Pending{p})[0]
}

// Message is an outbound SQS message that a handler asks for in Result.Messages; the
// record stores it (persistence.Message).
type Message = persistence.Message

// Deliver sends the messages of pendings with SendMessageBatch, at most 10 to a request,
// per queue in the order given, then marks each pending whose messages all went out as
// sent in its record. It returns one error per pending, nil for those sent and marked.
//
// On a FIFO queue, once a message of a group was not sent, the later messages of that
// group in this call are not sent either (they are failed with their pendings), so a
// group's messages never overtake an earlier one: within a record, and across the
// records of the call, in the order given. A message SQS refuses for good is isolated
// (a request it spoiled is sent again one message at a time) and dead-lettered with
// the reason (Config.OutboxDeadLetter), so it holds up neither its group nor another
// key's messages; it is listed in Pending.Dead and in the record. A pending left
// partly sent stays pending: the next delivery of its key or the reaper sends it again,
// with the same keys and deduplication ids.
func (c *Client) Deliver(ctx context.Context, pendings []*outbox.Pending) []error {
	errs := outbox.Deliver(ctx, c.tr, c.cfg.Sender, c.cfg.OutboxDeadLetter, c.cfg.Store, c.cfg.Clock, pendings)
	for i, p := range pendings {
		if errs[i] == nil && p.OnSent != nil {
			p.OnSent()
		}
	}
	return errs
}

// cacheOnSent is what a pending does once its messages are sent and marked: a warm
// duplicate of its key is answered from e with no request.
func (c *Client) cacheOnSent(e cached) func() { return func() { c.cache.put(e) } }

// MessageFromContext returns the SQS record a BatchProcessor runs ctx for: a handler can
// read the message's id, attributes and receive count. ok is false outside a
// BatchProcessor's record.
func MessageFromContext(ctx context.Context) (msg events.SQSMessage, ok bool) {
	return handoff.Message(ctx)
}

// DeduplicationID is s as an SQS MessageDeduplicationId or MessageGroupId
// (outbox.DeduplicationID): what a handler gives a FIFO message's GroupID and
// DeduplicationID.
func DeduplicationID(s string) string { return outbox.DeduplicationID(s) }
