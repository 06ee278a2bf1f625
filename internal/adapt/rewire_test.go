package adapt_test

import (
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/internal/adapt"
)

func TestRewire(t *testing.T) {
	src := `package wiring

import (
	"example.com/m/functions/consumer/example"
	"example.com/m/functions/consumer/inventory"
	"example.com/m/functions/consumer/ledger"
)

var Examples = []example.Example{ledger.Example{}, inventory.Example{}}
`
	out, err := adapt.Rewire([]byte(src), "example.com/m", "inventory")
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	if strings.Contains(got, "ledger") || !strings.Contains(got, "var Examples = []example.Example{inventory.Example{}}") ||
		!strings.Contains(got, `"example.com/m/functions/consumer/example"`) || !strings.Contains(got, `"example.com/m/functions/consumer/inventory"`) {
		t.Errorf("rewired:\n%s", got)
	}
	if _, err := adapt.Rewire([]byte("package wiring\n"), "example.com/m", "inventory"); err == nil {
		t.Error("a wiring file without an Examples line was rewired")
	}
}
