package ingressapp

import (
	"strings"
	"testing"
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
