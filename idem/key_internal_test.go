package idem

import (
	"strings"
	"testing"
)

// TestRedactKey: what errors and the dead letters' reasons show of a key: its short hash,
// never the key (which may hold personal data), and `""` for no key at all, so that a
// handler that left Result.HomeKey empty reads as such in ErrHomeKey's reason.
func TestRedactKey(t *testing.T) {
	if got := redactKey(""); got != `""` {
		t.Errorf(`redactKey("") = %q, want ""`, got)
	}
	got := redactKey("jane.doe@example.com")
	if got != "h:"+HashKey("jane.doe@example.com") || strings.Contains(got, "jane") {
		t.Errorf("redactKey = %q, want h: and the key's short hash", got)
	}
	if got := redact("payments#jane.doe@example.com"); got != "payments#h:"+HashKey("jane.doe@example.com") {
		t.Errorf("redact = %q, want the scope and the key's short hash", got)
	}
}
