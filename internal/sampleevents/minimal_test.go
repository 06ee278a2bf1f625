package sampleevents_test

import (
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest/minimal"
	"github.com/idemgo/sqs-lambda-consumer/internal/sampleevents"
)

// TestRefusesAnExampleWithoutTraffic: the generator refuses the smallest example the
// contract allows (internal/exampletest/minimal: no example.Traffic) with the reason
// every tool gives (TestToolsSayWhatIsMissing in minimal).
func TestRefusesAnExampleWithoutTraffic(t *testing.T) {
	const want = `sample events: example "minimal" has no traffic generator (implement example.Traffic)`
	if _, err := sampleevents.Render(minimal.Example{}, sampleevents.DefaultSeed); err == nil || err.Error() != want {
		t.Errorf("sample events: %v, want %q", err, want)
	}
}
