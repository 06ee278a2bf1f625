package inventory_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/inventory"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// stack is the inventory handler on real AWS APIs (moto): its own stock table,
// idempotency table and confirmations queue.
type stack struct {
	exampletest.Middleware // the inventory handler under the idem middleware
	table                  string
	queueURL               string
}

// newStack builds the stack, and a context that ends after timeout or with the test.
func newStack(t *testing.T, timeout time.Duration) (context.Context, *stack) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	st := &stack{Middleware: exampletest.Middleware{DynamoDB: awstest.DynamoDB(t), SQS: awstest.SQS(t)}}
	st.table = awstest.HashTable(ctx, t, st.DynamoDB, "stock", "sku")
	idemTable := awstest.Name(t, "idem")
	if err := persistence.CreateTable(ctx, st.DynamoDB, idemTable); err != nil {
		t.Fatal(err)
	}
	awstest.DeleteTableAtEnd(t, st.DynamoDB, idemTable)
	st.queueURL = awstest.FIFOQueue(ctx, t, st.SQS, "confirmations", nil)

	var err error
	if st.Store, err = persistence.NewDynamoStore(st.DynamoDB, idemTable); err != nil {
		t.Fatal(err)
	}
	st.Client, err = idem.New(idem.Config{Store: st.Store, Scope: "test", TTL: time.Hour, Sender: st.SQS})
	if err != nil {
		t.Fatal(err)
	}
	h, err := inventory.Example{}.NewHandler(example.Deps{Env: st.env()})
	if err != nil {
		t.Fatal(err)
	}
	st.Handler = st.Client.Middleware(h)
	return ctx, st
}

// env is the consumer's environment for this stack.
func (st *stack) env() example.Lookup {
	return exampletest.LookupIn(map[string]string{inventory.TableVar: st.table, inventory.ConfirmationsVar: st.queueURL})
}

func (st *stack) reserve(ctx context.Context, t *testing.T, r inventory.Reservation) (idem.Result, error) {
	t.Helper()
	return st.Deliver(ctx, inventory.Key(r), exampletest.JSON(t, r))
}

func (st *stack) addStock(ctx context.Context, t *testing.T, sku string, n int64) {
	t.Helper()
	if err := inventory.AddStock(ctx, st.DynamoDB, st.table, sku, n); err != nil {
		t.Fatal(err)
	}
}

func (st *stack) stocks(ctx context.Context, t *testing.T) map[string]inventory.Stock {
	t.Helper()
	s, err := inventory.Stocks(ctx, st.DynamoDB, st.table)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// entry returns the order's journal entry, nil when there is none.
func (st *stack) entry(ctx context.Context, t *testing.T, orderID string) map[string]types.AttributeValue {
	t.Helper()
	out, err := st.DynamoDB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(st.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"sku": &types.AttributeValueMemberS{Value: inventory.EntryPrefix + orderID}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// sent is one confirmation as received from the queue.
type sent struct {
	inventory.Confirmation
	group, dedup, keyAttr string
}

// confirmations receives and deletes every message of the confirmations queue
// (awstest.Drain).
func (st *stack) confirmations(ctx context.Context, t *testing.T) []sent {
	t.Helper()
	msgs, err := awstest.Drain(ctx, st.SQS, st.queueURL)
	if err != nil {
		t.Fatalf("confirmations: %v", err)
	}
	var all []sent
	for _, m := range msgs {
		var s sent
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &s.Confirmation); err != nil {
			t.Fatalf("confirmation body %q: %v", aws.ToString(m.Body), err)
		}
		s.group = m.Attributes[string(sqstypes.MessageSystemAttributeNameMessageGroupId)]
		s.dedup = m.Attributes[string(sqstypes.MessageSystemAttributeNameMessageDeduplicationId)]
		s.keyAttr = aws.ToString(m.MessageAttributes[idem.KeyAttribute].StringValue)
		all = append(all, s)
	}
	return all
}

// TestIntegrationReserveOnce: an order is applied once and confirmed once; a duplicate
// delivery replays the response and applies nothing.
func TestIntegrationReserveOnce(t *testing.T) {
	ctx, st := newStack(t, 30*time.Second)
	// A sku outside SQS's id alphabet, so the hashed group id meets real SQS.
	r := inventory.Reservation{OrderID: "ord-1", SKU: "Artikel 7/ü", Quantity: 3}
	st.addStock(ctx, t, r.SKU, 10)

	res, err := st.reserve(ctx, t, r)
	if err != nil || res.Replayed || res.Guarded {
		t.Fatalf("first delivery: %+v, %v", res, err)
	}
	var resp inventory.Response
	if err := json.Unmarshal(res.Response, &resp); err != nil || resp != inventory.Response(r) {
		t.Fatalf("response %s (%v), want the reservation", res.Response, err)
	}
	again, err := st.reserve(ctx, t, r)
	if err != nil || !again.Replayed || string(again.Response) != string(res.Response) {
		t.Fatalf("duplicate delivery: %+v, %v; want the first response replayed", again, err)
	}

	if got, want := st.stocks(ctx, t), map[string]inventory.Stock{r.SKU: {Available: 7, Reserved: 3, Reservations: 1}}; !maps.Equal(got, want) {
		t.Fatalf("stock %+v, want %+v", got, want)
	}
	e := st.entry(ctx, t, r.OrderID)
	if e == nil || e["order_sku"].(*types.AttributeValueMemberS).Value != r.SKU || e["quantity"].(*types.AttributeValueMemberN).Value != "3" ||
		e["key_hash"].(*types.AttributeValueMemberS).Value != idem.HashKey(inventory.Key(r)) {
		t.Fatalf("journal entry %v, want order_sku, quantity 3 and the key's hash", e)
	}
	cs := st.confirmations(ctx, t)
	want := inventory.Confirmation{OrderID: r.OrderID, SKU: r.SKU, Quantity: 3, IdempotencyKey: inventory.Key(r)}
	if len(cs) != 1 || cs[0].Confirmation != want {
		t.Fatalf("confirmations %+v, want exactly %+v", cs, want)
	}
	c := cs[0]
	pk, err := st.Client.RecordKey(inventory.Key(r))
	if err != nil {
		t.Fatal(err)
	}
	if c.group != idem.DeduplicationID(r.SKU) || !strings.HasPrefix(c.group, "sha256-") || c.dedup != idem.DeduplicationID(inventory.Key(r)) || c.keyAttr != outbox.OutboundKey(pk, 0) {
		t.Fatalf("confirmation group %q, deduplication id %q, key attribute %q; want the sku's, the key's and the confirmation's own key", c.group, c.dedup, c.keyAttr)
	}
}

// TestIntegrationConcurrentDeliveries: 16 deliveries of the same order at once reserve
// once and confirm once.
func TestIntegrationConcurrentDeliveries(t *testing.T) {
	ctx, st := newStack(t, 60*time.Second)
	r := inventory.Reservation{OrderID: "ord-c", SKU: "sku-c", Quantity: 2}
	st.addStock(ctx, t, r.SKU, 100)

	body := exampletest.JSON(t, r)
	var ran atomic.Int64
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			res, err := st.Deliver(ctx, inventory.Key(r), body)
			if err != nil {
				errs <- err
				return
			}
			if !res.Replayed {
				ran.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("delivery failed: %v", err)
	}
	t.Logf("%d deliveries were retried (key in progress elsewhere)", st.Retried.Load())
	if ran.Load() != 1 {
		t.Errorf("handler completed %d times, want 1", ran.Load())
	}
	if got, want := st.stocks(ctx, t)[r.SKU], (inventory.Stock{Available: 98, Reserved: 2, Reservations: 1}); got != want {
		t.Fatalf("stock %+v, want %+v", got, want)
	}
	if cs := st.confirmations(ctx, t); len(cs) != 1 || cs[0].OrderID != r.OrderID {
		t.Fatalf("confirmations %+v, want exactly one for %s", cs, r.OrderID)
	}
}

// TestIntegrationInsufficientStock: an order for more than is available is refused
// with the inventory's reason, commits nothing and gets no confirmation; a sku without
// stock is refused too; once the stock is replenished, the same message, redriven, is
// applied once.
func TestIntegrationInsufficientStock(t *testing.T) {
	ctx, st := newStack(t, 30*time.Second)
	st.addStock(ctx, t, "sku-x", 3)

	big := inventory.Reservation{OrderID: "ord-big", SKU: "sku-x", Quantity: 5}
	_, err := st.reserve(ctx, t, big)
	var wce *idem.WriteConditionError
	if !errors.As(err, &wce) || wce.Index != 1 || !wce.Explained || !idem.IsPermanent(err) {
		t.Fatalf("order for more than the stock: %v, want a permanent, explained *idem.WriteConditionError on write 1 (the stock)", err)
	}
	if want := "insufficient stock: sku sku-x has 3 available, 5 requested"; wce.Reason != want || !strings.Contains(err.Error(), want) {
		t.Fatalf("refusal %q (reason %q), want %q", err, wce.Reason, want)
	}

	none := inventory.Reservation{OrderID: "ord-none", SKU: "sku-none", Quantity: 1}
	_, err = st.reserve(ctx, t, none)
	if !errors.As(err, &wce) || wce.Index != 1 || wce.Reason != "insufficient stock: sku sku-none has no stock" {
		t.Fatalf("order for a sku without stock: %v, want \"insufficient stock: sku sku-none has no stock\"", err)
	}

	if got, want := st.stocks(ctx, t), map[string]inventory.Stock{"sku-x": {Available: 3}}; !maps.Equal(got, want) {
		t.Fatalf("stock after the refusals %+v, want %+v (unchanged, no item for sku-none)", got, want)
	}
	if st.entry(ctx, t, big.OrderID) != nil || st.entry(ctx, t, none.OrderID) != nil {
		t.Fatal("a refused order left a journal entry")
	}
	if cs := st.confirmations(ctx, t); len(cs) != 0 {
		t.Fatalf("confirmations %+v for refused orders, want none", cs)
	}

	// The operator replenishes the stock and redrives the message: it runs again and is
	// applied once, with one confirmation.
	st.addStock(ctx, t, "sku-x", 2)
	for i := range 2 {
		res, err := st.reserve(ctx, t, big)
		if err != nil || res.Replayed != (i == 1) {
			t.Fatalf("redrive %d after the replenishment: %+v, %v; want applied, then replayed", i, res, err)
		}
	}
	if got, want := st.stocks(ctx, t)["sku-x"], (inventory.Stock{Available: 0, Reserved: 5, Reservations: 1}); got != want {
		t.Fatalf("stock %+v, want %+v", got, want)
	}
	if cs := st.confirmations(ctx, t); len(cs) != 1 || cs[0].OrderID != big.OrderID {
		t.Fatalf("confirmations %+v, want exactly one for %s", cs, big.OrderID)
	}
}

// TestIntegrationAfterDeletion: once DynamoDB's TTL has deleted an order's record, a
// redelivery repeats nothing (no second decrement, no second confirmation): the
// journal entry stops it; and the same order id with another payload is refused as a
// payload mismatch instead of being acknowledged.
func TestIntegrationAfterDeletion(t *testing.T) {
	ctx, st := newStack(t, 30*time.Second)
	r := inventory.Reservation{OrderID: "ord-del", SKU: "sku-del", Quantity: 4}
	st.addStock(ctx, t, r.SKU, 20)
	if res, err := st.reserve(ctx, t, r); err != nil || res.Replayed || res.Guarded {
		t.Fatalf("first delivery: %+v, %v", res, err)
	}
	st.Forget(ctx, t, inventory.Key(r))
	res, err := st.reserve(ctx, t, r)
	if err != nil || !res.Guarded {
		t.Fatalf("redelivery after deletion: %+v, %v; want a guarded duplicate", res, err)
	}
	st.Forget(ctx, t, inventory.Key(r))
	changed := r
	changed.Quantity = 9
	if _, err := st.Deliver(ctx, inventory.Key(r), exampletest.JSON(t, changed)); !errors.Is(err, idem.ErrPayloadMismatch) || !idem.IsPermanent(err) {
		t.Fatalf("changed payload after deletion: %v, want a permanent ErrPayloadMismatch", err)
	}
	// The record now says the key was applied for the first payload: its duplicates are
	// replayed, and the changed one is refused again.
	if res, err := st.reserve(ctx, t, r); err != nil || !res.Replayed {
		t.Fatalf("original payload after the mismatch: %+v, %v; want a replay", res, err)
	}
	if _, err := st.Deliver(ctx, inventory.Key(r), exampletest.JSON(t, changed)); !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Fatalf("changed payload again: %v, want ErrPayloadMismatch", err)
	}
	if got, want := st.stocks(ctx, t)[r.SKU], (inventory.Stock{Available: 16, Reserved: 4, Reservations: 1}); got != want {
		t.Fatalf("stock %+v, want %+v (one decrement)", got, want)
	}
	if cs := st.confirmations(ctx, t); len(cs) != 1 || cs[0].Quantity != 4 {
		t.Fatalf("confirmations %+v, want exactly one, for 4 units", cs)
	}
}

// TestIntegrationExampleTraffic: the example's traffic, prepared and applied, reads back
// as Expect says, with one confirmation per order; its bad messages that reach the
// handler are refused as Bad says.
func TestIntegrationExampleTraffic(t *testing.T) {
	ctx, st := newStack(t, 60*time.Second)
	ex := inventory.Example{}
	valid := ex.Traffic(rand.New(rand.NewPCG(5, 6)), "t1", 24, 4)
	if err := ex.Prepare(ctx, st.DynamoDB, st.env(), valid); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	check := func(applied []example.Message) {
		t.Helper()
		want, err := ex.Expect(valid, applied)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ex.Read(ctx, st.DynamoDB, st.env())
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		for name, n := range want {
			if got.State[name] != n {
				t.Errorf("%s = %d, want %d", name, got.State[name], n)
			}
		}
		if got.Applied != len(applied) {
			t.Errorf("Read counted %d reservations, want %d", got.Applied, len(applied))
		}
	}
	check(nil)

	half := len(valid) / 2
	for _, m := range valid[:half] {
		if _, err := st.Deliver(ctx, m.Key, m.Body); err != nil {
			t.Fatalf("order %s: %v", m.ID, err)
		}
	}
	check(valid[:half])
	for _, b := range ex.Bad("t1", valid) {
		if b.Key == "" {
			continue // the consumer refuses it before the handler: no key
		}
		_, err := st.Deliver(ctx, b.Key, b.Body)
		if err == nil || !idem.IsPermanent(err) || !strings.Contains(err.Error(), b.Reason) {
			t.Errorf("bad message %s: %v, want a permanent error containing %q", b.ID, err, b.Reason)
		}
	}
	for _, m := range append(valid[half:], valid[0]) { // valid[0] again: a duplicate
		if _, err := st.Deliver(ctx, m.Key, m.Body); err != nil {
			t.Fatalf("order %s: %v", m.ID, err)
		}
	}
	check(valid)

	count := map[string]int{}
	for _, c := range st.confirmations(ctx, t) {
		id, ok := ex.Confirms(exampletest.JSON(t, c.Confirmation))
		if !ok {
			t.Fatalf("Confirms(%+v) refused", c.Confirmation)
		}
		count[id]++
	}
	if len(count) != len(valid) {
		t.Errorf("confirmations for %d orders, want %d", len(count), len(valid))
	}
	for _, m := range valid {
		if count[m.ID] != 1 {
			t.Errorf("order %s: %d confirmations, want 1", m.ID, count[m.ID])
		}
	}
}

// TestIntegrationPrepareAdditive: Prepare adds to what is there, so two runs against
// the same table do not undo each other.
func TestIntegrationPrepareAdditive(t *testing.T) {
	ctx, st := newStack(t, 30*time.Second)
	ex := inventory.Example{}
	valid := ex.Traffic(rand.New(rand.NewPCG(7, 8)), "t2", 10, 3)
	once, err := ex.Expect(valid, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := ex.Prepare(ctx, st.DynamoDB, st.env(), valid); err != nil {
			t.Fatalf("Prepare: %v", err)
		}
	}
	got, err := ex.Read(ctx, st.DynamoDB, st.env())
	if err != nil {
		t.Fatal(err)
	}
	for name, n := range once {
		if strings.HasSuffix(name, " available") {
			n *= 2
		}
		if got.State[name] != n {
			t.Errorf("%s = %d after two Prepares, want %d", name, got.State[name], n)
		}
	}
	if len(got.State) != len(once) || got.Applied != 0 {
		t.Errorf("Read after Prepare: %v (applied %d), want the names of %v and nothing applied", got.State, got.Applied, once)
	}
	bad := []example.Message{{ID: "x", Body: `{"order_id":"x","sku":"order#x","quantity":1}`}}
	if err := ex.Prepare(ctx, st.DynamoDB, st.env(), bad); !errors.Is(err, inventory.ErrInvalidReservation) {
		t.Fatalf("Prepare of an invalid message: %v, want ErrInvalidReservation", err)
	}
}

// TestIntegrationOrderIDsBelongToTheirCaller (issue 38, finding 3): with keys of HTTP
// callers, an order id is scoped as the key is: another caller's reservation under the
// same order id neither blocks the owner's (reserved, not refused as a mismatch) nor is
// taken for it; within one caller the id still guards.
func TestIntegrationOrderIDsBelongToTheirCaller(t *testing.T) {
	ctx, st := newStack(t, 30*time.Second)
	st.addStock(ctx, t, "sku-s", 100)
	alice := func(k string) string { return idem.CallerKey("arn:aws:iam::111122223333:role/alice", k) }
	mallory := idem.CallerKey("arn:aws:iam::111122223333:role/mallory", "m-1")
	if res, err := st.Deliver(ctx, mallory, exampletest.JSON(t, inventory.Reservation{OrderID: "ord-alice", SKU: "sku-s", Quantity: 1})); err != nil || res.Guarded {
		t.Fatalf("Mallory's reservation: res=%+v err=%v", res, err)
	}
	r := exampletest.JSON(t, inventory.Reservation{OrderID: "ord-alice", SKU: "sku-s", Quantity: 7})
	if res, err := st.Deliver(ctx, alice("a-1"), r); err != nil || res.Guarded || res.Replayed {
		t.Fatalf("Alice's reservation after Mallory took its id: res=%+v err=%v, want it reserved", res, err)
	}
	if res, err := st.Deliver(ctx, alice("a-2"), r); err != nil || !res.Guarded {
		t.Errorf("Alice's reservation again under another key: res=%+v err=%v, want a guarded duplicate", res, err)
	}
}
