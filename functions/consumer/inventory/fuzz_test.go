package inventory_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/inventory"
)

// FuzzDecode runs its seeds in `go test`; `go test -fuzz FuzzDecode` explores beyond
// them. Decode must never panic, and whatever it accepts must survive a round trip
// through encoding/json and stay within the documented limits.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"order_id":"o-1","sku":"sku-1","quantity":3}`))
	f.Add([]byte(" {\"quantity\" : 7,\t\"sku\":\"s\",\"order_id\":\"o\"}\n"))
	f.Add([]byte(`{"order_id":"bestellung-\u00fc-€","sku":"Artikel 7","quantity":1000000}`))
	f.Add([]byte(`{"order_id":"o","sku":"s","quantity":1000001}`))
	f.Add([]byte(`{"order_id":"o","sku":"s","quantity":2.5}`))
	f.Add([]byte(`{"order_id":"o","sku":"s","quantity":-0}`))
	f.Add([]byte(`{"order_id":"o","order_id":"p","sku":"s","quantity":1}`))
	f.Add([]byte(`{"order_id":"\ud800","sku":"s","quantity":1}`))
	f.Add([]byte(`{"order_id":"o","sku":"order#o","quantity":1}`))
	f.Add([]byte(`{"order_id":"o","sku":"s","quantity":1}}`))
	f.Add([]byte(`{"order_id":"o","sku":`))
	f.Add([]byte(`[]`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := inventory.Decode(body)
		if err != nil {
			if !errors.Is(err, inventory.ErrInvalidReservation) {
				t.Fatalf("Decode(%q): error %v does not wrap ErrInvalidReservation", body, err)
			}
			if r != (inventory.Reservation{}) {
				t.Fatalf("Decode(%q): reservation %+v returned with error %v", body, r, err)
			}
			return
		}
		if r.Quantity <= 0 || r.Quantity > inventory.MaxQuantity {
			t.Fatalf("Decode(%q) accepted quantity %d, outside (0, %d]", body, r.Quantity, int64(inventory.MaxQuantity))
		}
		for _, id := range []string{r.OrderID, r.SKU} {
			if id == "" || len(id) > inventory.MaxIDBytes {
				t.Fatalf("Decode(%q) accepted id %q", body, id)
			}
		}
		if strings.HasPrefix(r.SKU, inventory.EntryPrefix) {
			t.Fatalf("Decode(%q) accepted sku %q, which names a journal entry", body, r.SKU)
		}
		if !json.Valid(body) {
			t.Fatalf("Decode accepted %q, which is not valid JSON", body)
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("marshal %+v: %v", r, err)
		}
		q, err := inventory.Decode(again)
		if err != nil {
			t.Fatalf("Decode(%q) = %+v, but its re-encoding %q is refused: %v", body, r, again, err)
		}
		if q != r {
			t.Fatalf("round trip: Decode(%q) = %+v, Decode(%q) = %+v", body, r, again, q)
		}
	})
}
