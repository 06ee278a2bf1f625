package demo

import (
	"math/rand/v2"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
	"github.com/idemgo/sqs-lambda-consumer/internal/dedupgroup"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// TestDeduplicationIDsKeepTheirGroup: the demo's traffic (the main stream and the
// duplicate storm, with every kind of duplicate) sends each deduplication id with one
// group only, so the input queue's per-group deduplication (high-throughput FIFO) drops
// every in-window duplicate that queue-wide deduplication dropped.
func TestDeduplicationIDsKeepTheirGroup(t *testing.T) {
	for _, ex := range wiring.Examples {
		t.Run(ex.Name(), func(t *testing.T) {
			gen := exampletest.Traffic(t, ex)
			rng := rand.New(rand.NewPCG(12, 12))
			ps := gen.Traffic(rng, "dg", 400, 7)
			deduplicationIDsKeepTheirGroup(t, rng, ps, badMessages(gen.Bad("dg", ps)))
		})
	}
}

func deduplicationIDsKeepTheirGroup(t *testing.T, rng *rand.Rand, ps []example.Message, bads []Message) {
	var all []Message
	first, second, late, bad := stream(rng, ps, bads)
	all = append(append(append(append(all, first...), second...), late...), bad...)
	st := stormStream(rng, ps, 6)
	all = append(append(append(append(all, st.first...), st.second...), st.afterDone...), st.afterTTL...)
	var m dedupgroup.Map
	repeats := 0
	for _, msg := range all {
		if err := m.Add("input", msg.DedupID, msg.Group); err != nil {
			t.Error(err)
		}
	}
	repeats = len(all) - m.Len()
	// The check means something only if ids repeat: in-window duplicates do.
	if repeats == 0 {
		t.Fatalf("%d messages and no repeated deduplication id", len(all))
	}
	t.Logf("%d messages, %d repeated deduplication ids, each with one group", len(all), repeats)
}
