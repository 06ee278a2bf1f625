package idem_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
)

// receive is message id as SQS hands it out for the n-th time, keyed by key.
func receive(id, key string, n int) events.SQSMessage {
	m := keyedMsg(id, key, `{"amount_cents":100}`)
	m.Attributes["ApproximateReceiveCount"] = strconv.Itoa(n)
	return m
}

// TestLateCopyOfARefusedMessage is the hole the simulator counted apart as
// refusal-reaped. A business rule refuses a delivery (receive 2 of message m-1): the
// record is FAILED, refused, and the message dead-lettered and acknowledged. A copy of
// the same message received before it (receive 1, whose invocation started late) must
// not take the record over: it would clear the refusal, then die or fail retryably, and
// the record would read "retrying" for good with no copy of the message left to retry
// it. The copy is dead-lettered again, the handler does not run, the reaper has nothing
// to reap, and the record keeps its refusal. A newer receive of the message (its
// acknowledgement was lost) and a redrive (a new message) still take it over.
func TestLateCopyOfARefusedMessage(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.Shards = 1 })
		var runs atomic.Int64
		var open atomic.Bool
		h := idem.HandlerFunc(func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			runs.Add(1)
			if !open.Load() {
				return idem.Result{}, idem.Refuse("account acct-1 is closed")
			}
			return idem.Result{Response: []byte("paid"), Writes: []types.TransactWriteItem{e.bizWrite("acct-1")}}, nil
		})
		rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: h})
		if err != nil {
			t.Fatal(err)
		}
		dl := &fakeDL{}
		p := newProcessor(t, sqsbatch.BatchConfig{Handle: rf, DeadLetter: dl})
		deliver := func(msg events.SQSMessage) {
			t.Helper()
			resp, err := p.Process(ctx, events.SQSEvent{Records: []events.SQSMessage{msg}})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("receive %s of %s: %+v, %v; want acknowledged", msg.Attributes["ApproximateReceiveCount"], msg.MessageId, resp, err)
			}
		}
		pk, _ := c.RecordKey("k-refused")
		refused := func(when string, by persistence.Delivery) {
			t.Helper()
			rec, err := e.store.Get(ctx, pk, e.clock.Now())
			if err != nil || persistence.StateOf(rec, e.clock.Now()) != persistence.StateRefused || rec.Category != persistence.CategoryRefused || rec.RefusedBy != by {
				t.Fatalf("%s: record %+v, %v; want refused by %+v", when, rec, err, by)
			}
		}

		deliver(receive("m-1", "k-refused", 2))
		refused("after the refusal", persistence.Delivery{MessageID: "m-1", ReceiveCount: 2})
		if runs.Load() != 1 || len(dl.ids) != 1 {
			t.Fatalf("refusal: %d runs, %d dead letters; want 1 and 1", runs.Load(), len(dl.ids))
		}

		// The late copy: dead-lettered again with the refusal, never run.
		deliver(receive("m-1", "k-refused", 1))
		if runs.Load() != 1 || len(dl.ids) != 2 || !errors.Is(dl.causes[1], idem.ErrRefused) || idem.CategoryOf(dl.causes[1]) != persistence.CategoryRefused {
			t.Fatalf("late copy: %d runs, dead letters %v (causes %v); want no run and a second dead letter, refused", runs.Load(), dl.ids, dl.causes)
		}
		refused("after the late copy", persistence.Delivery{MessageID: "m-1", ReceiveCount: 2})
		e.clock.Advance(time.Hour)
		r := reaper.Reaper{Store: e.store, Shards: 1, Grace: time.Second, Clock: e.clock.Now}
		if res, err := r.Sweep(ctx); err != nil || res.Reaped != 0 {
			t.Fatalf("sweep: %+v, %v; want nothing to reap", res, err)
		}
		refused("after a sweep", persistence.Delivery{MessageID: "m-1", ReceiveCount: 2})

		// A newer receive of the same message (the refusal's acknowledgement was lost)
		// runs again, and is refused again as itself.
		deliver(receive("m-1", "k-refused", 3))
		if runs.Load() != 2 || len(dl.ids) != 3 {
			t.Fatalf("newer receive: %d runs, %d dead letters; want 2 and 3", runs.Load(), len(dl.ids))
		}
		refused("after the newer receive", persistence.Delivery{MessageID: "m-1", ReceiveCount: 3})

		// Redriven after the fix: a new message, applied once.
		open.Store(true)
		deliver(receive("m-2", "k-refused", 1))
		rec, err := e.store.Get(ctx, pk, e.clock.Now())
		if err != nil || rec.Status != persistence.StatusCompleted || runs.Load() != 3 || e.bizCount(t, "acct-1") != 1 {
			t.Fatalf("redrive: record %+v, %v; %d runs, %d effects; want completed, 3 runs, 1 effect", rec, err, runs.Load(), e.bizCount(t, "acct-1"))
		}
	})
}

// TestReapLosesToAnExtension is the reap race of issue 36: the reaper lists a lease
// that ended, its holder extends it, and the reaper then reaps what it listed. The
// extension wins on every store and layout: the reap is refused (ErrLeaseLost), and the
// holder's commit goes through.
func TestReapLosesToAnExtension(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.DefaultLease = time.Minute; cfg.Shards = 1 })
		res, err := c.Do(ctx, req("extended", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			e.clock.Advance(2 * time.Minute) // the holder stalls past its lease
			listed, _, err := e.store.Stale(ctx, "0", e.clock.Now().Add(-30*time.Second), 10, "")
			if err != nil || len(listed) != 1 {
				t.Fatalf("listed %v, %v; want the ended lease", listed, err)
			}
			if err := r.Attempt.Extend(ctx, time.Minute); err != nil {
				t.Fatalf("extend: %v", err)
			}
			if err := e.store.Reap(ctx, listed[0], reaper.ReasonLeaseExpired, e.clock.Now()); !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("reap of the listed lease after the extension: %v, want ErrLeaseLost", err)
			}
			return idem.Result{Response: []byte("kept"), Writes: []types.TransactWriteItem{e.bizWrite("extended")}}, nil
		})
		if err != nil || string(res.Response) != "kept" || e.bizCount(t, "extended") != 1 {
			t.Fatalf("commit after the extension: %+v, %v, %d effects; want committed once", res, err, e.bizCount(t, "extended"))
		}
	})
}
