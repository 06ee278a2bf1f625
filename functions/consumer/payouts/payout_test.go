package payouts_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/payouts"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

func TestDecode(t *testing.T) {
	p, err := payouts.Decode([]byte(`{"payout_id":"po-1","payee_id":"pe-1","amount_cents":1250}`))
	if err != nil || p != (payouts.Payout{PayoutID: "po-1", PayeeID: "pe-1", AmountCents: 1250}) || payouts.Key(p) != "payout:po-1" {
		t.Fatalf("Decode = %+v, %v", p, err)
	}
	for body, want := range map[string]string{
		`{"payout_id":"po-1","payee_id":"pe-1","amount_cents":0}`:                   "amount_cents: must be positive",
		`{"payout_id":"po-1","payee_id":"pe-1","amount_cents":12.5}`:                "amount_cents",
		`{"payout_id":"po-1","payee_id":"pe-1","amount_cents":1000000001}`:          "amount_cents",
		`{"payout_id":"po-1","payee_id":"payout#po-2","amount_cents":1}`:            "payee_id: must not begin with",
		`{"payout_id":"po-1","amount_cents":1}`:                                     "payee_id: missing",
		`{"payout_id":"po-1","payee_id":"pe-1","amount_cents":1,"iban":"DE00"}`:     `"iban": unknown field`,
		`{"payout_id":"po-1","payee_id":"pe-1","amount_cents":1,"payee_id":"pe-2"}`: "payee_id",
		`{"payout_id":"po-1","payee_id":`:                                           "body is not valid JSON",
	} {
		_, err := payouts.Decode([]byte(body))
		if !errors.Is(err, payouts.ErrInvalidPayout) || !errors.Is(err, example.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%s) = %v, want an invalid payout naming %q", body, err, want)
		}
	}
}

// FuzzDecode runs its seeds in `go test`; `go test -fuzz FuzzDecode` explores beyond
// them. Decode never panics, and keeps exampletest.CheckDecoded's properties within the
// limits.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"payout_id":"po-1","payee_id":"pe-1","amount_cents":1250}`))
	f.Add([]byte(`{"amount_cents":1,"payee_id":"Zahlungsempf\u00e4nger","payout_id":"p"}`))
	f.Add([]byte(`{"payout_id":"p","payee_id":"payout#x","amount_cents":1}`))
	f.Add([]byte(`{"payout_id":"p","payee_id":"e","amount_cents":1e3}`))
	f.Add([]byte(`{"payout_id":"p","payee_id":"e","amount_cents":1}}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		exampletest.CheckDecoded(t, payouts.Decode, payouts.ErrInvalidPayout, body, func(p payouts.Payout) error {
			if p.AmountCents <= 0 || p.AmountCents > payouts.MaxAmountCents || p.PayoutID == "" || p.PayeeID == "" ||
				len(p.PayoutID) > payouts.MaxIDBytes || len(p.PayeeID) > payouts.MaxIDBytes || strings.HasPrefix(p.PayeeID, payouts.EntryPrefix) {
				return errors.New("outside the limits")
			}
			return nil
		})
	})
}
