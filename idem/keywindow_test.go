package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
)

// forgetfulService is an outside service that keeps idempotency keys for window: a call
// with a key it still keeps is answered again, one with a key older than that is applied
// again, as a real service past its window does. Its own records (lookup) it keeps for
// good.
type forgetfulService struct {
	mu      sync.Mutex
	clock   *fakeClock
	window  time.Duration
	keys    map[string]time.Time // key -> when it was last applied
	ids     map[string]string    // key -> the id of its last application
	applied map[string]int       // key -> applications
	calls   int
}

func newForgetfulService(clock *fakeClock, window time.Duration) *forgetfulService {
	return &forgetfulService{clock: clock, window: window, keys: map[string]time.Time{}, ids: map[string]string{}, applied: map[string]int{}}
}

func (s *forgetfulService) call(key string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	now := s.clock.Now()
	if at, ok := s.keys[key]; ok && now.Sub(at) < s.window {
		return []byte(s.ids[key])
	}
	s.applied[key]++
	s.keys[key], s.ids[key] = now, fmt.Sprintf("tr_%d_%d", len(s.keys), s.applied[key])
	return []byte(s.ids[key])
}

func (s *forgetfulService) lookup(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.ids[key]
	return []byte(id), ok
}

// transfer is a handler whose one step, "transfer", makes call with the request's key
// under svc (StepWith), with the service's lookup when lookup is set; its response is
// the step's answer.
func (s *forgetfulService) transfer(svc idem.Service, lookup bool, call func(key string) ([]byte, error)) idem.HandlerFunc {
	return func(ctx context.Context, r *idem.Request) (idem.Result, error) {
		svc := svc
		if lookup {
			svc.Lookup = func(context.Context) ([]byte, bool, error) { a, ok := s.lookup(r.Key); return a, ok, nil }
		}
		id, err := r.Attempt.StepWith(ctx, "transfer", svc, func(context.Context) ([]byte, error) { return call(r.Key) })
		if err != nil {
			return idem.Result{}, err
		}
		return idem.Result{Response: id}, nil
	}
}

func (s *forgetfulService) applications(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[key]
}

// deleteIfExpired deletes the record of pk when its TTL has passed, as DynamoDB's TTL
// does (late, but it does).
func deleteIfExpired(t *testing.T, e *env, pk string) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.store.Get(ctx, pk, e.clock.Now()); !errors.Is(err, idem.ErrNotFound) {
		return
	}
	switch s := e.store.(type) {
	case *memstore.MemoryStore:
		s.Forget(pk)
	case *persistence.DynamoStore:
		if _, err := e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.table, Key: s.Key(pk)}); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("no TTL deletion for %T", e.store)
	}
}

// memoryAndMoto runs fn on the in-memory store and on DynamoDB on the local endpoint.
func memoryAndMoto(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	runStores(t, fn, []storeCase{{"memory", newMemoryEnv}, {"dynamodb", newDynamoEnv}})
}

// TestRedriveAfterTheTTLFindsTheRecordedStep (issue 37, hole 5): the transfer step is
// recorded, then the attempt fails; its message waits in the dead-letter queue, which
// keeps it 14 days, longer than the records' TTL of 7. Redriven on day 8, it finds its
// record, kept as long as the queue keeps the message (Config.DLQRetention), and the
// service, which forgot the key after a day, is not called again.
func TestRedriveAfterTheTTLFindsTheRecordedStep(t *testing.T) {
	memoryAndMoto(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.TTL, cfg.DLQRetention = 7*24*time.Hour, 14*24*time.Hour })
		svc := newForgetfulService(e.clock, 24*time.Hour)
		fail := true
		handler := func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			id, err := r.Attempt.StepWith(ctx, "transfer", idem.Service{KeyWindow: svc.window}, func(context.Context) ([]byte, error) {
				return svc.call(r.Key), nil
			})
			if err != nil {
				return idem.Result{}, err
			}
			if fail {
				return idem.Result{}, errors.New("the commit was refused")
			}
			return idem.Result{Response: id}, nil
		}
		if _, err := c.Do(ctx, req("payout-1", `{}`), handler); err == nil {
			t.Fatal("the first attempt succeeded, want it failed after its step")
		}
		pk, _ := c.RecordKey("payout-1")
		rec, err := e.store.Get(ctx, pk, e.clock.Now())
		if err != nil || rec.Status != persistence.StatusFailed {
			t.Fatalf("record after the failure: %+v, %v", rec, err)
		}
		if min := e.clock.Now().Add(14 * 24 * time.Hour); rec.ExpiresAt.Before(min) {
			t.Errorf("the FAILED record expires at %s, before the dead-letter queue lets go of its message (%s)", rec.ExpiresAt, min)
		}
		e.clock.Advance(8 * 24 * time.Hour)
		deleteIfExpired(t, e, pk)
		fail = false
		res, err := c.Do(ctx, req("payout-1", `{}`), handler)
		if err != nil {
			t.Fatalf("the redrive on day 8: %v", err)
		}
		if n := svc.applications("payout-1"); n != 1 {
			t.Errorf("the service applied the transfer %d times, want 1", n)
		}
		if want, _ := svc.lookup("payout-1"); string(res.Response) != string(want) {
			t.Errorf("response %q, want the recorded answer %q", res.Response, want)
		}
		// The expiry never moves earlier: the ingress may have taken it for its own key's.
		if done, err := e.store.Get(ctx, pk, e.clock.Now()); err != nil || done.ExpiresAt.Before(rec.ExpiresAt) {
			t.Errorf("the completed record expires at %v (%v), before the failed one did (%s)", done, err, rec.ExpiresAt)
		}
	})
}

// TestStepPastTheKeyWindow (issue 37, hole 5): the first attempt's call is applied and
// its answer lost, so its step is not recorded. A retry within the service's key window
// calls again and gets the same answer; past it, the retry never calls blindly: with a
// lookup it records what the service says, without one it parks the message (a
// permanent failure, the record kept). Near the window's end, a call that may take
// Service.MaxFlight to arrive counts as past it.
func TestStepPastTheKeyWindow(t *testing.T) {
	for _, c := range []struct {
		name      string
		after     time.Duration
		lookup    bool
		maxFlight time.Duration
		calls     int   // the service's calls, lookups aside
		err       error // of the retry
	}{
		{"within the window", time.Hour, false, 0, 2, nil},
		{"within the window, and its flight", 23 * time.Hour, false, 10 * time.Minute, 2, nil},
		// A call made 5 minutes before the window ends may arrive 10 minutes later.
		{"within the window, not its flight, without a lookup", 24*time.Hour - 5*time.Minute, false, 10 * time.Minute, 1, idem.ErrPastKeyWindow},
		{"within the window, not its flight, with a lookup", 24*time.Hour - 5*time.Minute, true, 10 * time.Minute, 1, nil},
		{"past the window, with a lookup", 25 * time.Hour, true, 0, 1, nil},
		{"past the window, without a lookup", 25 * time.Hour, false, 0, 1, idem.ErrPastKeyWindow},
		// A lookup that finds the call applied is the truth, whatever the flight (hole 31).
		{"past the window, with a lookup, the flight longer than the window", 25 * time.Hour, true, 48 * time.Hour, 1, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			memoryAndMoto(t, func(t *testing.T, e *env) {
				ctx := context.Background()
				cl := e.client(t)
				svc := newForgetfulService(e.clock, 24*time.Hour)
				lost := true
				handler := svc.transfer(idem.Service{KeyWindow: svc.window, MaxFlight: c.maxFlight}, c.lookup, func(key string) ([]byte, error) {
					id := svc.call(key)
					if lost {
						return nil, errors.New("the answer was lost")
					}
					return id, nil
				})
				if _, err := cl.Do(ctx, req("payout-1", `{}`), handler); err == nil {
					t.Fatal("the first attempt succeeded, want its answer lost")
				}
				lost = false
				e.clock.Advance(c.after)
				res, err := cl.Do(ctx, req("payout-1", `{}`), handler)
				if c.err != nil {
					if !errors.Is(err, c.err) || !idem.IsPermanent(err) {
						t.Fatalf("retry: %v, want a permanent %v", err, c.err)
					}
					pk, _ := cl.RecordKey("payout-1")
					if rec, err := e.store.Get(ctx, pk, e.clock.Now()); err != nil || rec.Status != persistence.StatusFailed || rec.Retryable {
						t.Errorf("the parked message's record: %+v, %v; want it kept, FAILED for good", rec, err)
					}
				} else if want, _ := svc.lookup("payout-1"); err != nil || string(res.Response) != string(want) {
					t.Fatalf("retry: response %q, err %v; want %q", res.Response, err, want)
				}
				if n := svc.applications("payout-1"); n != 1 {
					t.Errorf("the service applied the transfer %d times, want 1", n)
				}
				if svc.calls != c.calls {
					t.Errorf("the service got %d calls, want %d", svc.calls, c.calls)
				}
			})
		})
	}
}

// TestDeadLetteredAgainKeepsTheRecord (issue 37, found by the simulator's late redrive,
// seed 1874): a message parked past its service's key window leaves a FAILED record that
// holds its step. A copy of the message that comes later (a producer's resend, an
// operator's redrive) is dead-lettered against that record: the dead-letter queue keeps
// the copy for its whole retention from then on, so the record must live as long, or
// the copy, redriven once the record is gone, calls the service again.
func TestDeadLetteredAgainKeepsTheRecord(t *testing.T) {
	memoryAndMoto(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.TTL, cfg.DLQRetention = 2*time.Hour, 24*time.Hour })
		svc := newForgetfulService(e.clock, time.Minute)
		fail := true
		parking := func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			_, err := r.Attempt.StepWith(ctx, "reserve", idem.Service{KeyWindow: svc.window}, func(context.Context) ([]byte, error) {
				return svc.call(r.Key), nil
			})
			if err != nil {
				return idem.Result{}, err
			}
			if fail {
				return idem.Result{}, idem.Permanent(errors.New("the commit was refused for good"))
			}
			return idem.Result{Response: []byte("done")}, nil
		}
		if _, err := c.Do(ctx, req("pick-1", `{}`), parking); !idem.IsPermanent(err) {
			t.Fatalf("first delivery: %v, want a permanent failure after the step", err)
		}
		pk, _ := c.RecordKey("pick-1")
		e.clock.Advance(20 * time.Hour) // the record's first expiry is a day and DLQRetention away
		if _, err := c.Do(ctx, req("pick-1", `{}`), parking); !idem.IsPermanent(err) {
			t.Fatalf("the late copy: %v, want it dead-lettered against the stored failure", err)
		}
		rec, err := e.store.Get(ctx, pk, e.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		if min := e.clock.Now().Add(24 * time.Hour); rec.ExpiresAt.Before(min) {
			t.Errorf("after the late copy was dead-lettered, the record expires at %s, before the dead-letter queue lets go of the copy (%s)", rec.ExpiresAt, min)
		}
		if len(rec.Steps) != 1 || rec.Status != persistence.StatusFailed || rec.Retryable {
			t.Errorf("the record changed beyond its expiry: %+v", rec)
		}
		e.clock.Advance(30 * time.Hour) // past the first expiry, within the copy's retention
		deleteIfExpired(t, e, pk)
		fail = false
		if _, err := c.Do(ctx, req("pick-1", `{}`), parking); !idem.IsPermanent(err) {
			t.Fatalf("the copy redriven: %v, want it dead-lettered again (its record still says FAILED)", err)
		}
		if n := svc.applications("pick-1"); n != 1 {
			t.Errorf("the service applied the reservation %d times, want 1", n)
		}
	})
}

// TestAStepKeepsItsRecordAsLongAsTheDeadLetterQueue (issue 37, found by the simulator's
// late redrive, long run seed 38109): the record's expiry moves with the step that
// records an outside call, before the attempt ends. A holder that dies after its step
// leaves the record to the reaper, which fails it without touching its expiry; the
// message, parked by SQS after its last receive, waits in the dead-letter queue for
// DLQRetention, and redriven, must find the step recorded.
func TestAStepKeepsItsRecordAsLongAsTheDeadLetterQueue(t *testing.T) {
	memoryAndMoto(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.TTL, cfg.DLQRetention = 7*24*time.Hour, 14*24*time.Hour })
		svc := newForgetfulService(e.clock, 24*time.Hour)
		pk, _ := c.RecordKey("payout-1")
		var during *persistence.Record
		_, err := c.Do(ctx, req("payout-1", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			if _, err := r.Attempt.StepWith(ctx, "transfer", idem.Service{KeyWindow: svc.window}, func(context.Context) ([]byte, error) {
				return svc.call(r.Key), nil
			}); err != nil {
				return idem.Result{}, err
			}
			rec, err := e.store.Get(ctx, pk, e.clock.Now()) // what the reaper finds if the holder dies now
			during = rec
			return idem.Result{Response: []byte("ok")}, err
		})
		if err != nil {
			t.Fatal(err)
		}
		if min := e.clock.Now().Add(14 * 24 * time.Hour); during == nil || during.ExpiresAt.Before(min) {
			t.Fatalf("after its step the record expires at %v, before the dead-letter queue would let go of its message (%s)", during, min)
		}
	})
}

// TestALookupCannotSeeACallOnItsWay (simulator, seed 325015): the first attempt's call
// hangs on the network and its holder dies. Past the service's key window the retry's
// lookup finds no call, since the first has not reached the service yet. With a window
// shorter than a call's flight (Service.MaxFlight) the retry must not call: the hanging
// call can land after the service forgot the retry's, and be applied again. It parks
// the message instead. With a window at least the flight, a lookup that finds nothing
// is the truth, and the retry calls.
func TestALookupCannotSeeACallOnItsWay(t *testing.T) {
	const window = time.Minute
	for _, c := range []struct {
		name      string
		maxFlight time.Duration
		onItsWay  bool  // the first attempt's call hangs; otherwise it never left
		err       error // of the retry
	}{
		{"a call may be on its way: parked", 3 * time.Minute, true, idem.ErrPastKeyWindow},
		{"the window covers the flight: called", window, false, nil},
		{"no flight declared: called", 0, false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			memoryAndMoto(t, func(t *testing.T, e *env) {
				ctx := context.Background()
				cl := e.client(t)
				svc := newForgetfulService(e.clock, window)
				first := true
				handler := svc.transfer(idem.Service{KeyWindow: window, MaxFlight: c.maxFlight}, true, func(key string) ([]byte, error) {
					if first {
						return nil, errors.New("the call hangs on the network; its holder dies")
					}
					return svc.call(key), nil
				})
				if _, err := cl.Do(ctx, req("payout-1", `{}`), handler); err == nil {
					t.Fatal("the first attempt succeeded, want its call hanging")
				}
				first = false
				e.clock.Advance(window + time.Second)
				res, err := cl.Do(ctx, req("payout-1", `{}`), handler)
				if c.err != nil {
					if !errors.Is(err, c.err) || !idem.IsPermanent(err) {
						t.Fatalf("retry: %v, want a permanent %v", err, c.err)
					}
					if svc.calls != 0 {
						t.Fatalf("the retry called the service (%d calls) while the first call may be on its way", svc.calls)
					}
				} else if want, _ := svc.lookup("payout-1"); err != nil || string(res.Response) != string(want) {
					t.Fatalf("retry: response %q, err %v; want %q", res.Response, err, want)
				}
				if c.onItsWay {
					// The hanging call lands, past the window of anything the retry sent.
					e.clock.Advance(window)
					svc.call("payout-1")
				}
				if n := svc.applications("payout-1"); n != 1 {
					t.Errorf("the service applied the transfer %d times, want 1", n)
				}
			})
		})
	}
}
