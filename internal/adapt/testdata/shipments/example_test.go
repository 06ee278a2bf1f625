package shipments_test

import (
	"math/rand/v2"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/shipments"
)

// TestTraffic: every message of the traffic decodes to itself with its key and group.
func TestTraffic(t *testing.T) {
	ex := shipments.Example{}
	for _, m := range ex.Traffic(rand.New(rand.NewPCG(1, 2)), "r", 20, 3) {
		got, err := ex.Decode([]byte(m.Body))
		if err != nil || got != m {
			t.Errorf("Decode(%s) = %+v, %v; want %+v", m.Body, got, err, m)
		}
	}
}
