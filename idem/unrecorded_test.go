package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
)

// releaseFails is a store whose FailWith fails while fails is above zero, as a throttled
// or unreachable DynamoDB would.
type releaseFails struct {
	persistence.Store
	fails atomic.Int64
}

var errThrottled = errors.New("ProvisionedThroughputExceededException: throttled")

func (s *releaseFails) FailWith(ctx context.Context, l persistence.Lease, f persistence.Failure, expiresAt, now time.Time) error {
	if s.fails.Add(-1) >= 0 {
		return errThrottled
	}
	return s.Store.FailWith(ctx, l, f, expiresAt, now)
}

// TestUnrecordedRefusalIsRetried: a business rule's refusal whose release of the record
// fails is not permanent (dead-lettered, it would leave the record IN_PROGRESS for the
// reaper to fail as an expired lease, and a status that reads in_progress for good): it is
// retried, and the next delivery, once the lease ended, meets the refusal again and
// records it. What the error says (ErrRefused, the store's error) stays visible.
func TestUnrecordedRefusalIsRetried(t *testing.T) {
	ctx := context.Background()
	store := &releaseFails{Store: memstore.NewMemoryStore()}
	store.fails.Store(1)
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	c, err := idem.New(idem.Config{Store: store, Scope: "payments", Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	h := func(context.Context, *idem.Request) (idem.Result, error) {
		runs.Add(1)
		return idem.Result{}, idem.Refuse("account closed")
	}
	rk, err := idem.RecordKey("payments", "k-1", false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(ctx, req("k-1", `{"amount":1}`), h)
	if err == nil || idem.IsPermanent(err) || !errors.Is(err, idem.ErrRefused) || !errors.Is(err, errThrottled) {
		t.Fatalf("the refusal whose release failed: %v (permanent %t), want a retryable error that is ErrRefused and the store's", err, idem.IsPermanent(err))
	}
	if rec, err := store.Get(ctx, rk, now); err != nil || rec.Status != persistence.StatusInProgress {
		t.Fatalf("the record after the failed release: %+v, %v; want IN_PROGRESS", rec, err)
	}
	now = now.Add(10 * time.Minute) // past the lease (no deadline: DefaultLease, 5 minutes)
	_, err = c.Do(ctx, req("k-1", `{"amount":1}`), h)
	if !idem.IsPermanent(err) || !errors.Is(err, idem.ErrRefused) {
		t.Fatalf("the redelivery: %v, want the refusal, permanent", err)
	}
	rec, err := store.Get(ctx, rk, now)
	if err != nil || rec.Status != persistence.StatusFailed || !rec.Retryable {
		t.Fatalf("the record after the redelivery: %+v, %v; want FAILED, retryable (a refusal is redriven after the fix)", rec, err)
	}
	if runs.Load() != 2 {
		t.Fatalf("the handler ran %d times, want 2", runs.Load())
	}
}
