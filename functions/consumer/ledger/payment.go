package ledger

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example/strict"
)

// Payment is the message this example consumes. Replace it with your own message.
type Payment struct {
	PaymentID   string `json:"payment_id"`
	AccountID   string `json:"account_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// Currencies lists the accepted ISO 4217 codes, upper case. Edit it to suit.
var Currencies = []string{"EUR", "USD", "GBP", "JPY", "CHF"}

// Limits of a valid Payment.
const (
	// MaxAmountCents is the largest accepted amount: 10 billion currency units.
	MaxAmountCents = 1_000_000_000_000
	// MaxIDBytes bounds payment_id and account_id.
	MaxIDBytes = 128
)

// ErrInvalidPayment is wrapped by every validation error of Decode; it wraps
// example.ErrInvalid. Such a message can
// never succeed, so the handler returns it as an idem.Permanent error.
var ErrInvalidPayment = example.NewInvalid("ledger: invalid payment")

// invalid returns a validation error. Messages name the field but never echo its value:
// they end up in logs, in the idempotency record and on the DLQ message.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidPayment, fmt.Sprintf(format, args...))
}

// decoder decodes a payment's fields, reported missing in this order.
var decoder = strict.Decoder{
	Fields:  []string{"payment_id", "account_id", "amount_cents", "currency"},
	Invalid: func(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidPayment, msg) },
}

// Decode parses and validates a message body. It is strict on purpose, because a
// lenient parser turns producer bugs into wrong balances:
//   - the body is one JSON object in valid UTF-8, with nothing after it;
//   - unknown and duplicate fields are rejected: an unknown field is a schema violation
//     (a producer on a newer schema, or a typo such as "amount"), and with a duplicate
//     field two parsers could disagree about which value counts;
//   - amount_cents is a positive integer written as digits only, at most MaxAmountCents:
//     12.5, "12", 1e3 and 12.0 are refused, since a producer writing them uses floats,
//     which lose cents;
//   - payment_id and account_id are non-empty strings of printable characters, at most
//     MaxIDBytes bytes, without leading or trailing spaces;
//   - currency is one of Currencies.
//
// Every error wraps ErrInvalidPayment and names the field.
func Decode(body []byte) (Payment, error) {
	var p Payment
	err := decoder.Object(body, func(name string, raw json.RawMessage) (err error) {
		switch name {
		case "payment_id":
			p.PaymentID, err = decoder.ID(name, raw, MaxIDBytes)
		case "account_id":
			p.AccountID, err = decoder.ID(name, raw, MaxIDBytes)
			if err == nil && strings.HasPrefix(p.AccountID, EntryPrefix) {
				err = invalid("account_id: must not begin with %q (reserved for journal entries)", EntryPrefix)
			}
		case "amount_cents":
			p.AmountCents, err = decoder.PositiveInt(name, raw, MaxAmountCents, "an integer in minor units")
		case "currency":
			p.Currency, err = decodeCurrency(name, raw)
		}
		return err
	})
	if err != nil {
		return Payment{}, err
	}
	return p, nil
}

func decodeCurrency(field string, raw json.RawMessage) (string, error) {
	s, err := decoder.String(field, raw)
	if err != nil {
		return "", err
	}
	if !slices.Contains(Currencies, s) {
		return "", invalid("%s: must be one of %s", field, strings.Join(Currencies, ", "))
	}
	return s, nil
}

// Key is the idempotency key producers give a payment: "payment:" + payment_id. The
// consumer reads the key from the message, never from here; producers and tools use it.
func Key(p Payment) string { return "payment:" + p.PaymentID }
