package ledger_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
)

// FuzzDecode runs its seeds (f.Add and testdata/fuzz/FuzzDecode/) in `go test`;
// `make fuzz` explores beyond them. Decode must never panic, and whatever it accepts
// must survive a round trip through encoding/json and stay within the documented limits.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"payment_id":"p-1","account_id":"acct-1","amount_cents":1250,"currency":"EUR"}`))
	f.Add([]byte(" {\"currency\" : \"JPY\", \"amount_cents\":7,\t\"account_id\":\"a\",\"payment_id\":\"p\"}\n"))
	f.Add([]byte(`{"payment_id":"zahlung-\u00fc-€","account_id":"Konto 7","amount_cents":1000000000000,"currency":"GBP"}`))
	f.Add([]byte(`{"payment_id":"p","account_id":"a","amount_cents":1000000000001,"currency":"EUR"}`))
	f.Add([]byte(`{"payment_id":"p","account_id":"a","amount_cents":12.5,"currency":"EUR"}`))
	f.Add([]byte(`{"payment_id":"p","account_id":"a","amount_cents":-0,"currency":"EUR"}`))
	f.Add([]byte(`{"payment_id":"p","payment_id":"q","account_id":"a","amount_cents":1,"currency":"EUR"}`))
	f.Add([]byte(`{"payment_id":"\ud800","account_id":"a","amount_cents":1,"currency":"EUR"}`))
	f.Add([]byte(`{"payment_id":"p","account_id":"a","amount_cents":1,"currency":"EUR"}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := ledger.Decode(body)
		if err != nil {
			if !errors.Is(err, ledger.ErrInvalidPayment) {
				t.Fatalf("Decode(%q): error %v does not wrap ErrInvalidPayment", body, err)
			}
			if p != (ledger.Payment{}) {
				t.Fatalf("Decode(%q): payment %+v returned with error %v", body, p, err)
			}
			return
		}
		if p.AmountCents <= 0 || p.AmountCents > ledger.MaxAmountCents {
			t.Fatalf("Decode(%q) accepted amount %d, outside (0, %d]", body, p.AmountCents, int64(ledger.MaxAmountCents))
		}
		if !slices.Contains(ledger.Currencies, p.Currency) {
			t.Fatalf("Decode(%q) accepted currency %q", body, p.Currency)
		}
		for _, id := range []string{p.PaymentID, p.AccountID} {
			if id == "" || len(id) > ledger.MaxIDBytes {
				t.Fatalf("Decode(%q) accepted id %q", body, id)
			}
		}
		if !json.Valid(body) {
			t.Fatalf("Decode accepted %q, which is not valid JSON", body)
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("marshal %+v: %v", p, err)
		}
		q, err := ledger.Decode(again)
		if err != nil {
			t.Fatalf("Decode(%q) = %+v, but its re-encoding %q is refused: %v", body, p, again, err)
		}
		if q != p {
			t.Fatalf("round trip: Decode(%q) = %+v, Decode(%q) = %+v", body, p, again, q)
		}
	})
}
