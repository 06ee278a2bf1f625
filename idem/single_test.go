package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
)

// forEachMode runs fn for both modes against both stores: the outcomes a caller sees
// must be the same whichever way the first delivery is committed.
func forEachMode(t *testing.T, fn func(t *testing.T, e *env, mode idem.Mode)) {
	t.Helper()
	for _, mode := range []idem.Mode{idem.ModeLease, idem.ModeSingleTransaction} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			forEachStore(t, func(t *testing.T, e *env) { fn(t, e, mode) })
		})
	}
}

func withMode(mode idem.Mode) func(*idem.Config) { return func(c *idem.Config) { c.Mode = mode } }

func TestModesDuplicateAndConcurrentDuplicate(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		c := e.client(t, withMode(mode))
		var runs atomic.Int64
		first, err := c.Do(ctx, req("dup", `{"a":1}`), effect(e, &runs, "dup", "first"))
		if err != nil || first.Replayed || first.Attempt != 1 {
			t.Fatalf("first: %+v, %v", first, err)
		}
		res, err := c.Do(ctx, req("dup", `{"a":1}`), effect(e, &runs, "dup", "second"))
		if err != nil || !res.Replayed || string(res.Response) != "first" {
			t.Fatalf("duplicate: %+v, %v; want the stored response", res, err)
		}
		// 16 deliveries of one key at once, each from its own container.
		var wg sync.WaitGroup
		var applied, replayed, inProgress atomic.Int64
		for i := range 16 {
			cc := e.client(t, withMode(mode))
			wg.Go(func() {
				res, err := cc.Do(ctx, req("race", `{}`), effect(e, &runs, "race", fmt.Sprint(i)))
				switch {
				case errors.Is(err, idem.ErrInProgress):
					inProgress.Add(1)
				case err != nil:
					t.Errorf("delivery %d: %v", i, err)
				case res.Replayed:
					replayed.Add(1)
				default:
					applied.Add(1)
				}
			})
		}
		wg.Wait()
		if applied.Load() != 1 || applied.Load()+replayed.Load()+inProgress.Load() != 16 {
			t.Fatalf("applied %d, replayed %d, in progress %d; want exactly one applied", applied.Load(), replayed.Load(), inProgress.Load())
		}
		if mode == idem.ModeSingleTransaction && inProgress.Load() != 0 {
			t.Errorf("%d deliveries in progress: nothing is ever in progress in single-transaction mode", inProgress.Load())
		}
		if e.ddb != nil {
			if n := e.bizCount(t, "dup") + e.bizCount(t, "race"); n != 2 {
				t.Fatalf("%d effects, want 2 (one per key)", n)
			}
		}
	})
}

func TestModesPayloadMismatch(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		c := e.client(t, withMode(mode))
		var runs atomic.Int64
		guarded := func(id string) idem.HandlerFunc {
			return func(ctx context.Context, r *idem.Request) (idem.Result, error) {
				runs.Add(1)
				return idem.Result{Response: []byte("ok"), Writes: []types.TransactWriteItem{journal(e, id), e.bizWrite(id)}, Guards: []int{0}}, nil
			}
		}
		if _, err := c.Do(ctx, req("mm", `{"v":1}`), guarded("mm")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Do(ctx, req("mm", `{"v":2}`), guarded("mm")); !errors.Is(err, idem.ErrPayloadMismatch) || !idem.IsPermanent(err) {
			t.Fatalf("within the TTL: %v, want a permanent ErrPayloadMismatch", err)
		}
		e.forget(t, c, "mm")
		if _, err := c.Do(ctx, req("mm", `{"v":2}`), guarded("mm")); !errors.Is(err, idem.ErrPayloadMismatch) {
			t.Fatalf("after deletion: %v, want ErrPayloadMismatch", err)
		}
		if res, err := c.Do(ctx, req("mm", `{"v":1}`), guarded("mm")); err != nil || !res.Replayed {
			t.Fatalf("the applied payload after the mismatch: %+v, %v; want a replay", res, err)
		}
		e.forget(t, c, "mm")
		if res, err := c.Do(ctx, req("mm", `{"v":1}`), guarded("mm")); err != nil || !res.Guarded {
			t.Fatalf("the applied payload after deletion: %+v, %v; want guarded", res, err)
		}
		if e.ddb != nil && e.bizCount(t, "mm") != 1 {
			t.Fatalf("%d effects, want 1", e.bizCount(t, "mm"))
		}
	})
}

func TestModesFailures(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		c := e.client(t, withMode(mode))
		var runs atomic.Int64
		failing := func(err error) idem.HandlerFunc {
			return func(context.Context, *idem.Request) (idem.Result, error) { runs.Add(1); return idem.Result{}, err }
		}
		// Retryable: the next delivery runs again and commits once.
		if _, err := c.Do(ctx, req("r", `{}`), failing(errors.New("gateway timeout"))); err == nil || idem.IsPermanent(err) {
			t.Fatalf("retryable: %v", err)
		}
		if res, err := c.Do(ctx, req("r", `{}`), effect(e, &runs, "r", "ok")); err != nil || res.Replayed {
			t.Fatalf("after a retryable failure: %+v, %v; want a run", res, err)
		}
		// Permanent: stored and replayed without running.
		if _, err := c.Do(ctx, req("p", `{}`), failing(idem.Permanent(errors.New("bad input")))); !idem.IsPermanent(err) {
			t.Fatalf("permanent: %v", err)
		}
		before := runs.Load()
		var stored *idem.StoredError
		if _, err := c.Do(ctx, req("p", `{}`), failing(nil)); !errors.As(err, &stored) {
			t.Fatalf("after a permanent failure: %v; want the stored error", err)
		}
		// The lease mode answers before running the handler; the single-transaction mode
		// runs it and learns the outcome from its commit's condition.
		if mode == idem.ModeLease && runs.Load() != before {
			t.Fatalf("the handler ran after its permanent failure")
		}
		// Too many writes for one transaction: refused before anything commits.
		many := func(context.Context, *idem.Request) (idem.Result, error) {
			ws := make([]types.TransactWriteItem, persistence.MaxWrites+1)
			for i := range ws {
				ws[i] = e.bizWrite(fmt.Sprintf("w%d", i))
			}
			return idem.Result{Writes: ws}, nil
		}
		if _, err := c.Do(ctx, req("many", `{}`), many); !errors.Is(err, idem.ErrInvalidRequest) || !idem.IsPermanent(err) {
			t.Fatalf("%d writes: %v, want a permanent ErrInvalidRequest", persistence.MaxWrites+1, err)
		}
		if e.ddb != nil && e.bizCount(t, "w0") != 0 {
			t.Fatal("a write of the refused transaction was committed")
		}
		// What a stored permanent failure keeps for its sender: the category and the
		// reason the handler chose to show, beside the error itself.
		perr := idem.Public(idem.Permanent(errors.New("amount -5 on account 42")), "the amount is negative")
		if _, err := c.Do(ctx, req("public", `{}`), failing(perr)); !idem.IsPermanent(err) {
			t.Fatalf("permanent with a public reason: %v", err)
		}
		if rec := e.record(t, c, "public"); rec.Status != persistence.StatusFailed || rec.Retryable || rec.Category != persistence.CategoryInvalid ||
			rec.Public != "the amount is negative" || rec.Error != perr.Error() {
			t.Fatalf("record %s retryable %v category %q public %q error %q; want FAILED, not retryable, invalid, the public reason and the error",
				rec.Status, rec.Retryable, rec.Category, rec.Public, rec.Error)
		}
	})
}

// TestModesMismatchFoundByApplied: a handler that asks its guard first (Attempt.Applied,
// as one with steps outside DynamoDB does) and finds another payload's effect is refused
// as a payload mismatch, and in either mode the key is then recorded as that payload's:
// the applied payload's retry is answered as done, another body is still refused.
func TestModesMismatchFoundByApplied(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		c := e.client(t, withMode(mode))
		var runs atomic.Int64
		h := func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			runs.Add(1)
			g := journal(e, "am")
			applied, err := r.Attempt.Applied(ctx, aws.ToString(g.Put.TableName), e.bizKey("journal-am"))
			if err != nil {
				return idem.Result{}, err
			}
			if applied {
				return idem.Result{Response: []byte("ok"), Guarded: true}, nil
			}
			return idem.Result{Response: []byte("ok"), Writes: []types.TransactWriteItem{g, e.bizWrite("am")}, Guards: []int{0}}, nil
		}
		if _, err := c.Do(ctx, req("am", `{"v":1}`), h); err != nil {
			t.Fatal(err)
		}
		e.forget(t, c, "am")
		if _, err := c.Do(ctx, req("am", `{"v":2}`), h); !errors.Is(err, idem.ErrPayloadMismatch) || !idem.IsPermanent(err) {
			t.Fatalf("another payload after deletion: %v, want a permanent ErrPayloadMismatch", err)
		}
		if rec := e.record(t, c, "am"); rec.Status != persistence.StatusCompleted {
			t.Fatalf("record %s, want COMPLETED, in the applied payload's name", rec.Status)
		}
		if res, err := c.Do(ctx, req("am", `{"v":1}`), h); err != nil || !res.Replayed {
			t.Fatalf("the applied payload after the mismatch: %+v, %v; want a replay", res, err)
		}
		if _, err := c.Do(ctx, req("am", `{"v":2}`), h); !errors.Is(err, idem.ErrPayloadMismatch) {
			t.Fatalf("the other payload again: %v, want ErrPayloadMismatch", err)
		}
		if e.ddb != nil && e.bizCount(t, "am") != 1 {
			t.Fatalf("%d effects, want 1", e.bizCount(t, "am"))
		}
	})
}

// racingStore runs race once, right after the first read of the record pk, as if
// another delivery acted between that read and the commit it decides.
type racingStore struct {
	persistence.Store
	pk   string
	race func()
	once sync.Once
}

func (s *racingStore) Get(ctx context.Context, pk string, now time.Time) (*persistence.Record, error) {
	rec, err := s.Store.Get(ctx, pk, now)
	if pk == s.pk {
		s.once.Do(s.race)
	}
	return rec, err
}

// TestModeSinglePermanentFailureMeetsAnotherOutcome: the single-transaction mode stores a
// permanent failure on the condition that no record appeared since it read the key; when
// one did, that record decides, as for a commit: another delivery's commit is replayed
// (its outcome, not the failure), and a lease-mode holder's live lease is ErrInProgress,
// retryable (not the failure, which would dead-letter the message).
func TestModeSinglePermanentFailureMeetsAnotherOutcome(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var runs atomic.Int64
		failing := func(context.Context, *idem.Request) (idem.Result, error) {
			runs.Add(1)
			return idem.Result{}, idem.Permanent(errors.New("bad input"))
		}
		other := e.client(t, withMode(idem.ModeSingleTransaction))
		for _, race := range []string{"commit", "lease"} {
			rs := &racingStore{}
			c := e.client(t, withMode(idem.ModeSingleTransaction), func(cfg *idem.Config) { rs.Store = cfg.Store; cfg.Store = rs })
			key := "race-" + race
			rs.pk, _ = c.RecordKey(key)
			rs.race = func() {
				if race == "commit" {
					if _, err := other.Do(ctx, req(key, `{}`), effect(e, &runs, key, "done")); err != nil {
						t.Errorf("the other delivery: %v", err)
					}
					return
				}
				hash, _ := idem.HashPayload([]byte(`{}`))
				now := e.clock.Now()
				if _, created, err := e.store.Create(ctx, &persistence.Record{
					Key: rs.pk, Status: persistence.StatusInProgress, LeaseToken: "lease-holder", LeaseUntil: now.Add(time.Minute),
					Inflight: "0", ExpiresAt: now.Add(time.Hour), PayloadHash: hash, Attempt: 1,
				}, now); err != nil || !created {
					t.Errorf("the lease-mode holder's record: %v", err)
				}
			}
			res, err := c.Do(ctx, req(key, `{}`), failing)
			switch race {
			case "commit":
				if err != nil || !res.Replayed || string(res.Response) != "done" {
					t.Errorf("a commit after the read: %+v, %v; want its outcome replayed", res, err)
				}
			case "lease":
				if !errors.Is(err, idem.ErrInProgress) || idem.IsPermanent(err) {
					t.Errorf("a lease taken after the read: %v; want ErrInProgress, retryable", err)
				}
			}
		}
	})
}

// TestModesAfterTheOtherMode: a record IN_PROGRESS under the lease mode (a deployment
// that switches modes while a holder runs) is in progress while its lease lasts and is
// taken over after it, in either mode.
func TestModesAfterTheOtherMode(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		c := e.client(t, withMode(mode))
		pk, _ := c.RecordKey("switch")
		hash, _ := idem.HashPayload([]byte(`{}`))
		now := e.clock.Now()
		if _, created, err := e.store.Create(ctx, &persistence.Record{
			Key: pk, Status: persistence.StatusInProgress, LeaseToken: "lease-holder", LeaseUntil: now.Add(time.Minute),
			Inflight: "0", ExpiresAt: now.Add(time.Hour), PayloadHash: hash, Attempt: 1, Steps: []string{"reserve"},
		}, now); err != nil || !created {
			t.Fatalf("lease-mode record: %v", err)
		}
		var runs atomic.Int64
		if _, err := c.Do(ctx, req("switch", `{}`), effect(e, &runs, "switch", "ok")); !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("inside the lease: %v, want ErrInProgress", err)
		}
		e.clock.Advance(2 * time.Minute)
		res, err := c.Do(ctx, req("switch", `{}`), effect(e, &runs, "switch", "ok"))
		if err != nil || res.Replayed || res.Attempt != 2 {
			t.Fatalf("after the lease: %+v, %v; want a takeover (attempt 2)", res, err)
		}
		rec := e.record(t, c, "switch")
		if rec.Status != persistence.StatusCompleted || rec.Inflight != "" {
			t.Fatalf("record %s inflight %q, want COMPLETED and out of the index", rec.Status, rec.Inflight)
		}
		// The takeover keeps the steps the attempt it took over finished, in both modes
		// (the single-transaction mode meets that attempt at its commit and commits again
		// conditioned on it): the record says what ran.
		if fmt.Sprint(rec.Steps) != "[reserve]" {
			t.Fatalf("record with steps %v, want [reserve]", rec.Steps)
		}
	})
}

// TestModeSingleRefusesStepsAndExtend: a handler that needs a lease says so at once.
func TestModeSingleRefusesStepsAndExtend(t *testing.T) {
	c, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "s", Mode: idem.ModeSingleTransaction})
	if err != nil {
		t.Fatal(err)
	}
	var stepErr, extendErr error
	_, err = c.Do(context.Background(), req("k", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
		stepErr = r.Attempt.Step(ctx, "charge", func(context.Context) error { t.Error("the step ran"); return nil })
		extendErr = r.Attempt.Extend(ctx, time.Minute)
		return idem.Result{}, stepErr
	})
	if !errors.Is(stepErr, idem.ErrNotInThisMode) || !errors.Is(extendErr, idem.ErrNotInThisMode) || !errors.Is(err, idem.ErrNotInThisMode) {
		t.Fatalf("step %v, extend %v, Do %v; want ErrNotInThisMode", stepErr, extendErr, err)
	}
	if _, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "s", Mode: 7}); err == nil {
		t.Fatal("idem.New accepted an unknown mode")
	}
}

// TestModeSingleLostAnswers: the one request is applied and its answer lost; the SDK's
// retry finds the record under our own token: committed, once.
func TestModeSingleLostAnswers(t *testing.T) {
	e := newDynamoEnv(t)
	api := &resend{DynamoDBAPI: e.ddb}
	store, err := persistence.NewDynamoStore(api, e.table)
	if err != nil {
		t.Fatal(err)
	}
	c, err := idem.New(idem.Config{Store: store, Scope: "contract", Clock: e.clock.Now, Mode: idem.ModeSingleTransaction})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	for _, key := range []string{"with-writes", "alone"} {
		h := effect(e, &runs, key, "ok")
		if key == "alone" {
			h = func(context.Context, *idem.Request) (idem.Result, error) {
				runs.Add(1)
				return idem.Result{Response: []byte("ok")}, nil
			}
		}
		res, err := c.Do(context.Background(), req(key, `{}`), h)
		if err != nil || res.Replayed {
			t.Fatalf("%s: %+v, %v; want applied", key, res, err)
		}
	}
	if api.resent.Load() != 2 || e.bizCount(t, "with-writes") != 1 {
		t.Fatalf("resent %d, effects %d; want 2 resent requests and one effect", api.resent.Load(), e.bizCount(t, "with-writes"))
	}
}

// TestRoundTripsSingleTransaction counts the DynamoDB requests of the single-transaction
// mode: a first delivery 1, a duplicate 1, a warm duplicate 0.
func TestRoundTripsSingleTransaction(t *testing.T) {
	e := newDynamoEnv(t)
	ctx := context.Background()
	cold := e.client(t, withMode(idem.ModeSingleTransaction))
	warm := e.client(t, withMode(idem.ModeSingleTransaction), func(c *idem.Config) { c.CacheSize = 100 })
	var runs atomic.Int64
	for _, tc := range []struct {
		name string
		c    *idem.Client
		key  string
		want map[string]int
	}{
		{"first delivery, no business write", cold, "st-1", map[string]int{"PutItem": 1}},
		{"first delivery with business write", cold, "st-2", map[string]int{"TransactWriteItems": 1}},
		{"duplicate of a completed key", cold, "st-2", map[string]int{"TransactWriteItems": 1}},
		{"duplicate, cache being warmed", warm, "st-2", map[string]int{"TransactWriteItems": 1}},
		{"warm-cache duplicate", warm, "st-2", map[string]int{}},
	} {
		e.calls.Reset()
		h := idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
			runs.Add(1)
			res := idem.Result{Response: []byte("ok")}
			if tc.key != "st-1" {
				res.Writes = []types.TransactWriteItem{e.bizWrite(tc.key)}
			}
			return res, nil
		})
		if _, err := tc.c.Do(ctx, req(tc.key, `{}`), h); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := e.calls.Ops(); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: DynamoDB calls %v, want %v", tc.name, got, tc.want)
		}
		t.Logf("%-36s %d DynamoDB requests %v", tc.name, e.calls.Total(), e.calls.Ops())
	}
	if n := e.bizCount(t, "st-2"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// TestSingleTransactionRedeliveryReadsFirst: in the single-transaction mode a message
// SQS delivers again (ApproximateReceiveCount above 1) to a cold container is answered by
// one read of the record: no handler run, no transaction refused item by item, no
// write. A first delivery makes no read.
func TestSingleTransactionRedeliveryReadsFirst(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var runs atomic.Int64
		deliver := func(receives string) events.SQSEventResponse {
			c := e.client(t, withMode(idem.ModeSingleTransaction)) // a new container: its cache is cold
			rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: effect(e, &runs, "redelivered", "done")})
			if err != nil {
				t.Fatal(err)
			}
			bp, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: rf})
			if err != nil {
				t.Fatal(err)
			}
			msg := events.SQSMessage{MessageId: "m-1", Body: `{"a":1}`, Attributes: map[string]string{"ApproximateReceiveCount": receives},
				MessageAttributes: map[string]events.SQSMessageAttribute{idem.KeyAttribute: strAttr("String", "redelivered")}}
			resp, err := bp.Process(ctx, events.SQSEvent{Records: []events.SQSMessage{msg}})
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}
		if e.calls != nil {
			e.calls.Reset()
		}
		if resp := deliver("1"); len(resp.BatchItemFailures) != 0 || runs.Load() != 1 {
			t.Fatalf("first delivery: %+v, %d runs", resp, runs.Load())
		}
		if e.calls != nil {
			if ops := e.calls.Ops(); ops["GetItem"] != 0 || e.calls.Total() != 1 {
				t.Fatalf("first delivery made %v, want its one commit and no read", ops)
			}
			e.calls.Reset()
		}
		if resp := deliver("2"); len(resp.BatchItemFailures) != 0 || runs.Load() != 1 {
			t.Fatalf("redelivery: %+v, handler ran %d times in all; want it answered without running", resp, runs.Load())
		}
		if e.calls != nil {
			if ops := e.calls.Ops(); ops["GetItem"] != 1 || e.calls.Total() != 1 {
				t.Fatalf("redelivery made %v, want one read", ops)
			}
		}
		if e.ddb != nil && e.bizCount(t, "redelivered") != 1 {
			t.Fatalf("%d effects, want 1", e.bizCount(t, "redelivered"))
		}
	})
}

// TestSingleTransactionRedeliveryTakesOverWithOneCommit: a redelivery that reads a
// crashed attempt (in progress, its lease over) runs the handler as the next attempt and
// commits with one request conditioned on the record it read, not after a refused one.
func TestSingleTransactionRedeliveryTakesOverWithOneCommit(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, withMode(idem.ModeSingleTransaction))
		pk, _ := c.RecordKey("crashed")
		hash, _ := idem.HashPayload([]byte(`{"a":1}`))
		now := e.clock.Now()
		if _, created, err := e.store.Create(ctx, &persistence.Record{
			Key: pk, Status: persistence.StatusInProgress, LeaseToken: "crashed-holder", LeaseUntil: now.Add(-time.Second),
			Inflight: "0", ExpiresAt: now.Add(time.Hour), PayloadHash: hash, Attempt: 3,
		}, now); err != nil || !created {
			t.Fatalf("crashed attempt: %v", err)
		}
		var runs atomic.Int64
		var attempt int
		h := func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			attempt = r.Attempt.Number()
			return effect(e, &runs, "crashed", "done")(ctx, r)
		}
		rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: idem.HandlerFunc(h)})
		if err != nil {
			t.Fatal(err)
		}
		bp, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: rf})
		if err != nil {
			t.Fatal(err)
		}
		if e.calls != nil {
			e.calls.Reset()
		}
		msg := events.SQSMessage{MessageId: "m-1", Body: `{"a":1}`, Attributes: map[string]string{"ApproximateReceiveCount": "2"},
			MessageAttributes: map[string]events.SQSMessageAttribute{idem.KeyAttribute: strAttr("String", "crashed")}}
		if resp, err := bp.Process(ctx, events.SQSEvent{Records: []events.SQSMessage{msg}}); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("redelivery: %+v, %v", resp, err)
		}
		if runs.Load() != 1 || attempt != 4 {
			t.Fatalf("handler ran %d times as attempt %d, want once as attempt 4", runs.Load(), attempt)
		}
		if e.calls != nil {
			if ops := e.calls.Ops(); ops["GetItem"] != 1 || ops["TransactWriteItems"] != 1 || e.calls.Total() != 2 {
				t.Fatalf("redelivery made %v, want one read and one commit", ops)
			}
		}
		if rec := e.record(t, c, "crashed"); rec.Status != persistence.StatusCompleted || rec.Attempt != 4 || rec.Inflight != "" {
			t.Fatalf("record %+v, want COMPLETED by attempt 4, out of the index", rec)
		}
		if e.ddb != nil && e.bizCount(t, "crashed") != 1 {
			t.Fatalf("%d effects, want 1", e.bizCount(t, "crashed"))
		}
	})
}

// TestModesStoreATruncatedError: a permanent failure's error and public reason are
// stored at most 1 024 bytes long, in either mode (a handler's error may quote a whole
// payload; a DynamoDB item holds 400 KB).
func TestModesStoreATruncatedError(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		c := e.client(t, withMode(mode))
		long := strings.Repeat("x", 2000)
		perr := idem.Public(idem.Permanent(errors.New(long)), long)
		failing := func(context.Context, *idem.Request) (idem.Result, error) { return idem.Result{}, perr }
		if _, err := c.Do(ctx, req("long", `{}`), failing); !idem.IsPermanent(err) {
			t.Fatalf("a permanent failure: %v", err)
		}
		if rec := e.record(t, c, "long"); rec.Status != persistence.StatusFailed || len(rec.Error) != 1024 || len(rec.Public) != 1024 {
			t.Fatalf("record %s, error of %d bytes, public reason of %d; want FAILED, 1024 and 1024", rec.Status, len(rec.Error), len(rec.Public))
		}
	})
}

// putRefusedForGood is a store whose single-transaction writes are refused for good.
type putRefusedForGood struct{ *memstore.MemoryStore }

func (putRefusedForGood) Put(context.Context, *persistence.Record, []types.TransactWriteItem, *persistence.Record, time.Time) (*persistence.Record, error) {
	return nil, idem.Permanent(errors.New("injected: the put is refused for good"))
}

// TestSinglePutRefusedForGoodStaysPermanent: in the single-transaction mode, a refusal
// whose record the store refuses for good is permanent (dead-lettered, not retried for
// ever): the store's permanent error is returned as it is.
func TestSinglePutRefusedForGoodStaysPermanent(t *testing.T) {
	c, err := idem.New(idem.Config{Store: putRefusedForGood{memstore.NewMemoryStore()}, Scope: "s", Mode: idem.ModeSingleTransaction})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(context.Background(), req("k", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{}, idem.Permanent(errors.New("the handler refuses"))
	})
	if !idem.IsPermanent(err) || !strings.Contains(err.Error(), "refused for good") {
		t.Errorf("%v (permanent: %v), want the store's permanent error", err, idem.IsPermanent(err))
	}
}
