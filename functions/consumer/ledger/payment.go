package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
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
	if !utf8.Valid(body) {
		return Payment{}, invalid("body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return Payment{}, invalid("body is not a JSON object")
	}
	seen := make(map[string]bool, 4)
	for dec.More() {
		tok, err := dec.Token()
		name, ok := tok.(string)
		if err != nil || !ok {
			return Payment{}, invalid("body is not valid JSON")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return Payment{}, invalid("body is not valid JSON") // cut off or broken: no field to blame
		}
		if seen[name] {
			return Payment{}, invalid("%s: duplicate field", fieldName(name))
		}
		seen[name] = true
		switch name {
		case "payment_id":
			p.PaymentID, err = decodeID(name, raw)
		case "account_id":
			p.AccountID, err = decodeID(name, raw)
			if err == nil && strings.HasPrefix(p.AccountID, EntryPrefix) {
				err = invalid("account_id: must not begin with %q (reserved for journal entries)", EntryPrefix)
			}
		case "amount_cents":
			p.AmountCents, err = decodeAmount(name, raw)
		case "currency":
			p.Currency, err = decodeCurrency(name, raw)
		default:
			err = invalid("%s: unknown field", fieldName(name))
		}
		if err != nil {
			return Payment{}, err
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return Payment{}, invalid("body is not valid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return Payment{}, invalid("data after the JSON object")
	}
	for _, f := range []string{"payment_id", "account_id", "amount_cents", "currency"} {
		if !seen[f] {
			return Payment{}, invalid("%s: missing", f)
		}
	}
	return p, nil
}

// fieldName quotes an unknown field's name for an error message, cut to a sane length.
func fieldName(name string) string {
	switch name {
	case "payment_id", "account_id", "amount_cents", "currency":
		return name
	}
	if len(name) > 40 {
		name = strings.ToValidUTF8(name[:40], "") + "..."
	}
	return strconv.Quote(name)
}

func decodeID(field string, raw json.RawMessage) (string, error) {
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", invalid("%s: must be a string", field)
	}
	switch {
	case s == "":
		return "", invalid("%s: must not be empty", field)
	case len(s) > MaxIDBytes:
		return "", invalid("%s: longer than %d bytes", field, MaxIDBytes)
	case !printable(s):
		return "", invalid("%s: must be printable characters without leading or trailing spaces", field)
	}
	return s, nil
}

// printable rejects control and format characters, U+FFFD (what an escaped lone
// surrogate such as "\ud800" decodes to) and surrounding spaces, so that two IDs that
// look the same are the same.
func printable(s string) bool {
	if strings.TrimSpace(s) != s {
		return false
	}
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func decodeAmount(field string, raw json.RawMessage) (int64, error) {
	s := string(raw)
	switch {
	case s[0] == '-':
		return 0, invalid("%s: must be positive", field)
	case s[0] < '0' || s[0] > '9':
		return 0, invalid("%s: must be a JSON integer", field)
	case strings.ContainsAny(s, ".eE"):
		return 0, invalid("%s: must be an integer in minor units, without fraction or exponent", field)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil || n > MaxAmountCents:
		// ParseInt fails only on overflow here: the token is all digits.
		return 0, invalid("%s: too large (limit %d)", field, int64(MaxAmountCents))
	case n == 0:
		return 0, invalid("%s: must be positive", field)
	}
	return n, nil
}

func decodeCurrency(field string, raw json.RawMessage) (string, error) {
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", invalid("%s: must be a string", field)
	}
	if !slices.Contains(Currencies, s) {
		return "", invalid("%s: must be one of %s", field, strings.Join(Currencies, ", "))
	}
	return s, nil
}

// Key is the idempotency key producers give a payment: "payment:" + payment_id. The
// consumer reads the key from the message, never from here; producers and tools use it.
func Key(p Payment) string { return "payment:" + p.PaymentID }
