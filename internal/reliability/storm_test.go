package reliability_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
)

// TestDuplicateStorm delivers every payment 1 to 5 times: duplicates with the same dedup
// id (SQS drops them), with a new dedup id, concurrently from another FIFO group, after
// completion, after the record's TTL (before DynamoDB deletes it), and after the record
// was deleted, to several consumers at once. Expected: 0 double credits, 0 missing,
// exactly one receipt per applied payment and none for a refused one, the bad messages
// in the DLQ.
func TestDuplicateStorm(t *testing.T) { duplicateStorm(t, idem.ModeLease) }

// TestDuplicateStormSingleTransaction is the storm with the consumers committing in one
// request per first delivery (IDEMPOTENCY_MODE=single-transaction).
func TestDuplicateStormSingleTransaction(t *testing.T) {
	duplicateStorm(t, idem.ModeSingleTransaction)
}

func duplicateStorm(t *testing.T, mode idem.Mode) {
	skipMode(t, mode)
	parallel(t, 2)
	payments, accounts, consumers := size(150, 10_000), size(6, 100), size(4, 8)
	w := newWorld(t)
	w.vars["IDEMPOTENCY_MODE"] = mode.String()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(size(5, 75))*time.Minute)
	defer cancel()
	s, err := demo.Run(ctx, demo.Options{
		Env: w.vars, SQS: w.sqs, DynamoDB: w.ddb, Messages: payments, Groups: accounts, Consumers: consumers,
		Seed: 7, Storm: true, MaxDeliveries: 5, Out: &progress{t: t},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkSummary(t, s)
	for _, k := range demo.StormKinds {
		if s.Deliveries[k] == 0 {
			t.Errorf("no extra delivery of kind %q was sent", k)
		}
	}
	if s.Deliveries[demo.KindAfterTTL]+s.Deliveries[demo.KindAfterDelete] > 0 && s.Guarded == 0 {
		t.Errorf("no delivery after the TTL or the deletion was stopped by the journal: those phases did not run as new executions")
	}
	extra := 0
	for _, n := range s.Deliveries {
		extra += n
	}
	report(t, "duplicate storm ("+mode.String()+")",
		"messages / groups / consumers", fmtInts(payments, accounts, consumers),
		"deliveries sent (originals + extra)", fmtInts(payments, extra),
		"extra, by kind", kinds(s.Deliveries),
		"messages accepted by SQS", s.Sent,
		"suppressed by SQS / by the record / refused in progress", fmtInts(s.SuppressedBySQS, s.SuppressedByDynamo, s.InProgress),
		"after-TTL and after-deletion runs stopped by the journal", s.Guarded,
		"effects in the tables / distinct messages", fmtInts(s.Applied, s.Distinct),
		"outbound: messages / for messages / for messages not applied", fmtInts(s.OutboundMessages, s.Outbound, s.OutboundNotApplied),
		"double effects / missing", fmtInts(s.Applied-s.Distinct+len(s.Parked), len(s.Parked)),
		"DLQ (bad messages sent)", fmtInts(dlq(s), s.BadSent),
		"time", elapsed(s.Elapsed))
}
