package cli

import (
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
)

// UseExamples makes idemctl know exs instead of the build's examples until the test
// ends: a test's own message type. The test must not run in parallel.
func UseExamples(t testing.TB, exs []example.Example) {
	old := examples
	examples = exs
	t.Cleanup(func() { examples = old })
}
