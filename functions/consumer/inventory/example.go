package inventory

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/envconf"
)

// Variables of the inventory's template block that the handler reads.
const (
	TableVar         = "STOCK_TABLE"
	ConfirmationsVar = "CONFIRMATIONS_QUEUE_URL"
)

// PrepareMargin is what Prepare adds to each sku's stock beyond the sum of the
// quantities of the traffic.
const PrepareMargin = 10

//go:embed template.yaml
var block []byte

// Example is the inventory as an example.Example: what the consumer's wiring, idemctl,
// the demo and the reliability suite know of stock reservations.
type Example struct{}

var _ example.Full = Example{} // every tool runs on it

// Name is "inventory".
func (Example) Name() string { return "inventory" }

// Decode validates a reservation (Decode) and returns it as traffic: key Key(r), group
// sku.
func (Example) Decode(body []byte) (example.Message, error) {
	r, err := Decode(body)
	if err != nil {
		return example.Message{}, err
	}
	return example.Message{ID: r.OrderID, Key: Key(r), Group: r.SKU, Body: string(body)}, nil
}

// NewHandler reads STOCK_TABLE and CONFIRMATIONS_QUEUE_URL and returns the reservation
// handler.
func (Example) NewHandler(d example.Deps) (idem.Handler, error) {
	e := envconf.New(d.Env)
	cfg := Config{StockTable: e.Required(TableVar), ConfirmationsQueueURL: e.Required(ConfirmationsVar)}
	if err := e.Err(); err != nil {
		return nil, fmt.Errorf("inventory configuration: %w", err)
	}
	return NewHandler(cfg)
}

// Traffic returns n orders ord-<run>-NNNNN over skus sku-<run>-NNN, each for 1 to 5
// units.
func (Example) Traffic(rng *rand.Rand, run string, n, groups int) []example.Message {
	out := make([]example.Message, n)
	for i := range out {
		out[i] = message(Reservation{
			OrderID:  fmt.Sprintf("ord-%s-%05d", run, i),
			SKU:      fmt.Sprintf("sku-%s-%03d", run, rng.IntN(max(groups, 1))),
			Quantity: 1 + rng.Int64N(5),
		})
	}
	return out
}

func message(r Reservation) example.Message {
	b, _ := json.Marshal(r) // strings and an int64 always marshal
	return example.Message{ID: r.OrderID, Key: Key(r), Group: r.SKU, Body: string(b)}
}

// Bad returns seven messages the consumer must dead-letter: broken JSON, a quantity of
// 0, a negative quantity, an unknown field, no key anywhere, an order for more than
// valid[0]'s sku will ever have (refused by the stock write's condition), and
// valid[0]'s key with another quantity.
func (Example) Bad(run string, valid []example.Message) []example.Bad {
	g := "sku-" + run + "-bad"
	id := func(n int) string { return fmt.Sprintf("ord-%s-bad-%d", run, n) }
	msg := func(n int, body string) example.Message {
		return example.Message{ID: id(n), Key: "reservation:" + id(n), Group: g, Body: body}
	}
	bad := []example.Bad{
		{Message: msg(1, `{"order_id":"`+id(1)+`","sku":`), Reason: "body is not valid JSON"},
		{Message: msg(2, `{"order_id":"`+id(2)+`","sku":"`+g+`","quantity":0}`), Reason: "quantity: must be positive"},
		{Message: msg(3, `{"order_id":"`+id(3)+`","sku":"`+g+`","quantity":-3}`), Reason: "quantity: must be positive"},
		{Message: msg(4, `{"order_id":"`+id(4)+`","sku":"`+g+`","quantity":1,"unit_price":250}`), Reason: `"unit_price": unknown field`},
		// On a FIFO queue the deduplication id stands in for a missing key attribute; the
		// handler then refuses the body.
		{Message: example.Message{ID: id(5), Group: g, Body: `{"sku":"` + g + `","quantity":1}`}, Reason: "order_id: missing"},
	}
	if len(valid) == 0 {
		return bad
	}
	first, err := Decode([]byte(valid[0].Body))
	if err != nil {
		return bad
	}
	// More than the sku will ever have: Prepare gives it the traffic's quantities and
	// PrepareMargin, far below MaxQuantity.
	if prepared(valid)[first.SKU] < MaxQuantity {
		bad = append(bad, example.Bad{
			Message: message(Reservation{OrderID: id(6), SKU: first.SKU, Quantity: MaxQuantity}),
			Reason:  "insufficient stock",
			// The fix: restock the sku with the whole order.
			Fix: func(ctx context.Context, db example.DynamoDB, env example.Lookup) error {
				table, err := env.Need(TableVar)
				if err != nil {
					return fmt.Errorf("inventory: %w", err)
				}
				return AddStock(ctx, db, table, first.SKU, MaxQuantity)
			},
		})
	}
	// valid[0]'s key with another quantity: a producer bug.
	conflict := first
	if conflict.Quantity < MaxQuantity {
		conflict.Quantity++
	} else {
		conflict.Quantity--
	}
	bad = append(bad, example.Bad{Message: message(conflict), Reason: "payload does not match"})
	return bad
}

// prepared returns what Prepare adds per sku of valid: the sum of its quantities and
// PrepareMargin. Messages that do not decode are left out.
func prepared(valid []example.Message) map[string]int64 {
	add := map[string]int64{}
	for _, m := range valid {
		r, err := Decode([]byte(m.Body))
		if err != nil {
			continue
		}
		add[r.SKU] += r.Quantity
	}
	for sku := range add {
		add[sku] += PrepareMargin
	}
	return add
}

// Prepare adds stock to every sku of valid (AddStock): the sum of its orders' quantities
// and PrepareMargin, so every valid order can be served in whatever order they are
// processed. It adds to what is there: two runs do not undo each other.
func (Example) Prepare(ctx context.Context, db example.DynamoDB, env example.Lookup, valid []example.Message) error {
	table, err := env.Need(TableVar)
	if err != nil {
		return fmt.Errorf("inventory: %w", err)
	}
	if _, err := example.DecodeAll(valid, Decode); err != nil {
		return fmt.Errorf("inventory: prepare: %w", err)
	}
	add := prepared(valid)
	skus := make([]string, 0, len(add))
	for sku := range add {
		skus = append(skus, sku)
	}
	slices.Sort(skus)
	for _, sku := range skus {
		if err := AddStock(ctx, db, table, sku, add[sku]); err != nil {
			return err
		}
	}
	return nil
}

// Expect returns, per sku of valid, "<sku> available" (what Prepare added less the
// quantities of the distinct applied orders), "<sku> reserved" (their sum) and "<sku>
// reservation_count" (their number).
func (Example) Expect(valid, applied []example.Message) (example.State, error) {
	if _, err := example.DecodeAll(valid, Decode); err != nil {
		return nil, fmt.Errorf("inventory: expected outcome: %w", err)
	}
	rs, err := example.DecodeAll(applied, Decode)
	if err != nil {
		return nil, fmt.Errorf("inventory: expected outcome: %w", err)
	}
	st := example.State{}
	for sku, n := range prepared(valid) {
		st[sku+" "+attrAvailable] = n
		st[sku+" "+attrReserved] = 0
		st[sku+" "+attrCount] = 0
	}
	for _, r := range example.Distinct(rs, func(r Reservation) string { return r.OrderID }) {
		st[r.SKU+" "+attrAvailable] -= r.Quantity
		st[r.SKU+" "+attrReserved] += r.Quantity
		st[r.SKU+" "+attrCount]++
	}
	return st, nil
}

// Read scans the stock table (Stocks): the same names as Expect, and the reservations
// counted by reservation_count.
func (Example) Read(ctx context.Context, db example.DynamoDB, env example.Lookup) (example.Outcome, error) {
	return example.ReadTable(ctx, db, env, TableVar, Stocks, (*Stock).fields, attrCount)
}

// OutboundQueue is CONFIRMATIONS_QUEUE_URL.
func (Example) OutboundQueue() string { return ConfirmationsVar }

// Confirms returns the order id of a confirmation.
func (Example) Confirms(body string) (string, bool) {
	return example.Confirmed(body, func(c Confirmation) string { return c.OrderID })
}

// Template returns the inventory's template block (template.yaml of this package).
func (Example) Template() []byte { return block }
