package idem_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
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

// resend sends every write twice and returns the second answer: what the SDK does when
// the first attempt was applied but its response was lost (a reset connection, a 5xx
// from a front end after the write). The requests reach the emulator both times. The
// first answer is dropped whatever it is: under load, the SDK itself may already have
// sent the first request again after an answer moto lost, and then the first answer is
// the condition's failure on the write it applied (the second answer is that too, which
// the store reads as its own write, as it must). resent counts the writes the code made.
type resend struct {
	persistence.DynamoDBAPI
	resent atomic.Int64
}

func (r *resend) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	_, _ = r.DynamoDBAPI.PutItem(ctx, in, o...) // its answer is lost; see resend
	r.resent.Add(1)
	return r.DynamoDBAPI.PutItem(ctx, in, o...)
}

func (r *resend) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	_, _ = r.DynamoDBAPI.UpdateItem(ctx, in, o...) // its answer is lost; see resend
	r.resent.Add(1)
	return r.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

func (r *resend) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	_, _ = r.DynamoDBAPI.TransactWriteItems(ctx, in, o...) // its answer is lost; see resend
	r.resent.Add(1)
	return r.DynamoDBAPI.TransactWriteItems(ctx, in, o...)
}

// TestLostResponsesAreRecognised: every write of a delivery is applied and then retried
// (the first response lost). The acquire must still be ours, the completion must be
// recognised as committed, and the business effect must happen once.
func TestLostResponsesAreRecognised(t *testing.T) {
	e := newDynamoEnv(t)
	api := &resend{DynamoDBAPI: e.ddb}
	store, err := persistence.NewDynamoStore(api, e.table)
	if err != nil {
		t.Fatal(err)
	}
	c, err := idem.New(idem.Config{Store: store, Scope: "lost", Clock: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		writes bool
	}{{"transaction", true}, {"update", false}} {
		t.Run(tc.name, func(t *testing.T) {
			var runs, stepRuns atomic.Int64
			key := "lost-" + tc.name
			h := func(ctx context.Context, r *idem.Request) (idem.Result, error) {
				runs.Add(1)
				if err := r.Attempt.Step(ctx, "send", func(context.Context) error { stepRuns.Add(1); return nil }); err != nil {
					return idem.Result{}, err
				}
				res := idem.Result{Response: []byte("ok")}
				if tc.writes {
					res.Writes = []types.TransactWriteItem{e.bizWrite(key)}
				}
				return res, nil
			}
			before := api.resent.Load()
			res, err := c.Do(ctx, req(key, `{}`), h)
			if err != nil || res.Replayed || res.Attempt != 1 || string(res.Response) != "ok" {
				t.Fatalf("Do: res=%+v err=%v", res, err)
			}
			if got := api.resent.Load() - before; got != 3 { // acquire, step, completion
				t.Fatalf("%d writes were resent, want 3", got)
			}
			if runs.Load() != 1 || stepRuns.Load() != 1 {
				t.Fatalf("handler ran %d times, step %d times; want 1 and 1", runs.Load(), stepRuns.Load())
			}
			if tc.writes {
				if n := e.bizCount(t, key); n != 1 {
					t.Fatalf("effect applied %d times, want 1", n)
				}
			}
			pk, _ := c.RecordKey(key)
			rec, err := store.Get(ctx, pk, e.clock.Now())
			if err != nil || rec.Status != persistence.StatusCompleted || string(rec.Response) != "ok" {
				t.Fatalf("record: %+v, %v", rec, err)
			}
			res, err = c.Do(ctx, req(key, `{}`), h)
			if err != nil || !res.Replayed || runs.Load() != 1 {
				t.Fatalf("duplicate: res=%+v err=%v runs=%d", res, err, runs.Load())
			}
		})
	}
}

// TestLostCompletionOfAnotherHolderIsStillFenced: recognising a lost response must not
// let a holder whose lease was taken over pass: the record is COMPLETED, but under
// another token.
func TestLostCompletionOfAnotherHolderIsStillFenced(t *testing.T) {
	e := newDynamoEnv(t)
	ctx := context.Background()
	c := e.client(t, func(cfg *idem.Config) { cfg.DefaultLease = 10 * time.Second })
	stalled, resume := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := c.Do(ctx, req("fenced", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			close(stalled)
			<-resume
			return idem.Result{Response: []byte("late"), Writes: []types.TransactWriteItem{e.bizWrite("fenced")}}, nil
		})
		first <- err
	}()
	<-stalled
	e.clock.Advance(11 * time.Second)
	var runs atomic.Int64
	if res, err := c.Do(ctx, req("fenced", `{}`), effect(e, &runs, "fenced", "new")); err != nil || res.Attempt != 2 {
		t.Fatalf("takeover: res=%+v err=%v", res, err)
	}
	close(resume)
	if err := <-first; !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("stalled holder's commit: %v, want ErrLeaseLost", err)
	}
	if n := e.bizCount(t, "fenced"); n != 1 {
		t.Fatalf("effect applied %d times, want 1", n)
	}
}

// guardedEffect returns a handler with a receipt-like step, a journal entry as a guard
// write (put if absent) and the counted effect.
func guardedEffect(e *env, runs, stepRuns *atomic.Int64, id string) idem.HandlerFunc {
	return func(ctx context.Context, r *idem.Request) (idem.Result, error) {
		runs.Add(1)
		if err := r.Attempt.Step(ctx, "receipt", func(context.Context) error { stepRuns.Add(1); return nil }); err != nil {
			return idem.Result{}, err
		}
		journal := journal(e, id)
		return idem.Result{Response: []byte("credited"), Writes: []types.TransactWriteItem{journal, e.bizWrite(id)}, Guards: []int{0}}, nil
	}
}

// TestRedeliveryAfterTheTTL: a message redelivered after its record's TTL passed, while
// DynamoDB has not deleted the item yet, is a new execution by contract. The steps the
// first execution completed are not repeated, and a guard write keeps the business
// effect single even though the record no longer protects it.
func TestRedeliveryAfterTheTTL(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.TTL = time.Hour })
		var runs, stepRuns atomic.Int64
		res, err := c.Do(ctx, req("late", `{"v":1}`), guardedEffect(e, &runs, &stepRuns, "late"))
		if err != nil || res.Guarded {
			t.Fatalf("first: res=%+v err=%v", res, err)
		}
		e.clock.Advance(time.Hour + 2*time.Second)
		var expired *persistence.Record
		h := guardedEffect(e, &runs, &stepRuns, "late")
		res, err = c.Do(ctx, req("late", `{"v":1}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			expired = r.Attempt.Expired()
			return h(ctx, r)
		})
		if err != nil || res.Replayed {
			t.Fatalf("after the TTL: res=%+v err=%v", res, err)
		}
		if runs.Load() != 2 || stepRuns.Load() != 1 {
			t.Fatalf("handler ran %d times, its step %d times; want 2 and 1", runs.Load(), stepRuns.Load())
		}
		if expired == nil || expired.Status != persistence.StatusCompleted {
			t.Fatalf("Attempt.Expired() = %+v, want the expired COMPLETED record", expired)
		}
		if e.ddb == nil {
			return // the memory store logs writes without evaluating their conditions
		}
		if !res.Guarded || e.bizCount(t, "late") != 1 {
			t.Fatalf("guarded=%v effects=%d, want the guard to stop the second effect", res.Guarded, e.bizCount(t, "late"))
		}
		pk, _ := c.RecordKey("late")
		rec, err := e.store.Get(ctx, pk, e.clock.Now())
		if err != nil || rec.Status != persistence.StatusCompleted {
			t.Fatalf("record after the guarded completion: %+v, %v", rec, err)
		}
		// Another payload under the expired key is someone else's message: no steps carry.
		e.clock.Advance(time.Hour + 2*time.Second)
		res, err = c.Do(ctx, req("late", `{"v":2}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			if r.Attempt.Expired() != nil || r.Attempt.Done("receipt") {
				t.Error("an expired record of another payload leaked into the new attempt")
			}
			return idem.Result{Response: []byte("other")}, nil
		})
		if err != nil || res.Guarded {
			t.Fatalf("other payload: res=%+v err=%v", res, err)
		}
	})
}

// TestFailureAtTheDeadlineReleasesTheLease: a handler that returns because its context
// expired must still release its lease (FAILED, retryable), so a redelivery can take the
// key at once instead of waiting for the lease to run out. The deadline leaves the
// acquire before it time to go through on a loaded moto (150 ms did not, once: the
// acquire itself timed out and left the record IN_PROGRESS, a different case).
func TestFailureAtTheDeadlineReleasesTheLease(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		c := e.client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		ran := false
		_, err := c.Do(ctx, req("deadline", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			ran = true
			<-ctx.Done()
			return idem.Result{}, ctx.Err()
		})
		if !ran {
			t.Fatalf("the handler did not run (the acquire took the whole deadline): %v", err)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do: %v, want the deadline", err)
		}
		pk, _ := c.RecordKey("deadline")
		rec, err := e.store.Get(context.Background(), pk, e.clock.Now())
		if err != nil || rec.Status != persistence.StatusFailed || !rec.Retryable {
			t.Fatalf("record: %+v, %v; want FAILED and retryable", rec, err)
		}
	})
}
