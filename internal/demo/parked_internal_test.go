package demo

import (
	"fmt"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
)

// TestParkedBadMessages: of the bodies SQS parked in the DLQ, a bad message no consumer
// dead-lettered goes back (once, however many copies were parked); one a consumer
// dead-lettered before SQS parked it again does not (sending it back would dead-letter
// it a second time), even when another bad message with the same reason went to the DLQ
// (the inventory's two "quantity: must be positive"); valid bodies, and a refused one
// that decodes, are told apart by their text.
func TestParkedBadMessages(t *testing.T) {
	bads := []example.Bad{
		{Message: example.Message{Body: `{"account_id":"a"}`}, Reason: "payment_id: missing"},
		{Message: example.Message{Body: `{"payment_id":"p-2"`}, Reason: "body is not valid JSON"},
		{Message: example.Message{Body: `{"payment_id":"p-3","currency":"EUR"}`}, Reason: "does not match the account's GBP"},
		{Message: example.Message{Body: `{"order_id":"o-4","quantity":0}`}, Reason: "quantity: must be positive"},
		{Message: example.Message{Body: `{"order_id":"o-5","quantity":-1}`}, Reason: "quantity: must be positive"},
	}
	lettered := []string{bads[0].Body, bads[3].Body} // dead-lettered by a consumer, with their reasons
	parked := []string{bads[0].Body, `{"payment_id":"p-9"}`, bads[1].Body, bads[2].Body, bads[1].Body, bads[4].Body}
	send, others := parkedBadMessages(bads, parked, lettered)
	if got, want := fmt.Sprint(send), "[1 2 4]"; got != want {
		t.Errorf("bad messages to send back: %s, want %s (not the one dead-lettered already, the JSON one once, the second with a shared reason)", got, want)
	}
	if got, want := fmt.Sprint(others), `[{"payment_id":"p-9"}]`; got != want {
		t.Errorf("other parked bodies: %s, want %s", got, want)
	}
}
