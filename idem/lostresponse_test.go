package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

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
