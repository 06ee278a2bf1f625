package payouts

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example/strict"
)

// Payout is the message this example consumes: amount_cents paid to a payee.
type Payout struct {
	PayoutID    string `json:"payout_id"`
	PayeeID     string `json:"payee_id"`
	AmountCents int64  `json:"amount_cents"`
}

// Limits of a valid Payout.
const (
	// MaxAmountCents is the largest accepted amount: 10 million currency units.
	MaxAmountCents = 1_000_000_000
	// MaxIDBytes bounds payout_id and payee_id.
	MaxIDBytes = 128
)

// ErrInvalidPayout is wrapped by every validation error of Decode; it wraps
// example.ErrInvalid. Such a message can never succeed: the handler returns it as an
// idem.Permanent error.
var ErrInvalidPayout = example.NewInvalid("payouts: invalid payout")

var decoder = strict.Decoder{
	Fields:  []string{"payout_id", "payee_id", "amount_cents"},
	Invalid: func(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidPayout, msg) },
}

// Decode parses and validates a payout as strictly as the ledger's Decode: one JSON
// object, no unknown, duplicate or missing field, ids of printable characters (a payee
// id must not begin with EntryPrefix), amount_cents a positive integer of digits only, at
// most MaxAmountCents. Every error wraps ErrInvalidPayout and names the field.
func Decode(body []byte) (Payout, error) {
	var p Payout
	err := decoder.Object(body, func(name string, raw json.RawMessage) (err error) {
		switch name {
		case "payout_id":
			p.PayoutID, err = decoder.ID(name, raw, MaxIDBytes)
		case "payee_id":
			p.PayeeID, err = decoder.ID(name, raw, MaxIDBytes)
			if err == nil && strings.HasPrefix(p.PayeeID, EntryPrefix) {
				err = fmt.Errorf("%w: payee_id: must not begin with %q (reserved for journal entries)", ErrInvalidPayout, EntryPrefix)
			}
		case "amount_cents":
			p.AmountCents, err = decoder.PositiveInt(name, raw, MaxAmountCents, "an integer in minor units")
		}
		return err
	})
	if err != nil {
		return Payout{}, err
	}
	return p, nil
}

// Key is the idempotency key producers give a payout: "payout:" + payout_id. The
// consumer reads the key from the message; the gateway gets it in the Idempotency-Key
// header.
func Key(p Payout) string { return "payout:" + p.PayoutID }
