package idem

import (
	"context"
	"fmt"
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
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.steps {
		if s == step {
			return true
		}
	}
	return false
}

// Step runs fn as the named recovery point unless an earlier attempt of the key
// completed it, then records it under the lease. A step's side effect happens outside
// the completion transaction, so fn must itself be safe to repeat if the process dies
// between fn returning and the step being recorded (pass the idempotency key on). Step
// refuses to start fn once the lease has ended by the client's clock.
func (a *Attempt) Step(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	if a == nil {
		return ErrNoLease
	}
	if a.single {
		return fmt.Errorf("idem: step %s: %w", name, ErrNotInThisMode)
	}
	if name == "" {
		return fmt.Errorf("idem: step name is empty")
	}
	if a.Done(name) {
		a.c.traceStepDone(ctx, a.lease.Key, name)
		return nil
	}
	ctx, span := a.c.startStep(ctx, a.lease.Key, name)
	err := a.step(ctx, name, fn)
	telemetry.EndSpan(span, err)
	return err
}

// step runs fn and records the step (Step, once it is known to be needed).
func (a *Attempt) step(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	a.mu.Lock()
	until, chosen := a.lease.Until, a.chosen
	a.mu.Unlock()
	// A holder past its own lease end may have been taken over: do not start a side
	// effect that the new holder may be running too. The record's fence catches the rest.
	grace := a.c.cfg.LeaseGrace
	now := a.c.cfg.Clock()
	if !now.Before(until) {
		return fmt.Errorf("idem: step %s: %w (lease ended at %s)", name, persistence.ErrLeaseLost, until.Format(time.RFC3339Nano))
	}
	if chosen && !now.Add(grace).Before(until) {
		// Within the grace of its end (a lease Extend chose: no grace covers it), a taker
		// whose clock runs ahead of this one's, by up to the grace, may find the lease
		// over. Extend it under the fence first: a takeover that landed before fails the
		// extension; one that saw the lease before it fails its own condition; one that
		// sees it after finds a lease of two graces.
		if err := a.Extend(ctx, 2*grace); err != nil {
			return fmt.Errorf("idem: step %s: %w", name, err)
		}
		a.mu.Lock()
		until = a.lease.Until
		a.mu.Unlock()
		if !a.c.cfg.Clock().Add(grace).Before(until) {
			return fmt.Errorf("idem: step %s: %w (lease ends at %s, within the grace of %s)", name, persistence.ErrLeaseLost, until.Format(time.RFC3339Nano), grace)
		}
	}
	if err := fn(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	l := a.lease
	a.mu.Unlock()
	if err := a.c.cfg.Store.AddStep(ctx, l, name, a.c.cfg.Clock()); err != nil {
		return err
	}
	a.mu.Lock()
	a.steps = append(a.steps, name)
	a.mu.Unlock()
	return nil
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
