package sim

import (
	"context"
	"time"
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

// gatewayCall is one call the outside service received.
type gatewayCall struct {
	c          *consumer
	rk, step   string
	token, run string
	issued     time.Time
}

// callGateway is the handler's call to the outside service, for the record rk it holds.
func (w *world) callGateway(ctx context.Context, c *consumer, rk, step, token, run string) error {
	call := gatewayCall{c: c, rk: rk, step: step, token: token, run: run, issued: time.Now()}
	_, err := w.do(ctx, "gateway", "Call", rk+"/"+step, nil, func() (any, error) {
		w.gatewayReceived(call)
		return nil, nil
	})
	return err
}

// gatewayReceived logs a call and checks it.
func (w *world) gatewayReceived(g gatewayCall) {
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
