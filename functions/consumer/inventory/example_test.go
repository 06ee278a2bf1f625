package inventory_test

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/inventory"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
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

func TestDecode(t *testing.T) {
	long := strings.Repeat("x", inventory.MaxIDBytes)
	tests := []exampletest.DecodeCase[inventory.Reservation]{
		{Name: "valid", Body: `{"order_id":"o-1","sku":"sku-1","quantity":3}`,
			Want: inventory.Reservation{OrderID: "o-1", SKU: "sku-1", Quantity: 3}},
		{Name: "any field order and white space", Body: " {\n \"quantity\" : 7,\t\"sku\":\"s\",\"order_id\":\"o\"}\n",
			Want: inventory.Reservation{OrderID: "o", SKU: "s", Quantity: 7}},
		{Name: "largest quantity", Body: `{"order_id":"o","sku":"s","quantity":1000000}`,
			Want: inventory.Reservation{OrderID: "o", SKU: "s", Quantity: 1_000_000}},
		{Name: "printable unicode and escapes in ids", Body: `{"order_id":"bestellung-\u00fc-€","sku":"Artikel 7/ü","quantity":1}`,
			Want: inventory.Reservation{OrderID: "bestellung-ü-€", SKU: "Artikel 7/ü", Quantity: 1}},
		{Name: "id of the maximum length", Body: `{"order_id":"` + long + `","sku":"` + long + `","quantity":1}`,
			Want: inventory.Reservation{OrderID: long, SKU: long, Quantity: 1}},
		{Name: "journal prefix inside a sku", Body: `{"order_id":"o","sku":"x-order#1","quantity":1}`,
			Want: inventory.Reservation{OrderID: "o", SKU: "x-order#1", Quantity: 1}},

		{Name: "not UTF-8", Body: "{\"order_id\":\"o\xff\",\"sku\":\"s\",\"quantity\":1}", WantErr: "body is not valid UTF-8"},
		{Name: "empty body", Body: ``, WantErr: "body is not a JSON object"},
		{Name: "array", Body: `[{"order_id":"o"}]`, WantErr: "body is not a JSON object"},
		{Name: "null", Body: `null`, WantErr: "body is not a JSON object"},
		{Name: "string", Body: `"o"`, WantErr: "body is not a JSON object"},
		{Name: "broken JSON", Body: `{"order_id":"o",}`, WantErr: "body is not valid JSON"},
		{Name: "truncated", Body: `{"order_id":"o","sku":`, WantErr: "body is not valid JSON"},
		{Name: "unterminated object", Body: `{"order_id":"o","sku":"s","quantity":1`, WantErr: "body is not valid JSON"},
		{Name: "second object after", Body: `{"order_id":"o","sku":"s","quantity":1}{}`, WantErr: "data after the JSON object"},
		{Name: "garbage after", Body: `{"order_id":"o","sku":"s","quantity":1} x`, WantErr: "data after the JSON object"},
		{Name: "unknown field", Body: `{"order_id":"o","sku":"s","quantity":1,"unit_price":250}`, WantErr: `"unit_price": unknown field`},
		{Name: "misspelt field", Body: `{"order_id":"o","sku":"s","qty":1}`, WantErr: `"qty": unknown field`},
		{Name: "long unknown field is cut", Body: `{"` + strings.Repeat("f", 60) + `":1}`, WantErr: `"` + strings.Repeat("f", 40) + `...": unknown field`},
		{Name: "duplicate field", Body: `{"order_id":"o","sku":"s","quantity":1,"quantity":2}`, WantErr: "quantity: duplicate field"},
		{Name: "duplicate order_id", Body: `{"order_id":"o","order_id":"p","sku":"s","quantity":1}`, WantErr: "order_id: duplicate field"},
		{Name: "order_id missing", Body: `{"sku":"s","quantity":1}`, WantErr: "order_id: missing"},
		{Name: "order_id empty", Body: `{"order_id":"","sku":"s","quantity":1}`, WantErr: "order_id: must not be empty"},
		{Name: "order_id number", Body: `{"order_id":42,"sku":"s","quantity":1}`, WantErr: "order_id: must be a string"},
		{Name: "order_id null", Body: `{"order_id":null,"sku":"s","quantity":1}`, WantErr: "order_id: must be a string"},
		{Name: "order_id too long", Body: `{"order_id":"` + long + `y","sku":"s","quantity":1}`, WantErr: "order_id: longer than 128 bytes"},
		{Name: "order_id control character", Body: `{"order_id":"o\u0007","sku":"s","quantity":1}`, WantErr: "order_id: must be printable"},
		{Name: "order_id lone surrogate", Body: `{"order_id":"o\ud800","sku":"s","quantity":1}`, WantErr: "order_id: must be printable"},
		{Name: "order_id trailing space", Body: `{"order_id":"o ","sku":"s","quantity":1}`, WantErr: "order_id: must be printable"},
		{Name: "sku missing", Body: `{"order_id":"o","quantity":1}`, WantErr: "sku: missing"},
		{Name: "sku empty", Body: `{"order_id":"o","sku":"","quantity":1}`, WantErr: "sku: must not be empty"},
		{Name: "sku array", Body: `{"order_id":"o","sku":["s"],"quantity":1}`, WantErr: "sku: must be a string"},
		{Name: "sku too long", Body: `{"order_id":"o","sku":"` + long + `y","quantity":1}`, WantErr: "sku: longer than 128 bytes"},
		{Name: "sku leading space", Body: `{"order_id":"o","sku":" s","quantity":1}`, WantErr: "sku: must be printable"},
		{Name: "sku journal prefix", Body: `{"order_id":"o","sku":"order#o-1","quantity":1}`, WantErr: `sku: must not begin with "order#"`},
		{Name: "quantity missing", Body: `{"order_id":"o","sku":"s"}`, WantErr: "quantity: missing"},
		{Name: "quantity zero", Body: `{"order_id":"o","sku":"s","quantity":0}`, WantErr: "quantity: must be positive"},
		{Name: "quantity negative", Body: `{"order_id":"o","sku":"s","quantity":-3}`, WantErr: "quantity: must be positive"},
		{Name: "quantity negative zero", Body: `{"order_id":"o","sku":"s","quantity":-0}`, WantErr: "quantity: must be positive"},
		{Name: "quantity fraction", Body: `{"order_id":"o","sku":"s","quantity":2.5}`, WantErr: "quantity: must be an integer"},
		{Name: "quantity whole float", Body: `{"order_id":"o","sku":"s","quantity":2.0}`, WantErr: "quantity: must be an integer"},
		{Name: "quantity exponent", Body: `{"order_id":"o","sku":"s","quantity":1e1}`, WantErr: "quantity: must be an integer"},
		{Name: "quantity string", Body: `{"order_id":"o","sku":"s","quantity":"2"}`, WantErr: "quantity: must be a JSON integer"},
		{Name: "quantity bool", Body: `{"order_id":"o","sku":"s","quantity":true}`, WantErr: "quantity: must be a JSON integer"},
		{Name: "quantity null", Body: `{"order_id":"o","sku":"s","quantity":null}`, WantErr: "quantity: must be a JSON integer"},
		{Name: "quantity over the limit", Body: `{"order_id":"o","sku":"s","quantity":1000001}`, WantErr: "quantity: too large (limit 1000000)"},
		{Name: "quantity over int64", Body: `{"order_id":"o","sku":"s","quantity":99999999999999999999}`, WantErr: "quantity: too large"},
	}
	exampletest.CheckDecode(t, inventory.Decode, inventory.ErrInvalidReservation, tests)
}

// TestDecodeDoesNotEchoValues: an error names the field, never the value that was
// refused (it ends up in logs and on the dead-letter queue).
func TestDecodeDoesNotEchoValues(t *testing.T) {
	const secret = "SECRET-VALUE"
	for _, body := range []string{
		`{"order_id":"` + secret + "\\u0007" + `","sku":"s","quantity":1}`,
		`{"order_id":"o","sku":" ` + secret + `","quantity":1}`,
		`{"order_id":"o","sku":"order#` + secret + `","quantity":1}`,
		`{"order_id":"o","sku":"s","quantity":"` + secret + `"}`,
		`{"order_id":"o","sku":"s","quantity":1,"note":"` + secret + `"}`,
		`{"order_id":"` + secret + `","sku":"s","quantity":0}`,
	} {
		_, err := inventory.Decode([]byte(body))
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("Decode(%s) = %v, want an error without the value", body, err)
		}
	}
}

// TestDecodeTruncatedBody: a body cut off anywhere, inside a value included, is
// reported as not valid JSON, without naming the field where the cut happened.
func TestDecodeTruncatedBody(t *testing.T) {
	exampletest.CheckTruncated(t, inventory.Decode, inventory.ErrInvalidReservation, `{"order_id":"ord-1","sku":"sku-1","quantity":1250}`)
}

func TestKey(t *testing.T) {
	if got := inventory.Key(inventory.Reservation{OrderID: "ord-7", SKU: "s", Quantity: 1}); got != "reservation:ord-7" {
		t.Fatalf("Key = %q, want reservation:ord-7", got)
	}
}

// row is a stock table item; "" leaves an attribute out.
func row(sku string, attrs ...string) map[string]types.AttributeValue {
	it := map[string]types.AttributeValue{"sku": &types.AttributeValueMemberS{Value: sku}}
	for i, name := range []string{"available", "reserved", "reservation_count"} {
		if i < len(attrs) && attrs[i] != "" {
			it[name] = &types.AttributeValueMemberN{Value: attrs[i]}
		}
	}
	return it
}

func TestStocks(t *testing.T) {
	entry := row("order#o-1")
	entry["quantity"] = &types.AttributeValueMemberN{Value: "3"}
	tests := []struct {
		name    string
		pages   [][]map[string]types.AttributeValue
		want    map[string]inventory.Stock
		wantErr string
	}{
		{name: "empty table", pages: [][]map[string]types.AttributeValue{nil}, want: map[string]inventory.Stock{}},
		{name: "all pages, journal entries skipped, missing counters read as 0", pages: [][]map[string]types.AttributeValue{
			{row("a", "7", "3", "1"), entry},
			{row("b", "10")},
			{row("c", "0", "12", "4")},
		}, want: map[string]inventory.Stock{
			"a": {Available: 7, Reserved: 3, Reservations: 1},
			"b": {Available: 10},
			"c": {Reserved: 12, Reservations: 4},
		}},
		{name: "not a number", pages: [][]map[string]types.AttributeValue{{row("a", "1.5")}}, wantErr: "sku a: available"},
		{name: "string counter", pages: [][]map[string]types.AttributeValue{{{
			"sku": &types.AttributeValueMemberS{Value: "a"}, "reserved": &types.AttributeValueMemberS{Value: "2"},
		}}}, wantErr: "sku a: reserved is not a number"},
		{name: "no sku", pages: [][]map[string]types.AttributeValue{{{"available": &types.AttributeValueMemberN{Value: "1"}}}}, wantErr: "item without a string sku"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := &exampletest.Pages{Key: "sku", Pages: tt.pages}
			got, err := inventory.Stocks(context.Background(), api, "stock")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Stocks error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Stocks: %v", err)
			}
			if !maps.Equal(got, tt.want) {
				t.Fatalf("Stocks = %v, want %v", got, tt.want)
			}
			if api.Calls != len(tt.pages) {
				t.Fatalf("%d Scan calls, want %d", api.Calls, len(tt.pages))
			}
		})
	}
}

// TestAddStockRefusesJournalNames: stock is never added to a journal entry's item.
func TestAddStockRefusesJournalNames(t *testing.T) {
	err := inventory.AddStock(context.Background(), (*dynamodb.Client)(nil), "stock", "order#o-1", 5)
	if err == nil || !strings.Contains(err.Error(), "reserved for journal entries") {
		t.Fatalf("AddStock on a journal entry's name: %v", err)
	}
}

// TestTemplateBlock: the inventory's block swapped into the repository's template.yaml
// gives a template cfn-lint accepts, wired to the inventory; swapping the block of the
// example template.yaml carries back gives the original template byte for byte.
func TestTemplateBlock(t *testing.T) {
	orig, err := os.ReadFile("../../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	carried, err := example.BlockExample(orig)
	if err != nil {
		t.Fatal(err)
	}
	carriedEx, err := example.Find(wiring.Examples, carried)
	if err != nil {
		t.Fatal(err)
	}
	block := inventory.Example{}.Template()
	if name, err := example.BlockExample(block); err != nil || name != "inventory" {
		t.Fatalf("BlockExample(the block) = %q, %v; want inventory", name, err)
	}
	swapped, err := example.SwapBlock(orig, block)
	if err != nil {
		t.Fatalf("SwapBlock: %v", err)
	}
	if name, err := example.BlockExample(swapped); err != nil || name != "inventory" {
		t.Fatalf("BlockExample(swapped template) = %q, %v; want inventory", name, err)
	}
	for _, want := range []string{"StockTable:", "ConfirmationsQueue:", "STOCK_TABLE: !Ref StockTable", "CONFIRMATIONS_QUEUE_URL: !Ref ConfirmationsQueue", "Default: order_id"} {
		if !bytes.Contains(swapped, []byte(want)) {
			t.Errorf("swapped template lacks %q", want)
		}
	}
	// The resources of the block the template carried (the default example's) are gone,
	// unless that example is the inventory itself; the grants' names are every block's.
	if carried != "inventory" {
		ids := regexp.MustCompile(`(?m)^  ([A-Za-z0-9]+):\s*$`).FindAllSubmatch(carriedEx.Template(), -1)
		if len(ids) < 4 {
			t.Fatalf("found %d names in %s's block", len(ids), carried)
		}
		for _, id := range ids {
			name := string(id[1])
			if name == "ExampleConsumerPolicy" || name == "ExampleReaperPolicy" || name == "ScopeName" || name == "KeyField" {
				continue
			}
			if bytes.Contains(swapped, []byte("  "+name+":")) || bytes.Contains(swapped, []byte("Ref "+name)) {
				t.Errorf("swapped template still names %s's %s", carried, name)
			}
		}
	}
	wired, err := example.Wire(orig, inventory.Example{})
	if err != nil || !bytes.Equal(wired, swapped) {
		t.Errorf("Wire(template, inventory) differs from SwapBlock (err %v)", err)
	}
	back, err := example.SwapBlock(swapped, carriedEx.Template())
	if err != nil {
		t.Fatalf("SwapBlock back to %s: %v", carried, err)
	}
	if !bytes.Equal(back, orig) {
		t.Fatalf("swapping %s's block back does not give template.yaml byte for byte", carried)
	}

	lint, err := exec.LookPath("cfn-lint")
	if err != nil {
		t.Skip("cfn-lint is not on PATH")
	}
	path := filepath.Join(t.TempDir(), "template.yaml")
	if err := os.WriteFile(path, swapped, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), lint, path).CombinedOutput(); err != nil {
		t.Fatalf("cfn-lint on the template with the inventory's block: %v\n%s", err, out)
	}
}
