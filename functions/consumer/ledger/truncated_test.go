package ledger_test

import (
	"errors"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
)

// TestDecodeTruncatedBody: a body cut off anywhere, inside a value included, is
// reported as not valid JSON, without naming the field where the cut happened.
func TestDecodeTruncatedBody(t *testing.T) {
	full := `{"payment_id":"pay-1","account_id":"acct-1","amount_cents":1250,"currency":"EUR"}`
	want := ledger.ErrInvalidPayment.Error() + ": body is not valid JSON"
	for cut := 2; cut < len(full); cut++ {
		body := full[:cut]
		_, err := ledger.Decode([]byte(body))
		if !errors.Is(err, ledger.ErrInvalidPayment) || err.Error() != want {
			t.Errorf("Decode(%q) = %v, want %q", body, err, want)
		}
	}
}
