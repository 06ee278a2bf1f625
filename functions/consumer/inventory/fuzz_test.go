package inventory_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/inventory"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// FuzzDecode runs its seeds in `go test`; `go test -fuzz FuzzDecode` explores beyond
// them. Decode must never panic, and keep exampletest.CheckDecoded's properties within
// the documented limits.
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
		exampletest.CheckDecoded(t, inventory.Decode, inventory.ErrInvalidReservation, body, func(r inventory.Reservation) error {
			if r.Quantity <= 0 || r.Quantity > inventory.MaxQuantity {
				return fmt.Errorf("quantity outside (0, %d]", int64(inventory.MaxQuantity))
			}
			for _, id := range []string{r.OrderID, r.SKU} {
				if id == "" || len(id) > inventory.MaxIDBytes {
					return fmt.Errorf("id %q", id)
				}
			}
			if strings.HasPrefix(r.SKU, inventory.EntryPrefix) {
				return errors.New("its sku names a journal entry")
			}
			return nil
		})
	})
}
