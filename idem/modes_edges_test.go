package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// The tests of this file hold what both modes promise at their edges: a guard item that
// carries no fingerprint, a refusal whose record cannot be written, the cache after a
// commit, the commit time, and a store whose refusal names a write the handler did not
// make. Each was a mutant of the single-transaction mode that no test noticed
// (RELIABILITY.md, "Mutation score").

// recordWritesFail is a store whose writes of a record without business writes (a
// refusal's, a failure's: Put and Complete with none, FailWith) fail while armed, as a
// throttled DynamoDB would; the commit of business writes passes.
type recordWritesFail struct {
	persistence.Store
	armed atomic.Bool
}

// ReadGuard reads as the store under it does (Attempt.Applied needs it).
func (s *recordWritesFail) ReadGuard(ctx context.Context, table string, key map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	return s.Store.(persistence.GuardReader).ReadGuard(ctx, table, key)
}

func (s *recordWritesFail) Put(ctx context.Context, rec *persistence.Record, writes []types.TransactWriteItem, seen *persistence.Record, now time.Time) (*persistence.Record, error) {
	if s.armed.Load() && len(writes) == 0 {
		return nil, errThrottled
	}
	return s.Store.Put(ctx, rec, writes, seen, now)
}

func (s *recordWritesFail) Complete(ctx context.Context, l persistence.Lease, c persistence.Completion, now time.Time) error {
	if s.armed.Load() && len(c.Writes) == 0 {
		return errThrottled
	}
	return s.Store.Complete(ctx, l, c, now)
}

func (s *recordWritesFail) FailWith(ctx context.Context, l persistence.Lease, f persistence.Failure, expiresAt, now time.Time) error {
	if s.armed.Load() {
		return errThrottled
	}
	return s.Store.FailWith(ctx, l, f, expiresAt, now)
}

// TestModesGuardItemWithoutFingerprint: a guard whose item is already there without a
// payload's fingerprint (put by a writer that did not declare it a guard: an older
// version of the handler, a migration) stands for the effect in place, as Result.Guards
// says ("the same fingerprint (or none)"): the delivery completes Guarded, without its
// writes, in both modes; it is no payload mismatch.
func TestModesGuardItemWithoutFingerprint(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		c := e.client(t, withMode(mode))
		older := func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Response: []byte("older"), Writes: []types.TransactWriteItem{journal(e, "pay-7")}}, nil
		}
		if _, err := c.Do(ctx, req("older-writer", `{}`), older); err != nil {
			t.Fatalf("the older writer: %v", err)
		}
		var runs atomic.Int64
		res, err := c.Do(ctx, req("pay-7", `{"v":1}`), func(context.Context, *idem.Request) (idem.Result, error) {
			runs.Add(1)
			return idem.Result{Response: []byte("new"), Writes: []types.TransactWriteItem{journal(e, "pay-7"), e.bizWrite("pay-7")}, Guards: []int{0}}, nil
		})
		if err != nil || !res.Guarded || string(res.Response) != "new" {
			t.Fatalf("a guard item without a fingerprint: %+v, %v; want Guarded with the handler's response", res, err)
		}
		if n := e.bizCount(t, "pay-7"); n != 0 || runs.Load() != 1 {
			t.Fatalf("%d effects after %d runs, want none: the guard stood", n, runs.Load())
		}
		if rec := e.record(t, c, "pay-7"); rec.Status != persistence.StatusCompleted || len(rec.Outbox) != 0 {
			t.Fatalf("record %s with %d messages, want COMPLETED without messages", rec.Status, len(rec.Outbox))
		}
	})
}

// TestModesRefusalWhoseRecordFailsIsRetried: a refusal that is stored (a payload
// mismatch found by Attempt.Applied or by the guard at commit, a permanent failure) and
// whose record write fails is retried in both modes, never dead-lettered unrecorded: the
// error is not permanent, and says both what was refused and the store's failure. The
// next delivery records the refusal.
func TestModesRefusalWhoseRecordFailsIsRetried(t *testing.T) {
	type handlerOf func(e *env, payload string) idem.HandlerFunc
	applied := func(e *env, payload string) idem.HandlerFunc {
		return func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			g := journal(e, "am")
			done, err := r.Attempt.Applied(ctx, aws.ToString(g.Put.TableName), e.bizKey("journal-am"))
			if err != nil || done {
				return idem.Result{Response: []byte("ok"), Guarded: done}, err
			}
			return idem.Result{Response: []byte("ok"), Writes: []types.TransactWriteItem{g, e.bizWrite("am")}, Guards: []int{0}}, nil
		}
	}
	atCommit := func(e *env, payload string) idem.HandlerFunc {
		return func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Response: []byte("ok"), Writes: []types.TransactWriteItem{journal(e, "am"), e.bizWrite("am")}, Guards: []int{0}}, nil
		}
	}
	invalid := func(e *env, payload string) idem.HandlerFunc {
		return func(context.Context, *idem.Request) (idem.Result, error) {
			if payload == `{"v":2}` {
				return idem.Result{}, idem.Permanent(errors.New("amount is not a number"))
			}
			return atCommit(e, payload)(context.Background(), nil)
		}
	}
	for _, tc := range []struct {
		name string
		h    handlerOf
		want error
	}{
		{"mismatch found by Applied", applied, idem.ErrPayloadMismatch},
		{"mismatch found at commit", atCommit, idem.ErrPayloadMismatch},
		{"permanent failure", invalid, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
				ctx := context.Background()
				store := &recordWritesFail{Store: e.store}
				c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Store = store })
				if _, err := c.Do(ctx, req("am", `{"v":1}`), tc.h(e, `{"v":1}`)); err != nil {
					t.Fatalf("the first payload: %v", err)
				}
				e.forget(t, c, "am") // the record's TTL ran out; the guard item stays
				store.armed.Store(true)
				_, err := c.Do(ctx, req("am", `{"v":2}`), tc.h(e, `{"v":2}`))
				if err == nil || idem.IsPermanent(err) || !errors.Is(err, errThrottled) || (tc.want != nil && !errors.Is(err, tc.want)) {
					t.Fatalf("the refusal whose record failed: %v (permanent %t); want a retryable error that is %v and the store's",
						err, idem.IsPermanent(err), tc.want)
				}
				store.armed.Store(false)
				e.clock.Advance(10 * time.Minute) // past a lease the lease mode left IN_PROGRESS
				_, err = c.Do(ctx, req("am", `{"v":2}`), tc.h(e, `{"v":2}`))
				if !idem.IsPermanent(err) || (tc.want != nil && !errors.Is(err, tc.want)) {
					t.Fatalf("the next delivery: %v, want the refusal, permanent", err)
				}
				rec := e.record(t, c, "am")
				if rec.Status == persistence.StatusInProgress {
					t.Fatalf("record %s after the next delivery, want the refusal recorded", rec.Status)
				}
				// Completed for the first payload, the record says the one under its key
				// was refused: the ingress's status reads it without knowing that payload.
				if refused := errors.Is(tc.want, idem.ErrPayloadMismatch); rec.CompletedForAnother() != refused ||
					refused && (rec.Status != persistence.StatusCompleted || rec.Category != persistence.CategoryInvalid) {
					t.Fatalf("record %s (error %q, category %q): completed for another payload %t, want %t",
						rec.Status, rec.Error, rec.Category, rec.CompletedForAnother(), refused)
				}
				if e.ddb != nil && e.bizCount(t, "am") != 1 {
					t.Fatalf("%d effects, want the first payload's only", e.bizCount(t, "am"))
				}
			})
		})
	}
}

// countingStore counts the reads and writes of records.
type countingStore struct {
	persistence.Store
	calls atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, pk string, now time.Time) (*persistence.Record, error) {
	s.calls.Add(1)
	return s.Store.Get(ctx, pk, now)
}

func (s *countingStore) Create(ctx context.Context, rec *persistence.Record, now time.Time) (*persistence.Record, bool, error) {
	s.calls.Add(1)
	return s.Store.Create(ctx, rec, now)
}

func (s *countingStore) Put(ctx context.Context, rec *persistence.Record, writes []types.TransactWriteItem, seen *persistence.Record, now time.Time) (*persistence.Record, error) {
	s.calls.Add(1)
	return s.Store.Put(ctx, rec, writes, seen, now)
}

// TestModesCacheAnswersWhatThisContainerCommitted: with Config.CacheSize, a key this
// client committed (without messages) is answered from memory in both modes: its
// duplicates make no request, and another payload under it is refused without one.
func TestModesCacheAnswersWhatThisContainerCommitted(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		store := &countingStore{Store: e.store}
		c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Store, cfg.CacheSize = store, 10 })
		var runs atomic.Int64
		if _, err := c.Do(ctx, req("warm", `{"a":1}`), effect(e, &runs, "warm", "first")); err != nil {
			t.Fatal(err)
		}
		store.calls.Store(0)
		for range 3 {
			res, err := c.Do(ctx, req("warm", `{"a":1}`), effect(e, &runs, "warm", "again"))
			if err != nil || !res.Replayed || string(res.Response) != "first" {
				t.Fatalf("duplicate: %+v, %v; want the first response", res, err)
			}
		}
		if _, err := c.Do(ctx, req("warm", `{"a":2}`), effect(e, &runs, "warm", "other")); !errors.Is(err, idem.ErrPayloadMismatch) {
			t.Fatalf("another payload: %v, want ErrPayloadMismatch", err)
		}
		if n := store.calls.Load(); n != 0 || runs.Load() != 1 {
			t.Fatalf("%d store requests and %d runs for the duplicates, want none: answered from the cache", n, runs.Load())
		}
	})
}

// TestModesUpdatedAtIsTheCommitTime: a committed record's UpdatedAt is when it was
// committed, after the handler ran, not when the delivery started: the reaper sends a
// crash's pending messages in that order, in both modes.
func TestModesUpdatedAtIsTheCommitTime(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		o := newOutbox(t)
		c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = &failingSender{} })
		start := e.clock.Now()
		var runs atomic.Int64
		slow := func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			e.clock.Advance(90 * time.Second) // a handler that takes its time
			return journalEffect(e, o, &runs, "slow")(ctx, r)
		}
		if _, err := c.Do(ctx, req("slow", `{}`), slow); err == nil {
			t.Fatal("the send did not fail")
		}
		rec := e.record(t, c, "slow")
		if want := start.Add(90 * time.Second); !rec.UpdatedAt.Equal(want) || !rec.CreatedAt.Equal(start) {
			t.Fatalf("created %v, updated %v; want created at the start %v and updated at the commit %v", rec.CreatedAt, rec.UpdatedAt, start, want)
		}
		if rec.Inflight == "" || len(rec.Outbox) != 1 {
			t.Fatalf("record in the index %q with %d pending, want in the index with one", rec.Inflight, len(rec.Outbox))
		}
	})
}

// TestModesPermanentCommitErrorIsAPermanentError: a commit DynamoDB refuses for good
// (more writes than a transaction holds) is the same error in both modes: a
// *PermanentError (the dead-letter reason reads "permanent: ...") that is
// ErrInvalidRequest, with nothing committed.
func TestModesPermanentCommitErrorIsAPermanentError(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		c := e.client(t, withMode(mode))
		h := func(context.Context, *idem.Request) (idem.Result, error) {
			writes := make([]types.TransactWriteItem, persistence.MaxWrites+1)
			for i := range writes {
				writes[i] = e.bizWrite(fmt.Sprint("many-", i))
			}
			return idem.Result{Writes: writes}, nil
		}
		_, err := c.Do(context.Background(), req("many", `{}`), h)
		var pe *idem.PermanentError
		if !errors.As(err, &pe) || !errors.Is(err, idem.ErrInvalidRequest) {
			t.Fatalf("%d writes: %v, want a *PermanentError that is ErrInvalidRequest", persistence.MaxWrites+1, err)
		}
		if e.ddb != nil && e.bizCount(t, "many-0") != 0 {
			t.Fatal("a write of the refused commit landed")
		}
		// MaxWrites exactly: with the record, DynamoDB's 100 actions, committed.
		if _, err := c.Do(context.Background(), req("most", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			writes := make([]types.TransactWriteItem, persistence.MaxWrites)
			for i := range writes {
				writes[i] = e.bizWrite(fmt.Sprint("most-", i))
			}
			return idem.Result{Writes: writes}, nil
		}); err != nil {
			t.Fatalf("%d writes: %v, want them committed", persistence.MaxWrites, err)
		}
	})
}

// refusingStore refuses every commit of business writes with wce, as a Store of the
// user's own might: the write it names may be out of the handler's range, and the item
// of the failed write may be missing.
type refusingStore struct {
	persistence.Store
	wce idem.WriteConditionError
}

func (s *refusingStore) refusal(n int) error {
	if n == 0 {
		return nil
	}
	w := s.wce
	return fmt.Errorf("idem: commit: %w", &w)
}

func (s *refusingStore) Put(ctx context.Context, rec *persistence.Record, writes []types.TransactWriteItem, seen *persistence.Record, now time.Time) (*persistence.Record, error) {
	if err := s.refusal(len(writes)); err != nil {
		return nil, err
	}
	return s.Store.Put(ctx, rec, writes, seen, now)
}

func (s *refusingStore) Complete(ctx context.Context, l persistence.Lease, c persistence.Completion, now time.Time) error {
	if err := s.refusal(len(c.Writes)); err != nil {
		return err
	}
	return s.Store.Complete(ctx, l, c, now)
}

// TestModesExplainOnlyTheHandlersWrites: Result.Explain is asked about a write of the
// handler's only, at its position: a refusal that names a position outside Writes is
// returned as the store gave it, the handler's Explain not called; a refusal without
// the failed item asks Explain with a nil item. Both modes.
func TestModesExplainOnlyTheHandlersWrites(t *testing.T) {
	for _, tc := range []struct {
		name      string
		wce       idem.WriteConditionError
		wantIndex int // the position Explain is asked about; -1: not asked
	}{
		{"position past the writes", idem.WriteConditionError{Index: 2, Reason: "store's reason", Failed: []idem.FailedWrite{{Index: 2}}}, -1},
		{"negative position", idem.WriteConditionError{Index: -1, Reason: "store's reason", Failed: []idem.FailedWrite{{Index: -1}}}, -1},
		{"no failed item", idem.WriteConditionError{Index: 1, Reason: "store's reason"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range []idem.Mode{idem.ModeLease, idem.ModeSingleTransaction} {
				e := newMemoryEnv(t)
				c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Store = &refusingStore{Store: e.store, wce: tc.wce} })
				asked := -1
				h := func(context.Context, *idem.Request) (idem.Result, error) {
					writes := []types.TransactWriteItem{e.bizWrite("a"), e.bizWrite("b")}
					return idem.Result{Writes: writes, Explain: func(i int, item map[string]types.AttributeValue) string {
						asked = i
						if item != nil {
							return "account " + fmt.Sprint(writes[i].Update.Key) + " has an item"
						}
						return "account b does not exist"
					}}, nil
				}
				_, err := c.Do(context.Background(), req("refused", `{}`), h)
				var got *idem.WriteConditionError
				if !errors.As(err, &got) || !idem.IsPermanent(err) {
					t.Fatalf("%s: %v, want the refusal, permanent", mode, err)
				}
				if asked != tc.wantIndex {
					t.Fatalf("%s: Explain asked about write %d, want %d", mode, asked, tc.wantIndex)
				}
				if want := map[bool]string{true: "account b does not exist", false: "store's reason"}[tc.wantIndex >= 0]; got.Reason != want || got.Explained != (tc.wantIndex >= 0) {
					t.Fatalf("%s: reason %q (explained %t), want %q", mode, got.Reason, got.Explained, want)
				}
			}
		})
	}
}
