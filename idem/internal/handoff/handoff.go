package handoff

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

type messageKey struct{}

// WithMessage records in ctx the SQS record a batch runs ctx for.
func WithMessage(ctx context.Context, msg events.SQSMessage) context.Context {
	return context.WithValue(ctx, messageKey{}, msg)
}

// Message returns the SQS record ctx runs for; ok is false outside a batch's record.
func Message(ctx context.Context) (msg events.SQSMessage, ok bool) {
	msg, ok = ctx.Value(messageKey{}).(events.SQSMessage)
	return msg, ok
}

// Group is the FIFO message group of the record ctx runs for ("" outside a batch, or on
// a standard queue).
func Group(ctx context.Context) string {
	m, _ := Message(ctx)
	return m.Attributes["MessageGroupId"]
}

// Delivery is the delivery of the record ctx runs for; zero outside a batch, or when the
// record carries no receive count.
func Delivery(ctx context.Context) persistence.Delivery {
	m, ok := Message(ctx)
	if !ok || m.MessageId == "" {
		return persistence.Delivery{}
	}
	n, err := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	if err != nil {
		return persistence.Delivery{}
	}
	return persistence.Delivery{MessageID: m.MessageId, ReceiveCount: n}
}

// Holder takes a record's pending messages: the batch sends them at its end, together
// with the other records'.
type Holder interface {
	Hold(p *outbox.Pending)
}

type holderKey struct{}

// WithHolder records in ctx the holder of its record's pending messages.
func WithHolder(ctx context.Context, h Holder) context.Context {
	return context.WithValue(ctx, holderKey{}, h)
}

// HolderOf returns the holder WithHolder recorded in ctx, or nil.
func HolderOf(ctx context.Context) Holder {
	h, _ := ctx.Value(holderKey{}).(Holder)
	return h
}

// batch is the set of lease tokens whose messages the running batch will send at its
// end: a duplicate of such a key later in the same batch is a plain replay.
type batch struct {
	mu     sync.Mutex
	tokens map[string]bool
}

type batchKey struct{}

// WithBatch starts, in ctx, the set of tokens a batch will send.
func WithBatch(ctx context.Context) context.Context {
	return context.WithValue(ctx, batchKey{}, &batch{tokens: map[string]bool{}})
}

// Hand gives p to the holder of ctx's record and notes its token in the running batch.
// It returns false when ctx has no holder: the caller sends p itself.
func Hand(ctx context.Context, p *outbox.Pending) bool {
	h := HolderOf(ctx)
	if h == nil {
		return false
	}
	h.Hold(p)
	if b, ok := ctx.Value(batchKey{}).(*batch); ok && b != nil {
		b.mu.Lock()
		b.tokens[p.Token] = true
		b.mu.Unlock()
	}
	return true
}

// SentByBatch reports whether the running batch holds the messages of token.
func SentByBatch(ctx context.Context, token string) bool {
	b, ok := ctx.Value(batchKey{}).(*batch)
	if !ok || b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens[token]
}

// Extender moves the visibility of a record's message along with its lease.
type Extender interface {
	Extended(ctx context.Context, until time.Time)
}

type extenderKey struct{}

// WithExtender records in ctx what follows its record's lease.
func WithExtender(ctx context.Context, e Extender) context.Context {
	return context.WithValue(ctx, extenderKey{}, e)
}

// Extended tells ctx's extender, if any, that the lease now ends at until.
func Extended(ctx context.Context, until time.Time) {
	if e, ok := ctx.Value(extenderKey{}).(Extender); ok && e != nil {
		e.Extended(ctx, until)
	}
}
