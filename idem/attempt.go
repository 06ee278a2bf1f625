package idem

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemgo/sqs-lambda-consumer/idem/internal/handoff"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
)

// Attempt is a handler's hold on its key: one acquisition, fenced by its lease token.
// Its methods are safe for concurrent use. A nil *Attempt (a handler called outside the
// middleware) returns ErrNoLease from every method that writes.
type Attempt struct {
	c       *Client
	mu      sync.Mutex
	lease   persistence.Lease
	number  int
	steps   []string
	answers map[string][]byte // the recorded answers of steps (StepAnswer)
	// since is when an earlier execution of the key may first have called a step that
	// is not recorded: the record's creation; zero when this attempt is the key's first.
	since   time.Time
	exp     time.Time           // the record's expiry as this attempt acquired it
	stepped bool                // a step of this attempt began (StepAnswer ran past its Done check)
	expired *persistence.Record // the expired record this attempt replaced, if it was still stored
	hash    string              // the payload's fingerprint
	single  bool                // ModeSingleTransaction: no lease, no steps
	prev    *persistence.Record // the record this attempt took over (its holder's lease had ended), for the trace
	chosen  bool                // the lease end is one Extend chose, which no grace covers
}

// Number is 1 for the first acquisition of the key and grows with each takeover.
func (a *Attempt) Number() int {
	if a == nil {
		return 0
	}
	return a.number
}

// RecordKey returns the key of the record this attempt holds (Client.RecordKey): a
// handler whose guard is the record's home (Result.HomeGuard) writes its guard there, at
// DynamoStore.Key(RecordKey()).
func (a *Attempt) RecordKey() string {
	if a == nil {
		return ""
	}
	return a.lease.Key
}

// Token returns the fencing token of this attempt.
func (a *Attempt) Token() string {
	if a == nil {
		return ""
	}
	return a.lease.Token
}

// LeaseUntil returns when the lease ends unless extended.
func (a *Attempt) LeaseUntil() time.Time {
	if a == nil {
		return time.Time{}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lease.Until
}

// Expired returns the record of an earlier execution of the key that had expired (its
// TTL passed) but was still stored when this attempt replaced it, with the same payload;
// nil otherwise. A handler can use it to learn that the key was handled before, beyond
// the retention.
func (a *Attempt) Expired() *persistence.Record {
	if a == nil || a.expired == nil {
		return nil
	}
	return a.expired.Clone()
}

// Done reports whether step was completed by this or an earlier attempt.
func (a *Attempt) Done(step string) bool {
	if a == nil {
		return false
	}
	_, done := a.Answer(step)
	return done
}

// Step runs fn as the named recovery point unless an earlier attempt of the key
// completed it, then records it under the lease. A step's side effect happens outside
// the completion transaction, so fn must itself be safe to repeat if the process dies
// between fn returning and the step being recorded (pass the idempotency key on). Step
// refuses to start fn once the lease has ended by the client's clock. A step whose
// answer the handler needs later (an id the outside service gave) is a StepAnswer.
func (a *Attempt) Step(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	_, err := a.run(ctx, name, false, func(ctx context.Context) ([]byte, error) { return nil, fn(ctx) })
	return err
}

// StepAnswer is Step for a call whose answer the handler needs: fn's answer is recorded
// with the step, in the same write under the lease's fence, and a retry or a takeover
// that finds the step completed gets that answer back without calling fn again. The
// next step, and the commit (Answer), may use it. The answers of one record are bounded:
// at most persistence.MaxStepAnswers bytes (16 KiB), answers and step names added up; an
// answer that would pass it is ErrAnswerTooLarge (permanent) before anything is
// recorded, fn having run. Keep the answer to what the handler needs (an id, a status),
// not the service's whole response. A step completed by Step, without an answer, gives
// an empty one.
func (a *Attempt) StepAnswer(ctx context.Context, name string, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	return a.run(ctx, name, true, fn)
}

// Service is what a step knows of the outside service it calls with the idempotency
// key (StepWith).
type Service struct {
	// KeyWindow is how long the service keeps an idempotency key (Stripe keeps its for
	// 24 hours); 0: for ever. Past it, a call with the same key is applied again.
	KeyWindow time.Duration
	// Lookup asks the service what became of a call made with the key, from the
	// service's own records (which outlive its key window): applied, with the answer the
	// step would have recorded, or not applied (nothing of it there). Nil: the service
	// has no lookup.
	Lookup func(ctx context.Context) (answer []byte, applied bool, err error)
	// MaxFlight is the longest a call can take to reach the service once made (the
	// client's timeout, and what the network may hold a request after it: TCP lets a
	// segment live two minutes, its maximum segment lifetime), plus the longest a
	// lookup's answer can take to come back. Two calls with one key that reach the
	// service more than KeyWindow apart are both applied, so:
	//   - a retry calls without asking only while KeyWindow less MaxFlight has not passed
	//     since the key's first execution (its call then arrives within the window);
	//   - a lookup cannot see a call still on its way, so one that finds no call is
	//     trusted only when KeyWindow is MaxFlight or more (an earlier attempt's call has
	//     then arrived before the lookup, or arrives within the window of the call made
	//     after it); with a shorter window the step parks its message as without a lookup
	//     (ErrPastKeyWindow).
	// 0: calls reach the service well within KeyWindow.
	MaxFlight time.Duration
}

// StepWith is StepAnswer for a step whose service forgets keys after svc.KeyWindow. A
// step that is not recorded, in an attempt that is not the key's first execution, may
// have been called by an earlier one (its call made, its recording lost); the record does
// not say when, so its first call is counted from the key's first acquisition. Once
// that is KeyWindow less svc.MaxFlight or more ago, a call with the same key could reach
// the service after it forgot the key and be applied again, so the step never calls
// blindly: it asks svc.Lookup, records the answer of a call that was
// applied and calls fn only when none was (and the window is at least svc.MaxFlight);
// without a Lookup, it returns
// ErrPastKeyWindow, a permanent failure that parks the message in the dead-letter queue
// with the reason, its record kept, for a person to reconcile with the service.
func (a *Attempt) StepWith(ctx context.Context, name string, svc Service, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	if a == nil {
		return nil, ErrNoLease
	}
	return a.run(ctx, name, true, func(ctx context.Context) ([]byte, error) {
		// A call made now reaches the service at most MaxFlight later: it calls without
		// asking only while that is within the window of the key's first execution.
		since := a.since
		if svc.KeyWindow <= 0 || since.IsZero() || a.c.cfg.Clock().Before(since.Add(svc.KeyWindow-svc.MaxFlight)) {
			return fn(ctx)
		}
		if svc.Lookup == nil {
			return nil, fmt.Errorf("idem: step %s: %w: the key's first execution began %s, the service keeps keys %s and a call takes up to %s to reach it (no lookup to ask it)", name, ErrPastKeyWindow, since.Format(time.RFC3339), svc.KeyWindow, svc.MaxFlight)
		}
		answer, applied, err := svc.Lookup(ctx)
		if err != nil {
			return nil, fmt.Errorf("idem: step %s: look up its call past the service's key window: %w", name, err)
		}
		if applied {
			return answer, nil
		}
		if svc.KeyWindow < svc.MaxFlight {
			return nil, fmt.Errorf("idem: step %s: %w: the service has no call with the key, but an earlier attempt's call may still be on its way (a call takes up to %s to reach it, and it keeps keys %s)", name, ErrPastKeyWindow, svc.MaxFlight, svc.KeyWindow)
		}
		// The lookup took time: the lease is checked again before the call, as before any.
		if until := a.LeaseUntil(); !a.c.cfg.Clock().Before(until) {
			return nil, fmt.Errorf("idem: step %s: %w (lease ended at %s)", name, persistence.ErrLeaseLost, until.Format(time.RFC3339Nano))
		}
		return fn(ctx)
	})
}

// Answer returns the answer recorded with step (StepAnswer) by this or an earlier
// attempt, and whether the step is completed.
func (a *Attempt) Answer(step string) ([]byte, bool) {
	if a == nil {
		return nil, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !slices.Contains(a.steps, step) {
		return nil, false
	}
	return append([]byte{}, a.answers[step]...), true
}

// run is Step and StepAnswer: fn's answer is recorded when answered.
func (a *Attempt) run(ctx context.Context, name string, answered bool, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	if a == nil {
		return nil, ErrNoLease
	}
	if a.single {
		return nil, fmt.Errorf("idem: step %s: %w", name, ErrNotInThisMode)
	}
	if name == "" {
		return nil, fmt.Errorf("idem: step name is empty")
	}
	if answer, done := a.Answer(name); done {
		a.c.traceStepDone(ctx, a.lease.Key, name)
		return answer, nil
	}
	a.mu.Lock()
	a.stepped = true
	a.mu.Unlock()
	ctx, span := a.c.startStep(ctx, a.lease.Key, name)
	answer, err := a.step(ctx, name, answered, fn)
	telemetry.EndSpan(span, err)
	return answer, err
}

// step runs fn and records the step, with its answer when answered (run, once the step
// is known to be needed).
func (a *Attempt) step(ctx context.Context, name string, answered bool, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	a.mu.Lock()
	until, chosen := a.lease.Until, a.chosen
	a.mu.Unlock()
	// A holder past its own lease end may have been taken over: do not start a side
	// effect that the new holder may be running too. The record's fence catches the rest.
	grace := a.c.cfg.LeaseGrace
	now := a.c.cfg.Clock()
	if !now.Before(until) {
		return nil, fmt.Errorf("idem: step %s: %w (lease ended at %s)", name, persistence.ErrLeaseLost, until.Format(time.RFC3339Nano))
	}
	if chosen && !now.Add(grace).Before(until) {
		// Within the grace of its end (a lease Extend chose: no grace covers it), a taker
		// whose clock runs ahead of this one's, by up to the grace, may find the lease
		// over. Extend it under the fence first: a takeover that landed before fails the
		// extension; one that saw the lease before it fails its own condition; one that
		// sees it after finds a lease of two graces.
		if err := a.Extend(ctx, 2*grace); err != nil {
			return nil, fmt.Errorf("idem: step %s: %w", name, err)
		}
		a.mu.Lock()
		until = a.lease.Until
		a.mu.Unlock()
		if !a.c.cfg.Clock().Add(grace).Before(until) {
			return nil, fmt.Errorf("idem: step %s: %w (lease ends at %s, within the grace of %s)", name, persistence.ErrLeaseLost, until.Format(time.RFC3339Nano), grace)
		}
	}
	answer, err := fn(ctx)
	if err != nil {
		return nil, err
	}
	var stored []byte // nil: no answer to record (Step)
	if answered {
		stored = append([]byte{}, answer...)
	}
	a.mu.Lock()
	l := a.lease
	if answered {
		err = persistence.CheckAnswer(a.answers, name, stored)
	}
	a.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("idem: step %s: %w", name, err)
	}
	now = a.c.cfg.Clock() // after the call
	exp := a.c.steppedUntil(a, now)
	if err := a.c.cfg.Store.AddStep(ctx, l, name, stored, exp, now); err != nil {
		return nil, err
	}
	a.mu.Lock()
	if !exp.IsZero() {
		a.exp = exp
	}
	a.steps = append(a.steps, name)
	if stored != nil {
		if a.answers == nil {
			a.answers = map[string][]byte{}
		}
		a.answers[name] = stored
	}
	a.mu.Unlock()
	return answer, nil
}

// Extend moves the lease end to now+d (capped by Config.MaxLease), for a handler that
// needs longer than its invocation deadline allowed for. A d shorter than the handler's
// time to its next Extend lets the lease lapse while it runs: the reaper may then fail it
// (an extension after its listing still wins: TestReapLosesToAnExtension), and another
// delivery may take the key over, up to the clocks' drift early, since no grace covers a
// lease its holder chose (Step extends such a lease when it ends within the grace before
// it starts). ErrLeaseLost means the lease
// is gone: stop and return. Under NewSQSHandler with SQSConfig.Visibility, the message's
// visibility moves to the new lease end too.
func (a *Attempt) Extend(ctx context.Context, d time.Duration) error {
	if a == nil {
		return ErrNoLease
	}
	if a.single {
		return fmt.Errorf("idem: extend: %w", ErrNotInThisMode)
	}
	if d <= 0 {
		return fmt.Errorf("idem: extend by %s: must be positive", d)
	}
	now := a.c.cfg.Clock()
	until := now.Add(min(d, a.c.cfg.MaxLease)).Truncate(time.Millisecond)
	a.mu.Lock()
	l := a.lease
	a.mu.Unlock()
	if err := a.c.cfg.Store.Extend(ctx, l, until, now); err != nil {
		return err
	}
	a.mu.Lock()
	a.lease.Until, a.chosen = until, true
	a.mu.Unlock()
	handoff.Extended(ctx, until) // the message waits as long (SQSConfig.Visibility)
	return nil
}

// Applied reads a guard item (strongly consistent) before the handler runs its steps,
// for a handler whose steps call systems outside DynamoDB: it reports whether the effect
// the guard proves is already in place for this payload. Then the key was handled
// before, beyond the record's retention (the record was deleted by its TTL), and the
// handler returns Result{Response: ..., Guarded: true} without repeating its steps.
// It returns ErrPayloadMismatch when the guard holds another payload's fingerprint, and
// false when the item is absent. table and key locate the guard Put the handler returns
// in Result.Writes (listed in Result.Guards). The store must implement GuardReader
// (DynamoStore and MemoryStore do).
func (a *Attempt) Applied(ctx context.Context, table string, key map[string]types.AttributeValue) (bool, error) {
	if a == nil {
		return false, ErrNoLease
	}
	gr, ok := a.c.cfg.Store.(persistence.GuardReader)
	if !ok {
		return false, fmt.Errorf("idem: applied: the store (%T) cannot read guards", a.c.cfg.Store)
	}
	item, err := gr.ReadGuard(ctx, table, key)
	if err != nil || len(item) == 0 {
		return false, err
	}
	if v, ok := item[persistence.AttrGuardHash].(*types.AttributeValueMemberS); ok && v.Value != a.hash {
		return false, &guardMismatchError{applied: v.Value}
	}
	return true, nil
}

// guardMismatchError is ErrPayloadMismatch found by a guard: the effect is in place for
// the payload whose fingerprint is applied.
type guardMismatchError struct{ applied string }

func (e *guardMismatchError) Error() string {
	return ErrPayloadMismatch.Error() + " (a guard holds the effect of another payload)"
}

func (e *guardMismatchError) Is(target error) bool { return target == ErrPayloadMismatch }
