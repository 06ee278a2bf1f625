package idem

import (
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// TestRedactKey: what errors and the dead letters' reasons show of a key: nothing of it
// (not even an unkeyed hash, which would let anyone check a guess), but `""` for no key
// at all, so that a handler that left Result.HomeKey empty reads as such in ErrHomeKey's
// reason; of a record key, its scope alone.
func TestRedactKey(t *testing.T) {
	const key = "jane.doe@example.com"
	if got := redactKey(""); got != `""` {
		t.Errorf(`redactKey("") = %q, want ""`, got)
	}
	if got := redactKey(key); got != "…" || strings.Contains(got, "jane") || strings.Contains(got, HashKey(key)) {
		t.Errorf("redactKey = %q, want … (neither the key nor its hash)", got)
	}
	if got := persistence.Redact("payments#" + key); got != "payments#…" {
		t.Errorf("redact = %q, want the scope alone", got)
	}
	if got := persistence.Redact(key); got != "…" {
		t.Errorf("redact of a key without a scope = %q, want …", got)
	}
}
