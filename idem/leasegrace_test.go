package idem_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem"
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
