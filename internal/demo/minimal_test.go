package demo_test

import (
	"context"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest/minimal"
)

// TestRefusesAnExampleWithoutTraffic: the demo refuses the smallest example the contract
// allows (internal/exampletest/minimal: no example.Traffic) with the reason every tool
// gives (TestToolsSayWhatIsMissing in minimal).
func TestRefusesAnExampleWithoutTraffic(t *testing.T) {
	ex := minimal.Example{}
	const want = `demo: example "minimal" has no traffic generator (implement example.Traffic)`
	_, err := demo.Run(context.Background(), demo.Options{Env: map[string]string{example.Var: "minimal"}, Examples: []example.Example{ex}})
	if err == nil || err.Error() != want {
		t.Errorf("demo: %v, want %q", err, want)
	}
}
