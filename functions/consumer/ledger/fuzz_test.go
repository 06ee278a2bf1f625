package ledger_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// FuzzDecode runs its seeds (f.Add and testdata/fuzz/FuzzDecode/) in `go test`;
// `make fuzz` explores beyond them. Decode must never panic, and keep
// exampletest.CheckDecoded's properties within the documented limits.
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
		exampletest.CheckDecoded(t, ledger.Decode, ledger.ErrInvalidPayment, body, func(p ledger.Payment) error {
			if p.AmountCents <= 0 || p.AmountCents > ledger.MaxAmountCents {
				return fmt.Errorf("amount outside (0, %d]", int64(ledger.MaxAmountCents))
			}
			if !slices.Contains(ledger.Currencies, p.Currency) {
				return fmt.Errorf("currency %q", p.Currency)
			}
			for _, id := range []string{p.PaymentID, p.AccountID} {
				if id == "" || len(id) > ledger.MaxIDBytes {
					return fmt.Errorf("id %q", id)
				}
			}
			return nil
		})
	})
}
