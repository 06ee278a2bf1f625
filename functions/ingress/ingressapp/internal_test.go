package ingressapp

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// TestDeadLetteredFollowsIdem pins how a FAILED, retryable record tells a message the
// consumer dead-lettered (a business rule's refusal, explained or not; a request
// DynamoDB refused as invalid) from one a redelivery retries: on the texts idem's own
// errors give, wrapped as the consumer stores them.
func TestDeadLetteredFollowsIdem(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&idem.WriteConditionError{Explained: true, Reason: "insufficient stock: sku s-1 has 3"}, true},
		{fmt.Errorf("idem: complete payments#h:1234: %w", &idem.WriteConditionError{Index: 2, Reason: "ConditionalCheckFailed"}), true},
		{fmt.Errorf("idem: complete payments#h:1234: %w: item too large", idem.ErrInvalidRequest), true},
		{errors.New("lease expired"), false},
		{fmt.Errorf("idem: acquire: %w", errors.New("ThrottlingException")), false},
		{errors.New("idem: handler panicked: boom"), false},
	} {
		if got := deadLettered(c.err.Error()); got != c.want {
			t.Errorf("%q: dead-lettered %v, want %v", c.err, got, c.want)
		}
	}
}

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
