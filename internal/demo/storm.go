package demo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
)

// The storm sends stormHead messages before the consumers start, then keeps the queue
// at most stormDepth deep.
const (
	stormHead  = 500
	stormDepth = 600
)

// storm is the traffic of the duplicate storm, by sending phase.
type storm struct {
	first     []Message // sent before the consumers start: the first half and its concurrent copies
	second    []Message // sent while they run: the second half and the in-run duplicates
	afterDone []Message // sent once everything before has been consumed
	afterTTL  []Message // consumed with the consumers' clock past the records' TTL
	// afterDelete is consumed once the records of its keys were deleted, as DynamoDB's
	// TTL deletes them (moto never does).
	afterDelete []Message
	kinds       map[string]int // extra deliveries by kind
}

// stormStream delivers every message 1 to maxDeliveries times: the original (dedup id
// derived from the key, as a producer sets it) and 0 to maxDeliveries-1 extra
// deliveries, each of a kind drawn from StormKinds.
func stormStream(rng *rand.Rand, ps []example.Message, maxDeliveries int) storm {
	st := storm{kinds: map[string]int{}}
	half := len(ps) / 2
	for i, p := range ps {
		phase := &st.second
		if i < half {
			phase = &st.first
		}
		*phase = append(*phase, original(p))
		for j := range rng.IntN(maxDeliveries) {
			kind := StormKinds[rng.IntN(len(StormKinds))]
			st.kinds[kind]++
			id := fmt.Sprintf("%d-%s", j, p.ID)
			switch kind {
			case KindSameDedupID:
				st.second = append(st.second, original(p))
			case KindNewDedupID:
				st.second = append(st.second, message(p, p.Group, "dup"+id))
			case KindConcurrent:
				// Another group, in the same phase as the original: another consumer may
				// receive it while the original's lease is held.
				*phase = append(*phase, message(p, p.Group+"-copy", "copy"+id))
			case KindAfterCompleted:
				st.afterDone = append(st.afterDone, message(p, p.Group, "done"+id))
			case KindAfterTTL:
				st.afterTTL = append(st.afterTTL, message(p, p.Group, "ttl"+id))
			case KindAfterDelete:
				st.afterDelete = append(st.afterDelete, message(p, p.Group, "del"+id))
			}
		}
	}
	return st
}

// latePhases plays the storm's last three kinds once the rest is consumed: duplicates of
// completed payments; duplicates consumed with the consumers' clock moved past the
// records' TTL (DynamoDB has not deleted them: TTL deletion takes up to days), which the
// consumers must treat as absent and the example's guard must stop; and duplicates
// consumed after their records were deleted (forget), as the TTL does in the end, which
// the guard must stop too, outbound message included. Each phase is sent while its consumers
// run (the paced send waits for them). It returns how many messages SQS accepted.
func latePhases(ctx context.Context, o Options, queueURL string, afterDone, afterTTL, afterDelete []Message, ttl time.Duration,
	clock *func() time.Time, forget func(ctx context.Context, key string) error, consume func() error) (int, error) {
	sent := 0
	phase := func(msgs []Message, what string) error {
		done := make(chan error, 1)
		pctx, cancel := context.WithCancel(ctx) // a send waiting for consumers that stopped would wait for ever
		defer cancel()
		go func() { err := consume(); cancel(); done <- err }()
		n, err := sendPaced(pctx, o.SQS, queueURL, msgs, stormDepth)
		sent += n
		fmt.Fprintf(o.Out, "demo: sent %d %s\n", n, what)
		return errors.Join(err, <-done)
	}
	if err := phase(afterDone, "duplicates of completed payments"); err != nil {
		return sent, err
	}
	skew := ttl + time.Minute
	*clock = func() time.Time { return time.Now().Add(skew) }
	err := phase(afterTTL, fmt.Sprintf("duplicates to consume after the TTL (consumers' clock +%s)", skew))
	*clock = nil
	if err != nil {
		return sent, err
	}
	forgotten := map[string]bool{}
	for _, m := range afterDelete {
		if forgotten[m.Key] {
			continue
		}
		forgotten[m.Key] = true
		if err := forget(ctx, m.Key); err != nil {
			return sent, fmt.Errorf("demo: delete the record of %s: %w", m.Key, err)
		}
	}
	fmt.Fprintf(o.Out, "demo: deleted the idempotency records of %d payments (as DynamoDB's TTL does)\n", len(forgotten))
	return sent, phase(afterDelete, "duplicates to consume after their records were deleted")
}
