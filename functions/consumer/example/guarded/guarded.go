// Package guarded is the shape both example handlers share, so that an example's handler
// is its business logic: the message decoded strictly (an invalid one is permanent), a
// response, and, for the idem middleware to commit in one transaction with the
// completion of the key, the message's journal entry (the guard, put only if absent)
// and the business write, with one outbound message stored by the same transaction and
// sent after it.
//
// A handler of another shape (no outbound message, several effects, a call before the
// commit) implements idem.Handler itself; see the ledger's package documentation for what
// each part buys.
package guarded

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// Handler is an idem.Handler of that shape for messages of type M. Every field but
// Home is required.
type Handler[M any] struct {
	// Name starts every error of the handler ("ledger").
	Name string
	// Decode validates a body. Its error makes the message permanent: it is
	// dead-lettered, not retried.
	Decode func(body []byte) (M, error)
	// Response is the response stored with the idempotency record and replayed to
	// duplicates, encoded as JSON.
	Response func(m M) any
	// Guard is m's journal entry, put only if absent, first in the transaction
	// (idem.Result.Guards): if it exists, m was applied by an execution the
	// idempotency record no longer remembers (a redelivery after the record's TTL), and
	// the middleware commits nothing and sends nothing; if it exists for another
	// payload, the message is dead-lettered. key is the idempotency key.
	Guard func(key string, m M) types.TransactWriteItem
	// Effect is the business write, second in the transaction. It may be conditional:
	// a refusal fails the whole transaction, and nothing is committed or sent.
	Effect func(m M) types.TransactWriteItem
	// Explain says, for the dead-letter queue, why Effect's condition refused m, item
	// being the item as it was ("" when it cannot tell).
	Explain func(m M, item map[string]types.AttributeValue) string
	// Tell (optional) says what of such a refusal the message's sender may read (an HTTP
	// caller of the ingress: idem.Result.Tell), naming no other party's data; "" or nil
	// tells the category alone.
	Tell func(m M, item map[string]types.AttributeValue) string
	// Outbound is the message sent for m once it is committed.
	Outbound Outbound[M]
	// Home says that the idempotency records live in Guard's table and that the journal
	// entry is the record itself (idem.Result.HomeGuard): the commit writes the entry at
	// the record's key, with the record's attributes, and one item fewer. The entry then
	// never expires, and the record with it. It needs ID, and messages keyed by it.
	Home bool
	// ID is m's business id, the key its journal entry stands for (idem.Result.HomeKey):
	// with Home, the middleware refuses a message whose idempotency key is not it, since
	// the entry would then guard the key and not the operation (required with Home).
	ID func(m M) string
}

// Outbound is the one outbound message of a committed message, on a FIFO queue: one
// group per Group, so a group's messages stay in order, and the idempotency key as
// deduplication id, so a resent one is a duplicate for SQS within its 5-minute window.
type Outbound[M any] struct {
	Name     string                    // names it in errors ("receipt")
	QueueURL string                    // its FIFO queue
	Body     func(key string, m M) any // its body, encoded as JSON; key is the idempotency key
	Group    func(m M) string          // its group, before idem.DeduplicationID
}

var _ idem.Handler = (*Handler[struct{}])(nil)

// Handle applies one message: decode, and return the guard, the effect and the outbound
// message for the middleware to commit together.
func (h *Handler[M]) Handle(_ context.Context, req *idem.Request) (idem.Result, error) {
	if req == nil || req.Attempt == nil {
		return idem.Result{}, fmt.Errorf("%s: handler must run under the idem middleware: %w", h.Name, idem.ErrNoLease)
	}
	m, err := h.Decode(req.Payload)
	if err != nil {
		return idem.Result{}, idem.Permanent(err)
	}
	resp, err := json.Marshal(h.Response(m))
	if err != nil {
		return idem.Result{}, fmt.Errorf("%s: encode response: %w", h.Name, err)
	}
	out, err := h.outbound(req.Key, m)
	if err != nil {
		return idem.Result{}, err
	}
	var home string
	if h.Home {
		if h.ID == nil {
			return idem.Result{}, idem.Permanent(fmt.Errorf("%s: the journal entry as the record needs the handler's ID", h.Name))
		}
		home = h.ID(m)
	}
	var tell func(int, map[string]types.AttributeValue) string
	if h.Tell != nil {
		tell = func(index int, item map[string]types.AttributeValue) string {
			if index != 1 {
				return ""
			}
			return h.Tell(m, item)
		}
	}
	return idem.Result{
		Response: resp, Tell: tell,
		Writes: []types.TransactWriteItem{h.Guard(req.Key, m), h.Effect(m)},
		Guards: []int{0}, HomeGuard: h.Home, HomeKey: home,
		Messages: []idem.Message{out},
		Explain: func(index int, item map[string]types.AttributeValue) string {
			if index != 1 { // the effect; the guard (0) is explained by the middleware
				return ""
			}
			return h.Explain(m, item)
		},
	}, nil
}

// KeyHashAttr is the attribute of a journal entry that holds the hash of its message's
// idempotency key (idem.HashKey), so an operator finds the entry of a key.
const KeyHashAttr = "key_hash"

// Entry is a journal entry for Guard: item, stamped with the hash of the idempotency key
// key (KeyHashAttr), put in table only if no item has its partition key (keyAttr) yet.
// item holds keyAttr's value and what the entry records of the message.
func Entry(table, keyAttr, key string, item map[string]types.AttributeValue) types.TransactWriteItem {
	item[KeyHashAttr] = &types.AttributeValueMemberS{Value: idem.HashKey(key)}
	return types.TransactWriteItem{Put: &types.Put{
		TableName:                aws.String(table),
		Item:                     item,
		ConditionExpression:      aws.String("attribute_not_exists(#id)"),
		ExpressionAttributeNames: map[string]string{"#id": keyAttr},
	}}
}

func (h *Handler[M]) outbound(key string, m M) (idem.Message, error) {
	body, err := json.Marshal(h.Outbound.Body(key, m))
	if err != nil {
		return idem.Message{}, fmt.Errorf("%s: encode %s: %w", h.Name, h.Outbound.Name, err)
	}
	return idem.Message{
		QueueURL:        h.Outbound.QueueURL,
		Body:            string(body),
		GroupID:         idem.DeduplicationID(h.Outbound.Group(m)),
		DeduplicationID: idem.DeduplicationID(key),
	}, nil
}
