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
	"example.com/m/functions/consumer/beta"
	"example.com/m/functions/consumer/alpha"
)

var Examples = []example.Example{alpha.Example{}, beta.Example{}}
`
	out, err := adapt.Rewire([]byte(src), "example.com/m", "beta")
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	if strings.Contains(got, "alpha") || !strings.Contains(got, "var Examples = []example.Example{beta.Example{}}") ||
		!strings.Contains(got, `"example.com/m/functions/consumer/example"`) || !strings.Contains(got, `"example.com/m/functions/consumer/beta"`) {
		t.Errorf("rewired:\n%s", got)
	}
	if _, err := adapt.Rewire([]byte("package wiring\n"), "example.com/m", "beta"); err == nil {
		t.Error("a wiring file without an Examples line was rewired")
	}
}
