package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/sim/simsqs"
)

// The outside service a stepping handler calls (a payment gateway, say): each call
// goes through the scheduler like any request, with its latency and faults (a failed
// call, an answer lost after the call was made, a crash around it), and the service
// logs it: the record key the caller holds, the step, the caller's token and run, and
// when the caller made it.
//
// The step check: no step runs in two holders at once. A call is a violation when, at
// the moment its holder made it (by the true clock), the record was held (IN_PROGRESS)
// by another, later holder, or the caller's own lease had already ended. The moment is
// when the call leaves the holder, not when it reaches the service: a call that hangs on
// the network can reach the service after a takeover, which no lease prevents, and is
// why a step must be safe to repeat (idem.Attempt.Step). A holder's lease ends its
// function timeout plus the grace after its invocation started, and Lambda stops the
// invocation at the timeout, so a holder never calls after its lease ends; a taker
// whose clock runs ahead sees the lease end early, by at most the drift (config.go),
// which the grace must cover.

//
// The service answers each key (the record key and the step) with the id of its
// application, the same id while it keeps the key. With a key window
// (config.keyWindow) it forgets a key that long after the call that applied it reached
// it (as a real service counts its window, from what it received), give or take the
// clocks' drift (the step judges the window by its own clock), and applies a call with
// it again: the outside check is that no key is applied twice. A step's call carries
// the answer of the step before it (fed): the chain check is that it is that step's
// application. Its lookup (config.lookup) answers a key's application from its records,
// which it keeps for good.

// gatewayCall is one call the outside service received.
type gatewayCall struct {
	c          *consumer
	rk, step   string
	fed        string // the answer of the step before, that the handler passed on
	token, run string
	issued     time.Time
}

// stepKey names a record's step for whom: the service's keys are by consumer
// (observations.keys), its lookups' answers by the asking holder's token (lookups).
func stepKey(who, rk, step string) string { return who + "|" + rk + "/" + step }

// gatewayKey is a key's last application.
type gatewayKey struct {
	id string
	at time.Time // when the call that applied it reached the service
}

// callGateway is the handler's call to the outside service, for the record rk it holds;
// it returns the service's answer, the id of the key's application.
func (w *world) callGateway(ctx context.Context, c *consumer, a *idem.Attempt, step, fed, run string) ([]byte, error) {
	rk := a.RecordKey()
	call := gatewayCall{c: c, rk: rk, step: step, fed: fed, token: a.Token(), run: run, issued: time.Now()}
	id, err := w.do(ctx, "gateway", "Call", rk+"/"+step, nil, func() (any, error) {
		return w.gatewayReceived(call), nil
	})
	if err != nil {
		return nil, err
	}
	return []byte(id.(string)), nil
}

// lookupGateway is the handler's lookup of its call for a's record's step: the id of
// its application, or false when none was. The service notes what it answered to
// whom, for checkParks.
func (w *world) lookupGateway(ctx context.Context, c *consumer, a *idem.Attempt, step string) ([]byte, bool, error) {
	rk := a.RecordKey()
	id, err := w.do(ctx, "gateway", "Lookup", rk+"/"+step, nil, func() (any, error) {
		id := w.obs.keys[stepKey(c.name, rk, step)].id
		w.obs.lookups[stepKey(a.Token(), rk, step)] = id != ""
		return id, nil
	})
	if err != nil {
		return nil, false, err
	}
	return []byte(id.(string)), id.(string) != "", nil
}

// gatewayReceived logs a call, checks it and answers it.
func (w *world) gatewayReceived(g gatewayCall) string {
	if took := time.Since(g.issued); took > maxFlight {
		// The handler declares maxFlight as the network's bound (idem.Service.MaxFlight).
		w.obs.violation("flight", "run %s's call of %s for record %s of %s took %s to reach the service, past the network's bound of %s", g.run, g.step, g.rk, g.c.name, took, maxFlight)
	}
	id := w.gatewayApply(g)
	w.obs.gateway = append(w.obs.gateway, g)
	w.obs.nameToken(g.token, g.run)
	w.tracef("gateway: %s of %s by run %s, made at %s", g.step, g.rk, g.run, g.issued.Sub(w.start).Round(time.Millisecond))
	var own, cur *hold
	for i, h := range w.obs.holds[holdKey(g.c, g.rk)] {
		if h.at.After(g.issued) {
			break
		}
		if h.token == g.token && h.status == "IN_PROGRESS" {
			own = &w.obs.holds[holdKey(g.c, g.rk)][i]
		}
		cur = &w.obs.holds[holdKey(g.c, g.rk)][i]
	}
	switch {
	case own == nil:
		w.obs.violation("step", "run %s called %s for record %s of %s without ever holding it", g.run, g.step, g.rk, g.c.name)
	case cur.token != g.token && cur.status == "IN_PROGRESS":
		w.obs.violation("step", "run %s called %s for record %s of %s at %s, while %s held the record (since %s): a step in two holders at once",
			g.run, g.step, g.rk, g.c.name, w.since(g.issued), w.holderName(cur.token), w.since(cur.at))
	case g.issued.After(own.until.Add(w.stepSlack())):
		w.obs.violation("step", "run %s called %s for record %s of %s at %s, after its lease ended at %s by the true clock",
			g.run, g.step, g.rk, g.c.name, w.since(g.issued), w.since(own.until))
	}
	return id
}

// gatewayApply applies g's key, unless the service still keeps it, and returns the id
// of its application.
func (w *world) gatewayApply(g gatewayCall) string {
	k := stepKey(g.c.name, g.rk, g.step)
	last, ok := w.obs.keys[k]
	window := w.sc.cfg.keyWindow
	now := time.Now()
	if ok && (window == 0 || now.Sub(last.at) < window+2*maxDrift) {
		return last.id
	}
	if ok && !w.newExecution(g, last.at) {
		w.obs.violation("outside", "run %s's call of %s for record %s of %s, made at %s, reached the service at %s, past its key window of %s since it applied the key at %s: applied twice",
			g.run, g.step, g.rk, g.c.name, w.since(g.issued), w.since(now), window, w.since(last.at))
	}
	if i := slices.Index(gatewaySteps, g.step); i > 0 {
		if before := w.obs.keys[stepKey(g.c.name, g.rk, gatewaySteps[i-1])].id; g.fed != before {
			w.obs.violation("outside", "run %s called %s for record %s of %s fed %q, but %s was applied as %q", g.run, g.step, g.rk, g.c.name, g.fed, gatewaySteps[i-1], before)
		}
	}
	w.obs.keys[k] = gatewayKey{id: fmt.Sprintf("%s-%d", g.step, len(w.obs.gateway)+1), at: now}
	return w.obs.keys[k].id
}

// newExecution reports whether g's record was created (again) after from: the key's
// record expired between the application at from and g's call, so g belongs to a new
// execution of the key, by contract, which may apply a key the service forgot again.
func (w *world) newExecution(g gatewayCall, from time.Time) bool {
	rec, err := g.c.store.Get(context.Background(), g.rk, g.issued)
	return err == nil && rec.CreatedAt.After(from.Add(2*maxDrift))
}

// since is a moment as the trace writes it: the time since the start.
func (w *world) since(t time.Time) time.Duration { return t.Sub(w.start).Round(time.Millisecond) }

// stepSlack is how long after its lease's end by the true clock a holder may still start
// a step: none when its lease outlives its invocation (it is stopped before); with a
// lease it lets lapse while it runs (config.beat), the drift of its own clock, since
// idem.Attempt.Step checks the lease end by that clock.
func (w *world) stepSlack() time.Duration {
	if w.sc.cfg.beat && w.sc.cfg.drift {
		return maxDrift
	}
	return 0
}

// stepPark is a step that StepWith parked past its service's key window
// (idem.ErrPastKeyWindow).
type stepPark struct {
	c               *consumer
	rk, token, step string
	msg             simsqs.Message // the input message whose delivery parked it
	at              time.Time      // by the true clock
	clock           time.Time      // by the parking environment's clock, which StepWith read before
}

// notePark notes a park for checkParks, under w.mu: handlers run beside each other.
func (w *world) notePark(ctx context.Context, c *consumer, a *idem.Attempt, step string, clock time.Time) {
	p := stepPark{c: c, rk: a.RecordKey(), token: a.Token(), step: step, at: time.Now(), clock: clock}
	if m, ok := idem.MessageFromContext(ctx); ok {
		if i := slices.IndexFunc(invOf(ctx).msgs, func(x simsqs.Message) bool { return x.ID == m.MessageId }); i >= 0 {
			p.msg = invOf(ctx).msgs[i]
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.parks = append(w.parks, p)
}

// checkParks: a step is parked past its service's key window only where StepWith's
// promise lets it, and it returns the operations parked, the only ones whose dead letter
// may give that reason (reasons). StepWith counts from the key's first execution
// (Attempt.since): none when the parking attempt created the record (it is the first
// execution, or it replaced an expired record of another payload); the record's creation
// when it took the record over; the replaced record's creation when it replaced an
// expired record of its own payload (created_at, to the millisecond, by its creator's
// clock). It parks once the window less a call's flight has passed since then by its own
// clock, and only without a lookup, or with a window shorter than the flight once its
// lookup answered that no call was applied.
func (w *world) checkParks() map[*op]bool {
	cfg, parked := w.sc.cfg, map[*op]bool{}
	for _, p := range w.parks {
		parked[w.opOf(p.msg)] = true // by the message, which a redrive may have sent again
		where := fmt.Sprintf("record %s of %s parked %s at %s past its service's key window", p.rk, p.c.name, p.step, w.since(p.at))
		switch applied, asked := w.obs.lookups[stepKey(p.token, p.rk, p.step)]; {
		case cfg.lookup && cfg.keyWindow >= maxFlight:
			w.obs.violation("park", "%s of %s, though its lookup answers it (a call reaches the service within %s)", where, cfg.keyWindow, maxFlight)
			continue
		case cfg.lookup && (!asked || applied):
			w.obs.violation("park", "%s without its lookup answering that no call was applied (asked: %t, applied: %t)", where, asked, applied)
		}
		since, first := w.parkedSince(p)
		switch {
		case since == 0:
			w.obs.violation("park", "%s in the key's first execution for StepWith: %s", where, first)
		case p.clock.Before(time.UnixMilli(since).Add(cfg.keyWindow - maxFlight)):
			w.obs.violation("park", "%s, %s after the creation it counts from by its own clock: the window (%s) less a call's flight (%s) is %s",
				where, p.clock.Sub(time.UnixMilli(since)).Round(time.Millisecond), cfg.keyWindow, maxFlight, cfg.keyWindow-maxFlight)
		}
	}
	return parked
}

// parkedSince returns, for park p, the creation (created_at, epoch milliseconds)
// StepWith counts from; or 0 and why the parking attempt's is the key's first execution.
func (w *world) parkedSince(p stepPark) (int64, string) {
	hs := w.obs.holds[holdKey(p.c, p.rk)]
	i := slices.IndexFunc(hs, func(h hold) bool { return h.token == p.token && h.status == string(persistence.StatusInProgress) })
	switch {
	case i < 0 || hs[i].at.After(p.at):
		return 0, "the attempt never held the record"
	case i == 0 || hs[i-1].status == "":
		return 0, "the attempt created the record"
	}
	since := hs[i].created // a takeover keeps the record's creation
	if prev := hs[i-1]; prev.created != since {
		if prev.hash != hs[i].hash {
			return 0, "the attempt replaced an expired record of another payload"
		}
		since = prev.created // a replacement under its own payload
	}
	return since, ""
}
