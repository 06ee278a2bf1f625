package inventory_test

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/inventory"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

const confirmationsURL = "https://sqs.us-east-1.amazonaws.com/123456789012/confirmations.fifo"

func TestNewHandlerConfig(t *testing.T) {
	exampletest.CheckConfigs(t, inventory.NewHandler, []exampletest.ConfigCase[inventory.Config]{
		{Name: "valid", Config: inventory.Config{StockTable: "stock", ConfirmationsQueueURL: confirmationsURL}},
		{Name: "http endpoint", Config: inventory.Config{StockTable: "stock", ConfirmationsQueueURL: "http://127.0.0.1:4566/000000000000/c.fifo"}},
		{Name: "no table", Config: inventory.Config{ConfirmationsQueueURL: confirmationsURL}, WantErr: "StockTable is empty"},
		{Name: "no queue", Config: inventory.Config{StockTable: "stock"}, WantErr: "not an http(s) queue URL"},
		{Name: "not a URL", Config: inventory.Config{StockTable: "stock", ConfirmationsQueueURL: "confirmations.fifo"}, WantErr: "not an http(s) queue URL"},
		{Name: "standard queue", Config: inventory.Config{StockTable: "stock", ConfirmationsQueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/confirmations"}, WantErr: "not a FIFO queue"},
	})
}

func TestExampleNewHandler(t *testing.T) {
	ex := inventory.Example{}
	if _, err := ex.NewHandler(example.Deps{Env: exampletest.LookupIn(map[string]string{inventory.TableVar: "stock", inventory.ConfirmationsVar: confirmationsURL})}); err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	_, err := ex.NewHandler(example.Deps{Env: exampletest.LookupIn(nil)})
	if err == nil || !strings.Contains(err.Error(), inventory.TableVar) || !strings.Contains(err.Error(), inventory.ConfirmationsVar) {
		t.Fatalf("NewHandler without variables: %v, want both variables named", err)
	}
	_, err = ex.NewHandler(example.Deps{Env: exampletest.LookupIn(map[string]string{inventory.TableVar: "stock", inventory.ConfirmationsVar: "https://sqs.example/q"})})
	if err == nil || !strings.Contains(err.Error(), "not a FIFO queue") {
		t.Fatalf("NewHandler with a standard queue: %v", err)
	}
}

// TestHandlerOutsideTheMiddleware: the handler refuses to run without the middleware,
// which commits its writes.
func TestHandlerOutsideTheMiddleware(t *testing.T) {
	h, err := inventory.NewHandler(inventory.Config{StockTable: "stock", ConfirmationsQueueURL: confirmationsURL})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.Handle(context.Background(), &idem.Request{Key: "reservation:o", Payload: []byte(`{"order_id":"o","sku":"s","quantity":1}`)})
	if !errors.Is(err, idem.ErrNoLease) {
		t.Fatalf("Handle outside the middleware: %v, want ErrNoLease", err)
	}
}

func TestTraffic(t *testing.T) {
	ex := inventory.Example{}
	if ex.Name() != "inventory" {
		t.Fatalf("Name = %q", ex.Name())
	}
	msgs := ex.Traffic(rand.New(rand.NewPCG(1, 2)), "r1", 200, 7)
	again := ex.Traffic(rand.New(rand.NewPCG(1, 2)), "r1", 200, 7)
	if !reflect.DeepEqual(msgs, again) {
		t.Fatal("the same rng state gave other traffic")
	}
	ids, groups := map[string]bool{}, map[string]bool{}
	for _, m := range msgs {
		r, err := inventory.Decode([]byte(m.Body))
		if err != nil {
			t.Fatalf("traffic message %s: %v", m.ID, err)
		}
		got, err := ex.Decode([]byte(m.Body))
		if err != nil || got != m {
			t.Fatalf("Example.Decode(%s) = %+v, %v; want %+v", m.Body, got, err, m)
		}
		if m.ID != r.OrderID || m.Key != inventory.Key(r) || m.Group != r.SKU {
			t.Fatalf("message %+v does not match its reservation %+v", m, r)
		}
		if !strings.HasPrefix(r.OrderID, "ord-r1-") || !strings.HasPrefix(r.SKU, "sku-r1-") || r.Quantity < 1 || r.Quantity > 5 {
			t.Fatalf("traffic reservation %+v", r)
		}
		if ids[r.OrderID] {
			t.Fatalf("order %s twice", r.OrderID)
		}
		ids[r.OrderID], groups[r.SKU] = true, true
	}
	if len(groups) > 7 || len(groups) < 2 {
		t.Fatalf("%d skus, want at most 7 (and more than one)", len(groups))
	}
	if n := len(ex.Traffic(rand.New(rand.NewPCG(1, 2)), "r1", 5, 0)); n != 5 {
		t.Fatalf("Traffic with 0 groups gave %d messages", n)
	}
}

// TestBad: each bad message is refused as it says. The ones Decode refuses carry
// Decode's reason; the others decode and are refused later (no key, the stock, the
// payload mismatch).
func TestBad(t *testing.T) {
	ex := inventory.Example{}
	valid := ex.Traffic(rand.New(rand.NewPCG(3, 4)), "r2", 30, 3)
	bad := ex.Bad("r2", valid)
	if len(bad) != 7 {
		t.Fatalf("%d bad messages, want 7", len(bad))
	}
	first, err := inventory.Decode([]byte(valid[0].Body))
	if err != nil {
		t.Fatal(err)
	}
	var prepared int64 = inventory.PrepareMargin
	for _, m := range valid {
		if r, _ := inventory.Decode([]byte(m.Body)); r.SKU == first.SKU {
			prepared += r.Quantity
		}
	}
	reasons := map[string]bool{}
	for _, b := range bad {
		reasons[b.Reason] = true
		r, err := inventory.Decode([]byte(b.Body))
		switch b.Reason {
		case "order_id: missing":
			// No key attribute and no order_id: on a FIFO queue the deduplication id stands
			// in for the key, and the handler refuses the body.
			if b.Key != "" || strings.Contains(b.Body, "order_id") || err == nil || !strings.Contains(err.Error(), "order_id: missing") {
				t.Errorf("no-key message %+v: %v; want a body without order_id and no key", b, err)
			}
		case "insufficient stock":
			if err != nil || r.SKU != first.SKU || b.Group != first.SKU || r.Quantity <= prepared || b.Key != inventory.Key(r) {
				t.Errorf("insufficient-stock message %+v (%v): want a valid order for more than the %d units of %s", b, err, prepared, first.SKU)
			}
		case "payload does not match":
			if err != nil || b.Key != valid[0].Key || b.Group != valid[0].Group || r.OrderID != first.OrderID || r.Quantity == first.Quantity {
				t.Errorf("conflicting message %+v (%v): want valid[0]'s key with another quantity", b, err)
			}
		default:
			if err == nil || !strings.Contains(err.Error(), b.Reason) {
				t.Errorf("bad message %s: Decode = %v, want an error containing %q", b.Body, err, b.Reason)
			}
			if b.Key == "" || b.ID == "" {
				t.Errorf("bad message %+v has no key or id", b)
			}
		}
	}
	for _, want := range []string{"body is not valid JSON", "quantity: must be positive", `"unit_price": unknown field`} {
		if !reasons[want] {
			t.Errorf("no bad message for %q", want)
		}
	}
	if n := len(ex.Bad("r2", nil)); n != 5 {
		t.Fatalf("Bad without traffic: %d messages, want the 5 that need none", n)
	}
}

func TestExpect(t *testing.T) {
	ex := inventory.Example{}
	msg := func(order, sku string, q int64) example.Message {
		m, err := ex.Decode([]byte(`{"order_id":"` + order + `","sku":"` + sku + `","quantity":` + strconv.FormatInt(q, 10) + `}`))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	valid := []example.Message{msg("o1", "a", 2), msg("o2", "a", 3), msg("o3", "b", 5), msg("o4", "c", 1)}
	applied := []example.Message{valid[0], valid[2], valid[0]} // o1 twice counts once
	got, err := ex.Expect(valid, applied)
	if err != nil {
		t.Fatal(err)
	}
	want := example.State{
		"a available": 5 + 10 - 2, "a reserved": 2, "a reservation_count": 1,
		"b available": 5 + 10 - 5, "b reserved": 5, "b reservation_count": 1,
		"c available": 1 + 10, "c reserved": 0, "c reservation_count": 0,
	}
	if !maps.Equal(got, want) {
		t.Fatalf("Expect = %v, want %v", got, want)
	}
	if _, err := ex.Expect(valid, []example.Message{{ID: "x", Body: "{"}}); !errors.Is(err, inventory.ErrInvalidReservation) {
		t.Fatalf("Expect with an invalid applied message: %v", err)
	}
}

func TestConfirms(t *testing.T) {
	ex := inventory.Example{}
	if id, ok := ex.Confirms(`{"order_id":"o-9","sku":"s","quantity":2,"idempotency_key":"reservation:o-9"}`); !ok || id != "o-9" {
		t.Fatalf("Confirms = %q, %v", id, ok)
	}
	for _, body := range []string{``, `{}`, `{"order_id":""}`, `[1]`} {
		if id, ok := ex.Confirms(body); ok {
			t.Errorf("Confirms(%q) = %q, true", body, id)
		}
	}
	if ex.OutboundQueue() != inventory.ConfirmationsVar {
		t.Fatalf("OutboundQueue = %q", ex.OutboundQueue())
	}
}

// TestReadUnset: Prepare and Read need STOCK_TABLE.
func TestReadUnset(t *testing.T) {
	ex := inventory.Example{}
	var db *dynamodb.Client // never called
	if _, err := ex.Read(context.Background(), db, exampletest.LookupIn(nil)); err == nil || !strings.Contains(err.Error(), inventory.TableVar) {
		t.Fatalf("Read without %s: %v", inventory.TableVar, err)
	}
	if err := ex.Prepare(context.Background(), db, exampletest.LookupIn(nil), nil); err == nil || !strings.Contains(err.Error(), inventory.TableVar) {
		t.Fatalf("Prepare without %s: %v", inventory.TableVar, err)
	}
}
