package sim

import (
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DynamoDB's transaction conflicts, which simdb (one request at a time) cannot have: a
// transaction is in flight from the moment it reaches DynamoDB until it is applied (the
// service's part of the simulator's request latency: a request that hangs on the network
// has not reached it yet), and while it is, it holds its items. AWS documents the
// conflicts (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling):
//
//   - a PutItem, UpdateItem or DeleteItem on an item that an ongoing TransactWriteItems
//     includes is rejected with TransactionConflictException;
//   - a TransactWriteItems one of whose items is part of another ongoing
//     TransactWriteItems is cancelled with TransactionCanceledException, reason
//     TransactionConflict for that item.
//
// Here the transaction that reached DynamoDB first wins: a later one is cancelled when
// an earlier one is still in flight on one of its items, or wrote one of them while the
// later one was in flight. The Go SDK retries neither error
// (aws-sdk-go-v2's retry.DefaultRetryableErrorCodes), so the code under test gets them
// as they are. Reads are not affected: they see the last committed state.

// txnFlights are the transactions in flight, by item, and when each item was last
// written by a transaction.
type txnFlights struct {
	byItem map[string][]*call
	wrote  map[string]wrote
}

type wrote struct {
	at time.Time
	by *call
}

// itemID names one item: its table and its key attributes' values.
func (w *world) itemID(table string, item map[string]types.AttributeValue) string {
	ks := w.keys[table]
	id := table + "/" + strAttr(item, ks[0])
	if ks[1] != "" {
		id += "/" + strAttr(item, ks[1])
	}
	return id
}

// isSingleWrite reports whether op writes one item outside a transaction.
func isSingleWrite(op string) bool {
	return op == "PutItem" || op == "UpdateItem" || op == "DeleteItem"
}

// fly puts a transaction in flight on its items.
func (t *txnFlights) fly(c *call) {
	if t.byItem == nil {
		t.byItem, t.wrote = map[string][]*call{}, map[string]wrote{}
	}
	for _, it := range c.items {
		t.byItem[it] = append(t.byItem[it], c)
	}
}

// land takes a transaction out of flight (applied, refused, or lost on the way).
func (t *txnFlights) land(c *call) {
	for _, it := range c.items {
		cs := t.byItem[it]
		for i, x := range cs {
			if x == c {
				cs = append(cs[:i], cs[i+1:]...)
				break
			}
		}
		if len(cs) == 0 {
			delete(t.byItem, it)
		} else {
			t.byItem[it] = cs
		}
	}
}

// committed notes the items a transaction wrote.
func (t *txnFlights) committed(c *call, now time.Time) {
	for _, it := range c.items {
		t.wrote[it] = wrote{at: now, by: c}
	}
}

// earlier reports whether a reached DynamoDB before b.
func earlier(a, b *call) bool {
	if !a.reach.Equal(b.reach) {
		return a.reach.Before(b.reach)
	}
	return a.n < b.n
}

// inFlight reports whether transaction x is in flight in DynamoDB now: it reached it
// and is not applied yet.
func inFlight(x *call) bool { return !x.reach.After(time.Now()) }

// conflict returns the error DynamoDB gives request c at its apply, nil when none.
func (w *world) conflict(c *call) error {
	if c.service != "dynamodb" || len(c.items) == 0 || w.txns.byItem == nil {
		return nil
	}
	if isSingleWrite(c.op) {
		for _, x := range w.txns.byItem[c.items[0]] {
			if inFlight(x) {
				return &types.TransactionConflictException{Message: aws.String("Transaction is ongoing for the item")}
			}
		}
		return nil
	}
	if c.op != "TransactWriteItems" {
		return nil
	}
	reasons := make([]types.CancellationReason, len(c.items))
	codes := make([]string, len(c.items))
	hit := false
	for i, it := range c.items {
		codes[i] = "None"
		reasons[i] = types.CancellationReason{Code: aws.String("None")}
		clash := false
		if wr, ok := w.txns.wrote[it]; ok && wr.by != c && wr.at.After(c.reach) {
			clash = true
		}
		for _, x := range w.txns.byItem[it] {
			if x != c && inFlight(x) && earlier(x, c) {
				clash = true
			}
		}
		if clash {
			hit = true
			codes[i] = "TransactionConflict"
			reasons[i] = types.CancellationReason{Code: aws.String("TransactionConflict"), Message: aws.String("Transaction is ongoing for the item")}
		}
	}
	if !hit {
		return nil
	}
	return &types.TransactionCanceledException{
		Message:             aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons [" + strings.Join(codes, ", ") + "]"),
		CancellationReasons: reasons,
	}
}
