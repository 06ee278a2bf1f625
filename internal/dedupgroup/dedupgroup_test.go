package dedupgroup_test

import (
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/internal/dedupgroup"
)

func TestMap(t *testing.T) {
	var m dedupgroup.Map
	for _, c := range []struct {
		queue, id, group string
		ok               bool
	}{
		{"q", "a", "g1", true},
		{"q", "a", "g1", true},  // the same pair again
		{"q", "b", "g2", true},  // another id
		{"r", "a", "g2", true},  // the same id on another queue
		{"q", "a", "g2", false}, // the same id with another group
	} {
		if err := m.Add(c.queue, c.id, c.group); (err == nil) != c.ok {
			t.Errorf("Add(%s, %s, %s) = %v, want ok=%v", c.queue, c.id, c.group, err, c.ok)
		}
	}
	if m.Len() != 3 {
		t.Errorf("Len %d, want 3", m.Len())
	}
}
