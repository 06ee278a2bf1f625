package inventory

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example/strict"
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

// decoder decodes a reservation's fields, reported missing in this order.
var decoder = strict.Decoder{
	Fields:  []string{"order_id", "sku", "quantity"},
	Invalid: func(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidReservation, msg) },
}

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
	err := decoder.Object(body, func(name string, raw json.RawMessage) (err error) {
		switch name {
		case "order_id":
			r.OrderID, err = decoder.ID(name, raw, MaxIDBytes)
		case "sku":
			r.SKU, err = decoder.ID(name, raw, MaxIDBytes)
			if err == nil && strings.HasPrefix(r.SKU, EntryPrefix) {
				err = invalid("sku: must not begin with %q (reserved for journal entries)", EntryPrefix)
			}
		case "quantity":
			r.Quantity, err = decoder.PositiveInt(name, raw, MaxQuantity, "an integer")
		}
		return err
	})
	if err != nil {
		return Reservation{}, err
	}
	return r, nil
}

// Key is the idempotency key producers give a reservation: "reservation:" + order_id.
// The consumer reads the key from the message, never from here; producers and tools
// use it.
func Key(r Reservation) string { return "reservation:" + r.OrderID }
