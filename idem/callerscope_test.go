package idem_test

import (
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// TestCallerScope: the caller's part of a CallerKey, and nothing of any other key, one
// that merely starts like one included.
func TestCallerScope(t *testing.T) {
	k := idem.CallerKey("arn:aws:iam::111122223333:role/alice", "pay~1")
	if got := idem.CallerScope(k); got == "" || !strings.HasPrefix(k, got) || strings.TrimPrefix(k, got) != "pay~1" {
		t.Errorf("CallerScope(%q) = %q, want all but the client's key", k, got)
	}
	for _, key := range []string{"pay-1", "", idem.CallerKeyPrefix, idem.CallerKeyPrefix + "short~x", idem.CallerKeyPrefix + strings.Repeat("a", 33)} {
		if got := idem.CallerScope(key); got != "" {
			t.Errorf("CallerScope(%q) = %q, want \"\"", key, got)
		}
	}
}
