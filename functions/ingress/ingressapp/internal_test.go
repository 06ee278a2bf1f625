package ingressapp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
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
		// The bounds of each range, and the characters just past them.
		"azAZ09": true, "`": false, "{": false, "[": false, "/": false, ";": false,
	} {
		if err := ValidKey(key); (err == nil) != ok {
			t.Errorf("%q: %v, want ok=%v", key, err, ok)
		}
	}
	if err := ValidKey("ab/c"); err == nil || !strings.HasSuffix(err.Error(), "at position 3") {
		t.Errorf("ab/c: %v, want the position of / (3)", err)
	}
}

// TestStatusOf: each row of docs/ingress.md's table of statuses, from the consumer's
// record to the answer, every field compared: a failure's category, the reason the
// example chose to show and the request id, never the error itself.
func TestStatusOf(t *testing.T) {
	const key, hash, raw = "pay-1", "fp-1", "AccessDenied: arn:aws:iam::123456789012:role/consumer"
	loc := RequestsPath + "/pay-1"
	refused := (&idem.WriteConditionError{Explained: true, Reason: "currency EUR does not match the account's JPY"}).Error()
	for _, c := range []struct {
		name string
		rec  *persistence.Record
		want Status
	}{
		{"no record", nil, Status{Key: key, Status: StatusAccepted, Location: loc}},
		{"held", &persistence.Record{Status: persistence.StatusInProgress, PayloadHash: hash, Attempt: 2},
			Status{Key: key, Status: StatusInProgress, Attempts: 2, Location: loc}},
		{"reaped", &persistence.Record{Status: persistence.StatusFailed, Retryable: true, Error: reaper.ReasonLeaseExpired, PayloadHash: hash, Attempt: 1},
			Status{Key: key, Status: StatusInProgress, Category: string(persistence.CategoryRetrying), Attempts: 1, Location: loc}},
		{"throttled", &persistence.Record{Status: persistence.StatusFailed, Retryable: true, Error: raw, Category: persistence.CategoryRetrying, Owner: "req-7", PayloadHash: hash, Attempt: 1},
			Status{Key: key, Status: StatusInProgress, Category: string(persistence.CategoryRetrying), RequestID: "req-7", Attempts: 1, Location: loc}},
		{"completed, JSON", &persistence.Record{Status: persistence.StatusCompleted, PayloadHash: hash, Attempt: 3, Response: []byte(`{"ok":true}`)},
			Status{Key: key, Status: StatusCompleted, Response: []byte(`{"ok":true}`), Attempts: 3, Location: loc}},
		{"completed, text", &persistence.Record{Status: persistence.StatusCompleted, PayloadHash: hash, Attempt: 1, Response: []byte("done")},
			Status{Key: key, Status: StatusCompleted, Response: []byte(`"done"`), Attempts: 1, Location: loc}},
		{"completed, bytes", &persistence.Record{Status: persistence.StatusCompleted, PayloadHash: hash, Attempt: 1, Response: []byte{0xff, 0x00}},
			Status{Key: key, Status: StatusCompleted, Response: []byte(`"/wA="`), ResponseEncoding: "base64", Attempts: 1, Location: loc}},
		{"completed, empty", &persistence.Record{Status: persistence.StatusCompleted, PayloadHash: hash, Attempt: 1},
			Status{Key: key, Status: StatusCompleted, Attempts: 1, Location: loc}},
		{"failed for good", &persistence.Record{Status: persistence.StatusFailed, Error: "bad amount", Category: persistence.CategoryInvalid, Public: "amount_cents must be positive", Owner: "req-1", PayloadHash: hash, Attempt: 1},
			Status{Key: key, Status: StatusFailed, Category: string(persistence.CategoryInvalid), Reason: "amount_cents must be positive", RequestID: "req-1", Attempts: 1, Location: loc}},
		{"failed for good, before categories", &persistence.Record{Status: persistence.StatusFailed, Error: raw, PayloadHash: hash, Attempt: 1},
			Status{Key: key, Status: StatusFailed, Category: string(persistence.CategoryInvalid), Attempts: 1, Location: loc}},
		{"refused, redrivable", &persistence.Record{Status: persistence.StatusFailed, Retryable: true, Error: refused, Category: persistence.CategoryRefused, Public: "the payment's currency does not match the account's", Owner: "req-2", PayloadHash: hash, Attempt: 1},
			Status{Key: key, Status: StatusFailed, Category: string(persistence.CategoryRefused), Reason: "the payment's currency does not match the account's", RequestID: "req-2", Redrivable: true, Attempts: 1, Location: loc}},
		{"another body", &persistence.Record{Status: persistence.StatusCompleted, PayloadHash: "fp-2", Attempt: 1, Response: []byte(`{}`)},
			Status{Key: key, Status: StatusFailed, Category: string(persistence.CategoryInvalid), Reason: payloadMismatch, Attempts: 1, Location: loc}},
		{"no fingerprint stored", &persistence.Record{Status: persistence.StatusCompleted, Attempt: 1, Response: []byte(`{}`)},
			Status{Key: key, Status: StatusCompleted, Response: []byte(`{}`), Attempts: 1, Location: loc}},
	} {
		got := statusOf(key, hash, c.rec)
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", c.want) {
			t.Errorf("%s:\n  got  %+v\n  want %+v", c.name, got, c.want)
		}
		if strings.Contains(fmt.Sprintf("%+v", got), "AccessDenied") {
			t.Errorf("%s: the raw error reached the answer: %+v", c.name, got)
		}
		// Only accepted and in_progress change by themselves.
		if final := c.name != "no record" && c.name != "held" && c.name != "reaped" && c.name != "throttled"; got.Final() != final {
			t.Errorf("%s: Final() = %v, want %v", c.name, got.Final(), final)
		}
	}
}

// TestBase64BodyTitles: a body marked base64 is refused as too large on its decoded
// length's estimate only when the estimate passes the limit by more than base64's
// padding (3 bytes); within that, it is decoded, and one that does not decode is
// refused as such.
func TestBase64BodyTitles(t *testing.T) {
	a := &App{cfg: Config{MaxBodyBytes: 3000}} // divisible by 3: the estimate can be limit+3 exactly
	for n, title := range map[int]string{
		(3000 + 3) / 3 * 4: titleInvalidBody,  // estimate 3003: decoded, and it does not decode
		(3000 + 6) / 3 * 4: titleBodyTooLarge, // estimate 3006: refused before the decode
	} {
		_, ans, ok := a.body(LambdaFunctionURLRequest{Body: strings.Repeat("!", n), IsBase64Encoded: true})
		if ok || ans.problem == nil || ans.problem.Title != title {
			t.Errorf("%d characters that are no base64: %+v, want %q", n, ans.problem, title)
		}
	}
}

// TestHeaderPrefersTheLowerCaseName: of two entries that name one header in different
// cases (an event built by hand; function URLs give names in lower case), the lower-case
// one is read, every time.
func TestHeaderPrefersTheLowerCaseName(t *testing.T) {
	h := map[string]string{"idempotency-key": "k1", "Idempotency-Key": "k2", "IDEMPOTENCY-KEY": "k3"}
	for range 64 {
		if v, ok := header(h, KeyHeader); !ok || v != "k1" {
			t.Fatalf("header = %q, %v; want k1, the lower-case entry", v, ok)
		}
	}
}
