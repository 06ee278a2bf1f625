package idem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
)

// TestMemoryStoreHonoursTheContext: every call of the in-memory store on a done context
// fails with the context's error and changes nothing, as a DynamoDB call whose context
// is done never reaches the table (the simulator's handlers and the reaper's deadline
// rely on it).
func TestMemoryStoreHonoursTheContext(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	store := memstore.NewMemoryStore()
	live := context.Background()
	rec := &persistence.Record{Key: "s#k", Status: persistence.StatusInProgress, LeaseToken: "tok", LeaseUntil: now.Add(time.Minute), Inflight: "0",
		Attempt: 1, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if _, created, err := store.Create(live, rec, now); err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	before, err := store.Get(live, "s#k", now)
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(live)
	cancel()
	lease := persistence.Lease{Key: "s#k", Token: "tok", Until: now.Add(time.Minute), Shard: "0"}
	calls := map[string]func() error{
		"Create": func() error {
			_, _, err := store.Create(done, &persistence.Record{Key: "s#other", Status: persistence.StatusInProgress, ExpiresAt: now.Add(time.Hour)}, now)
			return err
		},
		"Takeover": func() error {
			_, err := store.Takeover(done, before, persistence.Lease{Key: "s#k", Token: "tok2", Until: now.Add(2 * time.Minute)}, now.Add(time.Hour), now)
			return err
		},
		"Complete": func() error {
			return store.Complete(done, lease, persistence.Completion{Response: []byte(`{}`), ExpiresAt: now.Add(time.Hour)}, now)
		},
		"Put": func() error {
			_, err := store.Put(done, &persistence.Record{Key: "s#k", Status: persistence.StatusCompleted, ExpiresAt: now.Add(time.Hour)}, nil, before, now)
			return err
		},
		"MarkSent":  func() error { return store.MarkSent(done, "s#k", "tok", 0, nil, now) },
		"Retry":     func() error { return store.Retry(done, "s#k", "tok", "why", now) },
		"ReadGuard": func() error { _, err := store.ReadGuard(done, "t", map[string]types.AttributeValue{}); return err },
		"FailWith": func() error {
			return store.FailWith(done, lease, persistence.Failure{Reason: "why"}, now.Add(time.Hour), now)
		},
		"AddStep": func() error { return store.AddStep(done, lease, "step", nil, time.Time{}, now) },
		"Extend":  func() error { return store.Extend(done, lease, now.Add(2*time.Minute), now) },
		"Get":     func() error { _, err := store.Get(done, "s#k", now); return err },
		"Stale":   func() error { _, _, err := store.Stale(done, "0", now.Add(time.Hour), 10, ""); return err },
		"Reap": func() error {
			return store.Reap(done, persistence.StaleLease{Key: "s#k", Token: "tok", LeaseUntil: now.Add(time.Minute)}, reaper.ReasonLeaseExpired, now.Add(time.Hour))
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s on a canceled context: %v, want context.Canceled", name, err)
		}
	}
	after, err := store.Get(live, "s#k", now)
	if err != nil {
		t.Fatal(err)
	}
	if store.Len() != 1 || after.Status != before.Status || after.LeaseToken != before.LeaseToken || !after.LeaseUntil.Equal(before.LeaseUntil) ||
		after.Attempt != before.Attempt || len(after.Steps) != 0 || after.Response != nil {
		t.Errorf("the record after the canceled calls: %+v (%d records), want it as it was: %+v", after, store.Len(), before)
	}
}
