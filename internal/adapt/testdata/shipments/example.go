package shipments

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

// Variables of the shipments' template block.
const (
	TableVar     = "ORDERS_TABLE"
	NoticesVar   = "SHIPMENT_NOTICES_QUEUE_URL"
	TrackingVar  = "TRACKING_QUEUE_URL"
	CarrierVar   = "CARRIER_URL"
	WarehouseVar = "WAREHOUSE_URL"
)

//go:embed template.yaml
var block []byte

// Example is shipments as an example.Example.
type Example struct{}

var (
	_ example.Full      = Example{}
	_ example.LeaseOnly = Example{}
	_ example.Caller    = Example{}
)

// Name is "shipments".
func (Example) Name() string { return "shipments" }

// Decode validates a shipment: key Key(s), group order_id.
func (Example) Decode(body []byte) (example.Message, error) {
	s, err := Decode(body)
	if err != nil {
		return example.Message{}, err
	}
	return message(s), nil
}

func message(s Shipment) example.Message {
	b, _ := json.Marshal(s) // strings and an int64 always marshal
	return example.Message{ID: s.ShipmentID, Key: Key(s), Group: s.OrderID, Body: string(b)}
}

// NewHandler reads the block's variables and returns the handler.
func (Example) NewHandler(d example.Deps) (idem.Handler, error) {
	e := envconf.New(d.Env)
	cfg := Config{
		OrdersTable: e.Required(TableVar), NoticesQueueURL: e.Required(NoticesVar), TrackingQueueURL: e.Required(TrackingVar),
		CarrierURL: e.Required(CarrierVar), WarehouseURL: e.Required(WarehouseVar),
	}
	if err := e.Err(); err != nil {
		return nil, fmt.Errorf("shipments configuration: %w", err)
	}
	return NewHandler(cfg, d.DynamoDB, d.HTTP)
}

// LeaseOnly: the two calls are steps.
func (Example) LeaseOnly() string {
	return "its handler calls the carrier and the warehouse in steps (idem.Attempt.Step) before its commit"
}

// Services are the carrier's and the warehouse's URL variables.
func (Example) Services() []string { return []string{CarrierVar, WarehouseVar} }

// Traffic returns n shipments sh-<run>-NNNNN of orders or-<run>-NNN.
func (Example) Traffic(rng *rand.Rand, run string, n, groups int) []example.Message {
	out := make([]example.Message, n)
	for i := range out {
		out[i] = message(Shipment{
			ShipmentID: fmt.Sprintf("sh-%s-%05d", run, i),
			OrderID:    fmt.Sprintf("or-%s-%03d", run, rng.IntN(max(groups, 1))),
			Parcels:    1 + rng.Int64N(9),
		})
	}
	return out
}

// Bad: broken JSON, no parcels, a shipment of an order not packed (Fix packs it) and
// valid[0]'s key with another count.
func (Example) Bad(run string, valid []example.Message) []example.Bad {
	id := func(n int) string { return fmt.Sprintf("sh-%s-bad-%d", run, n) }
	g := "or-" + run + "-bad"
	unpacked := "or-" + run + "-unpacked"
	bad := []example.Bad{
		{Message: example.Message{ID: id(1), Key: "shipment:" + id(1), Group: g, Body: `{"shipment_id":`}, Reason: "body is not valid JSON"},
		{Message: example.Message{ID: id(2), Key: "shipment:" + id(2), Group: g, Body: `{"shipment_id":"` + id(2) + `","order_id":"` + g + `","parcels":0}`}, Reason: "parcels: must be positive"},
		{
			Message: message(Shipment{ShipmentID: id(3), OrderID: unpacked, Parcels: 2}),
			Reason:  "order " + unpacked + " is not packed",
			Fix: func(ctx context.Context, db example.DynamoDB, env example.Lookup) error {
				table, err := env.Need(TableVar)
				if err != nil {
					return fmt.Errorf("shipments: %w", err)
				}
				return PackOrder(ctx, db, table, unpacked)
			},
		},
	}
	if len(valid) == 0 {
		return bad
	}
	first, err := Decode([]byte(valid[0].Body))
	if err != nil {
		return bad
	}
	first.Parcels = first.Parcels%MaxParcels + 1
	return append(bad, example.Bad{Message: message(first), Reason: "payload does not match"})
}

func orders(valid []example.Message) ([]Shipment, []string, error) {
	ss, err := example.DecodeAll(valid, Decode)
	if err != nil {
		return nil, nil, fmt.Errorf("shipments: %w", err)
	}
	var ids []string
	for _, s := range ss {
		if !slices.Contains(ids, s.OrderID) {
			ids = append(ids, s.OrderID)
		}
	}
	slices.Sort(ids)
	return ss, ids, nil
}

// Prepare packs every order of valid.
func (Example) Prepare(ctx context.Context, db example.DynamoDB, env example.Lookup, valid []example.Message) error {
	table, err := env.Need(TableVar)
	if err != nil {
		return fmt.Errorf("shipments: %w", err)
	}
	_, ids, err := orders(valid)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := PackOrder(ctx, db, table, id); err != nil {
			return err
		}
	}
	return nil
}

// Expect: per order, the parcels and the number of the distinct applied shipments.
func (Example) Expect(valid, applied []example.Message) (example.State, error) {
	_, ids, err := orders(valid)
	if err != nil {
		return nil, err
	}
	ss, _, err := orders(applied)
	if err != nil {
		return nil, err
	}
	st := example.State{}
	for _, id := range ids {
		st[id+" "+attrParcels], st[id+" "+attrCount] = 0, 0
	}
	for _, s := range example.Distinct(ss, func(s Shipment) string { return s.ShipmentID }) {
		st[s.OrderID+" "+attrParcels] += s.Parcels
		st[s.OrderID+" "+attrCount]++
	}
	return st, nil
}

// Read scans the orders table.
func (Example) Read(ctx context.Context, db example.DynamoDB, env example.Lookup) (example.Outcome, error) {
	return example.ReadTable(ctx, db, env, TableVar, Orders, (*Order).fields, attrCount)
}

// OutboundQueue is the notices' FIFO queue: one notice per applied shipment.
func (Example) OutboundQueue() string { return NoticesVar }

// Confirms returns the shipment id of a notice.
func (Example) Confirms(body string) (string, bool) {
	return example.Confirmed(body, func(n Notice) string { return n.ShipmentID })
}

// Template returns the block.
func (Example) Template() []byte { return block }
