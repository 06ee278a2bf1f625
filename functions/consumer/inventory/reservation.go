package inventory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
)

// Reservation is the message this example consumes: quantity units of sku reserved
// for an order.
type Reservation struct {
	OrderID  string `json:"order_id"`
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// Limits of a valid Reservation.
const (
	// MaxQuantity is the largest accepted quantity.
	MaxQuantity = 1_000_000
	// MaxIDBytes bounds order_id and sku.
	MaxIDBytes = 128
)

// ErrInvalidReservation is wrapped by every validation error of Decode; it wraps
// example.ErrInvalid. Such a message can never succeed, so the handler returns it as an
// idem.Permanent error.
var ErrInvalidReservation = example.NewInvalid("inventory: invalid reservation")

// invalid returns a validation error. Messages name the field but never echo its value:
// they end up in logs, in the idempotency record and on the DLQ message.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidReservation, fmt.Sprintf(format, args...))
}

// fields are the fields of a reservation, in the order Decode reports them missing.
var fields = []string{"order_id", "sku", "quantity"}

// Decode parses and validates a message body, as strictly as the ledger's Decode:
//   - the body is one JSON object in valid UTF-8, with nothing after it;
//   - unknown and duplicate fields are rejected;
//   - quantity is a positive integer written as digits only, at most MaxQuantity
//     (2.0, "2" and 1e1 are refused);
//   - order_id and sku are non-empty strings of printable characters, at most
//     MaxIDBytes bytes, without leading or trailing spaces; a sku must not begin with
//     EntryPrefix, which names the journal entries of the stock table.
//
// Every error wraps ErrInvalidReservation and names the field.
func Decode(body []byte) (Reservation, error) {
	var r Reservation
	if !utf8.Valid(body) {
		return Reservation{}, invalid("body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return Reservation{}, invalid("body is not a JSON object")
	}
	seen := make(map[string]bool, len(fields))
	for dec.More() {
		tok, err := dec.Token()
		name, ok := tok.(string)
		if err != nil || !ok {
			return Reservation{}, invalid("body is not valid JSON")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return Reservation{}, invalid("body is not valid JSON") // cut off or broken: no field to blame
		}
		if seen[name] {
			return Reservation{}, invalid("%s: duplicate field", fieldName(name))
		}
		seen[name] = true
		switch name {
		case "order_id":
			r.OrderID, err = decodeID(name, raw)
		case "sku":
			r.SKU, err = decodeID(name, raw)
			if err == nil && strings.HasPrefix(r.SKU, EntryPrefix) {
				err = invalid("sku: must not begin with %q (reserved for journal entries)", EntryPrefix)
			}
		case "quantity":
			r.Quantity, err = decodeQuantity(name, raw)
		default:
			err = invalid("%s: unknown field", fieldName(name))
		}
		if err != nil {
			return Reservation{}, err
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return Reservation{}, invalid("body is not valid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return Reservation{}, invalid("data after the JSON object")
	}
	for _, f := range fields {
		if !seen[f] {
			return Reservation{}, invalid("%s: missing", f)
		}
	}
	return r, nil
}

// fieldName quotes an unknown field's name for an error message, cut to a sane length.
func fieldName(name string) string {
	for _, f := range fields {
		if name == f {
			return name
		}
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
// surrogate such as "\ud800" decodes to) and surrounding spaces, so that two ids that
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

func decodeQuantity(field string, raw json.RawMessage) (int64, error) {
	s := string(raw)
	switch {
	case s[0] == '-':
		return 0, invalid("%s: must be positive", field)
	case s[0] < '0' || s[0] > '9':
		return 0, invalid("%s: must be a JSON integer", field)
	case strings.ContainsAny(s, ".eE"):
		return 0, invalid("%s: must be an integer, without fraction or exponent", field)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil || n > MaxQuantity:
		// ParseInt fails only on overflow here: the token is all digits.
		return 0, invalid("%s: too large (limit %d)", field, int64(MaxQuantity))
	case n == 0:
		return 0, invalid("%s: must be positive", field)
	}
	return n, nil
}

// Key is the idempotency key producers give a reservation: "reservation:" + order_id.
// The consumer reads the key from the message, never from here; producers and tools
// use it.
func Key(r Reservation) string { return "reservation:" + r.OrderID }
