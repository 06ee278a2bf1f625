package demo

import (
	"fmt"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
)

// TestParkedBadMessages: of the bodies SQS parked in the DLQ, a bad message no consumer
// dead-lettered goes back (once, however many copies were parked); one a consumer
// dead-lettered for its reason before SQS parked it again does not (sending it back
// would dead-letter it a second time); valid bodies, and a refused one that decodes,
// are told apart by their text.
func TestParkedBadMessages(t *testing.T) {
	bads := []example.Bad{
		{Message: example.Message{Body: `{"account_id":"a"}`}, Reason: "payment_id: missing"},
		{Message: example.Message{Body: `{"payment_id":"p-2"`}, Reason: "body is not valid JSON"},
		{Message: example.Message{Body: `{"payment_id":"p-3","currency":"EUR"}`}, Reason: "does not match the account's GBP"},
	}
	reasons := []string{"permanent: ledger: invalid payment: payment_id: missing"}
	parked := []string{bads[0].Body, `{"payment_id":"p-9"}`, bads[1].Body, bads[2].Body, bads[1].Body}
	send, others := parkedBadMessages(bads, parked, reasons)
	if got, want := fmt.Sprint(send), "[1 2]"; got != want {
		t.Errorf("bad messages to send back: %s, want %s (not the one dead-lettered already, the JSON one once)", got, want)
	}
	if got, want := fmt.Sprint(others), `[{"payment_id":"p-9"}]`; got != want {
		t.Errorf("other parked bodies: %s, want %s", got, want)
	}
}
