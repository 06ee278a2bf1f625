package ledger_test

import (
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// TestDecodeTruncatedBody: a body cut off anywhere, inside a value included, is
// reported as not valid JSON, without naming the field where the cut happened.
func TestDecodeTruncatedBody(t *testing.T) {
	exampletest.CheckTruncated(t, ledger.Decode, ledger.ErrInvalidPayment,
		`{"payment_id":"pay-1","account_id":"acct-1","amount_cents":1250,"currency":"EUR"}`)
}
