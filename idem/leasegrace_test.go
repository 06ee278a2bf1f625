package idem_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
)

// TestLeaseEndsAGraceAfterTheDeadline: a lease taken under a deadline ends LeaseGrace
// after it (capped by MaxLease), not at it: a taker whose clock runs ahead of Lambda's,
// within the grace, must not take the key from a holder that still runs (the simulator's
// hole 13). The grace is 5 s unless set. Without a deadline it is DefaultLease.
func TestLeaseEndsAGraceAfterTheDeadline(t *testing.T) {
	now := time.Now().Truncate(time.Second) // the deadline is on the real clock
	for _, tc := range []struct {
		name     string
		deadline time.Duration // 0: none
		grace    time.Duration // 0: the default
		want     time.Duration
	}{
		{"deadline plus grace", 30 * time.Second, 7 * time.Second, 30*time.Second + 7*time.Second},
		{"deadline plus the default grace of 5 s", 30 * time.Second, 0, 30*time.Second + 5*time.Second},
		{"capped by MaxLease", 20 * time.Minute, 7 * time.Second, 10 * time.Minute},
		{"no deadline", 0, 7 * time.Second, 3 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := memstore.NewMemoryStore()
			c, err := idem.New(idem.Config{Store: store, Scope: "payments", LeaseGrace: tc.grace, MaxLease: 10 * time.Minute,
				DefaultLease: 3 * time.Minute, Clock: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, now.Add(tc.deadline))
				defer cancel()
			}
			rk, _ := idem.RecordKey("payments", "k-"+tc.name, false)
			var until time.Time
			_, err = c.Do(ctx, req("k-"+tc.name, `{}`), func(ctx context.Context, _ *idem.Request) (idem.Result, error) {
				rec, err := store.Get(ctx, rk, now)
				if err != nil {
					return idem.Result{}, err
				}
				until = rec.LeaseUntil
				return idem.Result{Response: []byte("ok")}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if want := now.Add(tc.want); !until.Equal(want) {
				t.Fatalf("the lease ends at %s, want %s (%s after now)", until, want, tc.want)
			}
		})
	}
}

// TestStepIsNotStartedWithinTheGraceOfItsLeaseEnd is the simulator's seed 59287. A holder
// extends its lease by 3 s (Attempt.Extend) and works on (or the extension's answer comes
// back late); its clock runs 0.5 s behind, a taker's 0.5 s ahead: 1 s apart, within the
// grace (2 s). No grace covers a lease its holder chose: by its clock the taker finds the
// lease over and takes the key, while by its own the holder has 0.9 s left. The holder
// must not then start a step, which the taker runs too: within the grace of its lease's
// end, Step extends the lease under the fence first, which the takeover fails. Without a
// taker, the extension lets the step run.
func TestStepIsNotStartedWithinTheGraceOfItsLeaseEnd(t *testing.T) {
	store := memstore.NewMemoryStore()
	var (
		mu   sync.Mutex
		base = time.Now().Truncate(time.Second)
	)
	clock := func(off time.Duration) func() time.Time {
		return func() time.Time { mu.Lock(); defer mu.Unlock(); return base.Add(off) }
	}
	client := func(off time.Duration) *idem.Client {
		c, err := idem.New(idem.Config{Store: store, Scope: "payments", LeaseGrace: 2 * time.Second, Clock: clock(off)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	holder, taker := client(-500*time.Millisecond), client(500*time.Millisecond)
	var calls []string
	charge := func(who string) func(context.Context) error {
		return func(context.Context) error { calls = append(calls, who); return nil }
	}
	ctx := context.Background()
	_, err := holder.Do(ctx, req("pay", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
		if err := r.Attempt.Extend(ctx, 3*time.Second); err != nil {
			return idem.Result{}, err
		}
		mu.Lock()
		base = base.Add(2100 * time.Millisecond)
		mu.Unlock()
		if _, err := taker.Do(ctx, req("pay", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			return idem.Result{Response: []byte("taker")}, r.Attempt.Step(ctx, "charge", charge("taker"))
		}); err != nil {
			t.Fatalf("the taker, whose clock finds the lease over: %v", err)
		}
		return idem.Result{Response: []byte("holder")}, r.Attempt.Step(ctx, "charge", charge("holder"))
	})
	if !errors.Is(err, persistence.ErrLeaseLost) {
		t.Errorf("the holder's step with its lease 0.9 s from its end: %v, want ErrLeaseLost", err)
	}
	if !slices.Equal(calls, []string{"taker"}) {
		t.Fatalf("charge called by %v, want by the taker alone", calls)
	}
	_, err = holder.Do(ctx, req("alone", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
		if err := r.Attempt.Extend(ctx, 3*time.Second); err != nil {
			return idem.Result{}, err
		}
		mu.Lock()
		base = base.Add(2100 * time.Millisecond)
		mu.Unlock()
		return idem.Result{Response: []byte("holder")}, r.Attempt.Step(ctx, "charge", charge("holder alone"))
	})
	if err != nil || !slices.Equal(calls, []string{"taker", "holder alone"}) {
		t.Fatalf("a holder no one took the key from: %v, charge called by %v; want its step run after the extension", err, calls)
	}
}
