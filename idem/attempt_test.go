package idem_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
)

// TestNilAttempt: a Request without an attempt (a handler called outside Client.Do, as in
// its own unit tests) answers every accessor with the zero value and every action with
// ErrNoLease, without running the step: never a nil dereference.
func TestNilAttempt(t *testing.T) {
	ctx := context.Background()
	var a *idem.Attempt
	if a.Number() != 0 || a.RecordKey() != "" || a.Token() != "" || !a.LeaseUntil().IsZero() || a.Expired() != nil || a.Done("s") {
		t.Fatalf("a nil attempt: number %d, record key %q, token %q, lease until %v, expired %v, done %v",
			a.Number(), a.RecordKey(), a.Token(), a.LeaseUntil(), a.Expired(), a.Done("s"))
	}
	ran := false
	if err := a.Step(ctx, "s", func(context.Context) error { ran = true; return nil }); !errors.Is(err, idem.ErrNoLease) || ran {
		t.Fatalf("Step: %v (ran %v), want ErrNoLease, not run", err, ran)
	}
	if err := a.Extend(ctx, time.Minute); !errors.Is(err, idem.ErrNoLease) {
		t.Fatalf("Extend: %v, want ErrNoLease", err)
	}
	if ok, err := a.Applied(ctx, "t", map[string]types.AttributeValue{}); ok || !errors.Is(err, idem.ErrNoLease) {
		t.Fatalf("Applied: %v, %v; want false, ErrNoLease", ok, err)
	}
}

// storeOnly hides every method of a store but Store's: no GuardReader.
type storeOnly struct{ persistence.Store }

// TestAttemptRefusalsAndBookkeeping, in a lease-mode attempt: a step without a name and
// an extension by zero or less are refused (the step not run, the lease unchanged); an
// extension moves LeaseUntil; a completed step is Done at once and not run again; and
// Applied on a store that cannot read guards is an error, not a crash.
func TestAttemptRefusalsAndBookkeeping(t *testing.T) {
	ctx := context.Background()
	for _, store := range []persistence.Store{memstore.NewMemoryStore(), storeOnly{memstore.NewMemoryStore()}} {
		c, err := idem.New(idem.Config{Store: store, Scope: "t"})
		if err != nil {
			t.Fatal(err)
		}
		_, guards := store.(persistence.GuardReader)
		_, err = c.Do(ctx, &idem.Request{Key: "k", Payload: []byte(`{}`)}, func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			a := r.Attempt
			ran := 0
			if err := a.Step(ctx, "", func(context.Context) error { ran++; return nil }); err == nil || ran != 0 {
				t.Errorf("a step without a name: %v (ran %d), want an error, not run", err, ran)
			}
			before := a.LeaseUntil()
			for _, d := range []time.Duration{0, -time.Second} {
				if err := a.Extend(ctx, d); err == nil || !a.LeaseUntil().Equal(before) {
					t.Errorf("Extend(%s): %v, lease until %v (was %v); want an error and the lease unchanged", d, err, a.LeaseUntil(), before)
				}
			}
			time.Sleep(5 * time.Millisecond)
			if err := a.Extend(ctx, 10*time.Minute); err != nil || !a.LeaseUntil().After(before) {
				t.Errorf("Extend(10m): %v, lease until %v (was %v); want it later", err, a.LeaseUntil(), before)
			}
			if err := a.Step(ctx, "s1", func(context.Context) error { ran++; return nil }); err != nil || ran != 1 || !a.Done("s1") {
				t.Errorf("step s1: %v, ran %d, done %v; want run once and done", err, ran, a.Done("s1"))
			}
			if err := a.Step(ctx, "s1", func(context.Context) error { ran++; return nil }); err != nil || ran != 1 {
				t.Errorf("step s1 again: %v, ran %d; want not run again", err, ran)
			}
			if _, err := a.Applied(ctx, "t", map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "g"}}); guards == (err != nil) {
				t.Errorf("Applied on %T: %v", store, err)
			}
			return idem.Result{Response: []byte("ok")}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestMemoryStoreKeepsItsOwnCopy: a record handed to or returned by MemoryStore shares
// nothing with the stored one (its response, steps, outbox and dead messages are copied),
// and a step added twice is recorded once.
func TestMemoryStoreKeepsItsOwnCopy(t *testing.T) {
	ctx := context.Background()
	m := memstore.NewMemoryStore()
	now := time.Now()
	rec := &persistence.Record{
		Key: "pk", Status: persistence.StatusInProgress, LeaseToken: "tok", LeaseUntil: now.Add(time.Minute), Inflight: "0",
		ExpiresAt: now.Add(time.Hour), PayloadHash: "h", Attempt: 1,
		Response: []byte("resp"), Steps: []string{"s0"}, Outbox: []idem.Message{{QueueURL: "q", Body: "b"}},
		Dead: []persistence.DeadMessage{{Queue: "q", Reason: "r"}},
	}
	if _, created, err := m.Create(ctx, rec, now); err != nil || !created {
		t.Fatalf("create: %v, %v", created, err)
	}
	l := persistence.Lease{Key: "pk", Token: "tok", Until: now.Add(time.Minute)}
	for range 2 {
		if err := m.AddStep(ctx, l, "s1", nil, time.Time{}, now); err != nil {
			t.Fatal(err)
		}
	}
	rec.Response[0], rec.Steps[0], rec.Outbox[0].Body, rec.Dead[0].Reason = 'X', "X", "X", "X"
	got, err := m.Get(ctx, "pk", now)
	if err != nil {
		t.Fatal(err)
	}
	got.Response[0], got.Steps[0], got.Outbox[0].Body, got.Dead[0].Reason = 'Y', "Y", "Y", "Y"
	again, err := m.Get(ctx, "pk", now)
	if err != nil {
		t.Fatal(err)
	}
	if string(again.Response) != "resp" || !slices.Equal(again.Steps, []string{"s0", "s1"}) || again.Outbox[0].Body != "b" || again.Dead[0].Reason != "r" {
		t.Fatalf("stored: response %q, steps %v, outbox %+v, dead %+v; want what was created, and s1 once", again.Response, again.Steps, again.Outbox, again.Dead)
	}
}
