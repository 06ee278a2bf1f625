package ingressapp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// TestSQSText: the characters SQS refuses in a message body are refused before anything
// is written.
func TestSQSText(t *testing.T) {
	for s, ok := range map[string]bool{
		"{\"a\":\"tab\there\"}\r\n": true, "é ✓ 𝄞": true, "\u0000": false, "\u001f": false, "\uFFFE": false, "\uFFFF": false, "\uFFFD": true,
	} {
		if err := sqsText([]byte(s)); (err == nil) != ok {
			t.Errorf("%q: %v, want ok=%v", s, err, ok)
		}
	}
}

// TestValidKey: the keys the ingress takes.
func TestValidKey(t *testing.T) {
	for key, ok := range map[string]bool{
		"8e03978e-40d5-43e8-bc93-6894a57f9324": true, "payment:pay-1": true, "a.b_c~d@e+f=g": true,
		strings.Repeat("k", MaxKeyLength): true, strings.Repeat("k", MaxKeyLength+1): false,
		"": false, "a b": false, "a,b": false, "a/b": false, "a%20b": false, `"a"`: false, "é": false, "a?b": false, "a#b": false,
	} {
		if err := ValidKey(key); (err == nil) != ok {
			t.Errorf("%q: %v, want ok=%v", key, err, ok)
		}
	}
}

// TestStatusOf: each row of docs/ingress.md's table of statuses, from the consumer's
// record to the answer, every field compared: the category (stored, or read from the
// record's state when it has none), the public reason and the request id, never the
// error itself.
func TestStatusOf(t *testing.T) {
	const key, hash, owner = "pay-1", "fp-1", "req-7"
	internal := "ConditionalCheckFailed on table ledger-prod, account 123456789012"
	loc := RequestsPath + "/pay-1"
	for _, c := range []struct {
		name string
		rec  *idem.Record
		want Status
	}{
		{"no record", nil, Status{Key: key, Status: StatusAccepted, Location: loc}},
		{"held", &idem.Record{Status: idem.StatusInProgress, PayloadHash: hash, Attempt: 2, Owner: owner},
			Status{Key: key, Status: StatusInProgress, Attempts: 2, Location: loc}},
		{"reaped", &idem.Record{Status: idem.StatusFailed, Retryable: true, Error: idem.ReasonLeaseExpired, PayloadHash: hash, Attempt: 1, Owner: owner},
			Status{Key: key, Status: StatusInProgress, Category: string(idem.CategoryRetrying), RequestID: owner, Attempts: 1, Location: loc}},
		{"retrying, stored", &idem.Record{Status: idem.StatusFailed, Retryable: true, Error: internal, Category: idem.CategoryRetrying, PayloadHash: hash, Attempt: 2, Owner: owner},
			Status{Key: key, Status: StatusInProgress, Category: string(idem.CategoryRetrying), RequestID: owner, Attempts: 2, Location: loc}},
		{"completed, JSON", &idem.Record{Status: idem.StatusCompleted, PayloadHash: hash, Attempt: 3, Response: []byte(`{"ok":true}`)},
			Status{Key: key, Status: StatusCompleted, Response: []byte(`{"ok":true}`), Attempts: 3, Location: loc}},
		{"completed, text", &idem.Record{Status: idem.StatusCompleted, PayloadHash: hash, Attempt: 1, Response: []byte("done")},
			Status{Key: key, Status: StatusCompleted, Response: []byte(`"done"`), Attempts: 1, Location: loc}},
		{"completed, bytes", &idem.Record{Status: idem.StatusCompleted, PayloadHash: hash, Attempt: 1, Response: []byte{0xff, 0x00}},
			Status{Key: key, Status: StatusCompleted, Response: []byte(`"/wA="`), ResponseEncoding: "base64", Attempts: 1, Location: loc}},
		{"completed, empty", &idem.Record{Status: idem.StatusCompleted, PayloadHash: hash, Attempt: 1},
			Status{Key: key, Status: StatusCompleted, Attempts: 1, Location: loc}},
		{"failed for good, no category stored", &idem.Record{Status: idem.StatusFailed, Error: internal, PayloadHash: hash, Attempt: 1, Owner: owner},
			Status{Key: key, Status: StatusFailed, Category: string(idem.CategoryInvalid), RequestID: owner, Attempts: 1, Location: loc}},
		{"failed for good", &idem.Record{Status: idem.StatusFailed, Error: internal, Category: idem.CategoryInvalid, Public: "bad amount", PayloadHash: hash, Attempt: 1, Owner: owner},
			Status{Key: key, Status: StatusFailed, Category: string(idem.CategoryInvalid), Reason: "bad amount", RequestID: owner, Attempts: 1, Location: loc}},
		{"refused, redrivable", &idem.Record{Status: idem.StatusFailed, Retryable: true, Error: internal, Category: idem.CategoryRefused, Public: "currency mismatch", PayloadHash: hash, Attempt: 1, Owner: owner},
			Status{Key: key, Status: StatusFailed, Category: string(idem.CategoryRefused), Reason: "currency mismatch", RequestID: owner, Redrivable: true, Attempts: 1, Location: loc}},
		{"invalid, redrivable", &idem.Record{Status: idem.StatusFailed, Retryable: true, Error: internal, Category: idem.CategoryInvalid, PayloadHash: hash, Attempt: 1, Owner: owner},
			Status{Key: key, Status: StatusFailed, Category: string(idem.CategoryInvalid), RequestID: owner, Redrivable: true, Attempts: 1, Location: loc}},
		{"another body", &idem.Record{Status: idem.StatusCompleted, PayloadHash: "fp-2", Attempt: 1, Response: []byte(`{}`), Owner: owner},
			Status{Key: key, Status: StatusFailed, Category: string(idem.CategoryInvalid), Reason: payloadMismatch, Attempts: 1, Location: loc}},
		{"no fingerprint stored", &idem.Record{Status: idem.StatusCompleted, Attempt: 1, Response: []byte(`{}`)},
			Status{Key: key, Status: StatusCompleted, Response: []byte(`{}`), Attempts: 1, Location: loc}},
	} {
		got := statusOf(key, hash, c.rec)
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", c.want) {
			t.Errorf("%s:\n  got  %+v\n  want %+v", c.name, got, c.want)
		}
		if strings.Contains(fmt.Sprintf("%+v", got), internal) {
			t.Errorf("%s: the status shows the error itself: %+v", c.name, got)
		}
		// Only accepted and in_progress change by themselves.
		if final := got.Status != StatusAccepted && got.Status != StatusInProgress; got.Final() != final {
			t.Errorf("%s: Final() = %v, want %v", c.name, got.Final(), final)
		}
	}
}
