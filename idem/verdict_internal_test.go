package idem

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idemgo/sqs-lambda-consumer/idem/internal/handoff"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
)

// completedWithAGroup is a store whose every key holds a completed record of a FIFO group
// with no outbox (as a store of the caller's own may keep one), and which counts the
// acquisitions.
type completedWithAGroup struct {
	*memstore.MemoryStore
	creates atomic.Int32
}

func (s *completedWithAGroup) Create(_ context.Context, rec *persistence.Record, now time.Time) (*persistence.Record, bool, error) {
	s.creates.Add(1)
	return &persistence.Record{Key: rec.Key, Status: persistence.StatusCompleted, PayloadHash: rec.PayloadHash, Response: []byte("r"), OutboxGroup: "g1",
		ExpiresAt: now.Add(time.Hour)}, false, nil
}

// TestCompletedRecordWithoutAnOutboxIsCached: a completed record with nothing left to
// send is answered, and kept in the warm cache, whatever group it names: the next
// duplicate makes no request.
func TestCompletedRecordWithoutAnOutboxIsCached(t *testing.T) {
	store := &completedWithAGroup{MemoryStore: memstore.NewMemoryStore()}
	c, err := New(Config{Store: store, Scope: "s", CacheSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := handoff.WithMessage(context.Background(), events.SQSMessage{Attributes: map[string]string{"MessageGroupId": "g2"}})
	for range 2 {
		res, err := c.Do(ctx, &Request{Key: "k", Payload: []byte(`{}`)}, func(context.Context, *Request) (Result, error) {
			t.Fatal("the handler ran")
			return Result{}, nil
		})
		if err != nil || !res.Replayed || string(res.Response) != "r" {
			t.Fatalf("%+v %v, want the stored response", res, err)
		}
	}
	if n := store.creates.Load(); n != 1 {
		t.Errorf("%d requests to the store, want 1: the duplicate is answered from the cache", n)
	}
}
