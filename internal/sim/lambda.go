package sim

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"testing/synctest"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/reaper/reaperapp"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/sim/simsqs"
)

// The Lambda side: the SQS event source mapping's pollers, execution environments
// (warm between invocations, fresh after a crash or a timeout), invocations with a
// deadline, and the reaper's schedule.

// slot is one concurrent poller of the event source mapping, with the execution
// environment that serves it.
type slot struct {
	id      int
	c       *consumer
	busy    bool
	env     *environment
	polling bool // a poll is scheduled
	gen     int  // the scheduled poll's generation: an older one is dropped
}

// environment is one Lambda execution environment: the handler built at its init,
// whose warm cache lives as long as it does.
type environment struct {
	id       int
	consumer consumerapp.Handler
	clock    func() time.Time // the environment's clock, drifted when the configuration says
}

// invocation is one call of a function.
type invocation struct {
	id   int
	kind string // consumer, reaper, ingress
	c    *consumer
	slot *slot
	http *httpCall // ingress: the client's request
	// cut is a network partition of the invocation (faultRates.partition): a request it
	// makes from cut[0] waits until cut[1] to leave. It starts at the invocation's
	// cutAt-th request, for cutFor: a partition matters when the invocation is busy.
	cut      [2]time.Time
	cutAt    int
	cutFor   time.Duration
	reqs     int
	msgs     []simsqs.Message
	deadline time.Time
	resp     events.SQSEventResponse
	err      error

	mu   sync.Mutex
	dead bool
}

func (inv *invocation) String() string { return fmt.Sprintf("%s-%d", inv.kind, inv.id) }

func (inv *invocation) isDead() bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.dead
}

// newEnv runs an environment's init: the consumer's handler, built as main builds it.
func (w *world) newEnv(c *consumer) (*environment, error) {
	w.envSeq++
	sc := w.sc
	clock := w.newClock()
	cfg := consumerapp.Config{
		FunctionTimeout: c.timeout,
		Handler:         &handler{w: w, c: c, db: ddbAPI{w}, outFIFO: w.outFIFOURL, outStd: w.outStdURL, clock: clock},
		Layout:          c.layout, DLQURL: w.dlqURL, Scope: c.scope, TTL: sc.ttl, DLQRetention: sc.cfg.dlqRetention, LeaseGrace: c.grace,
		Shards: sc.shards, Concurrency: sc.concurrency, DeadlineMargin: sc.margin, CacheSize: sc.cacheSize,
		KeyField: sc.keyField, KeySource: sc.keySource, MetricsNamespace: "Sim", Mode: sc.mode, Keys: stackKeys,
	}
	if c.checkVisibility {
		cfg.VisibilityTimeout = c.visibility
	}
	h, err := consumerapp.New(cfg, consumerapp.Deps{
		DynamoDB: ddbAPI{w}, SQS: sqsAPI{w}, Logs: w.trace.logs(), Metrics: io.Discard, Owner: fmt.Sprintf("env-%d", w.envSeq),
		Clock: clock, Tracer: sc.cfg.tracer(),
	})
	if err != nil {
		return nil, err
	}
	return &environment{id: w.envSeq, consumer: h, clock: clock}, nil
}

// newClock is a new environment's clock: the true one, or, when the configuration
// drifts, the true one off by up to maxDrift either way.
func (w *world) newClock() func() time.Time {
	if !w.sc.cfg.drift {
		return time.Now
	}
	off := time.Duration(w.skew.Int64N(int64(2*maxDrift)+1)) - maxDrift
	return func() time.Time { return time.Now().Add(off) }
}

// poll is a poller's long poll: it receives a batch when there is one, and invokes its
// environment with it after the batching window (and, under faults, a delay: Lambda
// throttled, or slow to scale), so the invocation may start well after the receive
// started the messages' visibility timeout.
func (w *world) poll(s *slot, gen int) {
	if gen != s.gen {
		return // replaced by a later poll
	}
	s.polling = false
	if s.busy || w.stopped {
		return
	}
	msgs := w.sqs.Receive(s.c.input, w.sc.batchSize, w.rng)
	if len(msgs) == 0 {
		// Nothing to receive: poll again when a message becomes visible, in a second
		// when one is but its FIFO group is busy, or when a send wakes the poller
		// (wakePollers) when the queue is empty.
		switch t, now := w.sqs.NextVisible(s.c.input); {
		case now:
			w.schedulePoll(s, time.Now().Add(time.Second))
		case !t.IsZero():
			w.schedulePoll(s, t)
		}
		return
	}
	for _, m := range msgs {
		w.obs.received(m)
	}
	s.busy = true
	delay := time.Duration(w.rng.Int64N(int64(w.sc.window) + 1))
	if w.faultsOn() && w.p(w.sc.faults.lateInvoke) {
		delay += time.Duration(w.rng.Int64N(int64(s.c.visibility + s.c.timeout)))
	}
	w.tracef("poller %d receives %s; invokes in %s", s.id, msgIDs(msgs), delay.Round(time.Millisecond))
	w.at(time.Now().Add(delay), func() { w.invoke(s, msgs) })
}

func (w *world) schedulePoll(s *slot, t time.Time) {
	if s.polling {
		return
	}
	s.polling = true
	s.gen++
	gen := s.gen
	w.at(t, func() { w.poll(s, gen) })
}

// wakePollers is SQS answering the long polls that wait on c's input queue: a message
// arrived, and a waiting poll returns at once.
func (w *world) wakePollers(c *consumer) {
	for _, s := range c.slots {
		if !s.busy {
			s.polling = false
			w.schedulePoll(s, time.Now().Add(10*time.Millisecond))
		}
	}
}

func (w *world) invoke(s *slot, msgs []simsqs.Message) {
	if s.env != nil && w.faultsOn() && w.p(w.sc.faults.recycle) {
		w.tracef("Lambda replaces env-%d with a fresh environment", s.env.id)
		s.env = nil // Lambda reclaims idle environments: the next one starts cold, its cache empty
	}
	if s.env == nil {
		env, err := w.newEnv(s.c)
		if err != nil {
			w.obs.violation("init", "the consumer's init failed: %v", err)
			s.busy = false
			return
		}
		s.env = env
	}
	w.invSeq++
	inv := &invocation{id: w.invSeq, kind: "consumer", c: s.c, slot: s, msgs: msgs, deadline: time.Now().Add(s.c.timeout)}
	if w.faultsOn() && w.p(w.sc.faults.partition) {
		inv.cutAt, inv.cutFor = 1+w.rng.IntN(6), dur(w.rng, 5*time.Second, maxPartition)
	}
	ev := w.sqs.Event(s.c.input, msgs)
	w.tracef("%s starts on env-%d with %s, deadline in %s", inv, s.env.id, msgIDs(msgs), s.c.timeout)
	h := s.env.consumer
	w.launch(inv, func(ctx context.Context) func() {
		resp, err := h(ctx, ev)
		return func() { inv.resp, inv.err = resp, err }
	})
}

// launch runs an invocation as Lambda does: its code (run) in a goroutine of its own,
// under a context that carries the invocation and ends at its deadline, where Lambda
// kills it if it still runs. What run returns records the invocation's result; it runs
// under the world's lock, as the invocation is handed to the scheduler (finished).
func (w *world) launch(inv *invocation, run func(ctx context.Context) (record func())) {
	ctx, cancel := context.WithDeadline(context.WithValue(context.Background(), invKey{}, inv), inv.deadline)
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: inv.String()})
	w.live[inv] = true
	go func() {
		defer cancel()
		record := run(ctx)
		w.mu.Lock()
		record()
		w.finished = append(w.finished, inv)
		w.mu.Unlock()
	}()
	w.at(inv.deadline, func() {
		if !inv.isDead() && !w.obs.done[inv] {
			w.kill(inv, "timeout")
		}
	})
}

func sortedInvs(m map[*invocation]bool) []*invocation {
	out := make([]*invocation, 0, len(m))
	for inv := range m {
		out = append(out, inv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func msgIDs(msgs []simsqs.Message) string {
	s := ""
	for i, m := range msgs {
		if i > 0 {
			s += ","
		}
		s += m.ID
	}
	return "[" + s + "]"
}

// kill ends an invocation as Lambda does at a timeout or a crash: the process is gone,
// the requests it had in flight get no answer (they may still arrive), the whole batch
// counts as failed (nothing is deleted), and the environment is replaced.
func (w *world) kill(inv *invocation, why string) {
	inv.mu.Lock()
	if inv.dead {
		inv.mu.Unlock()
		return
	}
	inv.dead = true
	inv.mu.Unlock()
	w.tracef("%s killed: %s", inv, why)
	w.obs.killed++
	switch inv.kind {
	case "consumer":
		inv.slot.env = nil
		inv.slot.busy = false
		w.schedulePoll(inv.slot, time.Now().Add(time.Duration(w.rng.IntN(1000))*time.Millisecond))
	case "reaper":
		inv.c.reaping = false
	case "ingress":
		w.ingressKilled(inv)
	}
	answered := false
	for c := range w.inflight {
		if c.inv == inv {
			// Its goroutine must end (the simulation needs every goroutine to), so it
			// gets an error; the process it stands for is gone and does nothing more.
			c.answer(reply{err: errKilled})
			answered = true
		}
	}
	if answered {
		// What the woken goroutines log goes to the trace before anything else the
		// scheduler does: a replay prints the same trace.
		synctest.Wait()
	}
}

// finish is the end of an invocation that returned: the event source mapping deletes
// the records that succeeded.
func (w *world) finish(inv *invocation) {
	w.obs.done[inv] = true
	delete(w.live, inv)
	if inv.isDead() || w.stopped {
		return
	}
	switch inv.kind {
	case "reaper":
		inv.c.reaping = false
		w.tracef("%s done: err=%v", inv, inv.err)
		w.reaperDone(inv)
		return
	case "ingress":
		w.ingressDone(inv)
		return
	}
	s := inv.slot
	s.busy = false
	failed := map[string]bool{}
	for _, f := range inv.resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	if inv.err != nil {
		w.tracef("%s failed: %v", inv, inv.err)
	} else {
		w.tracef("%s done: %d of %d failed", inv, len(failed), len(inv.msgs))
		for _, m := range inv.msgs {
			if failed[m.ID] {
				continue
			}
			w.obs.acknowledged(w, inv, m)
			if w.faultsOn() && w.p(w.sc.faults.lostDelete) {
				w.tracef("%s: delete of %s lost", inv, m.ID)
				continue
			}
			if !w.sqs.Delete(s.c.input, m.Receipt(), m.ID) {
				w.tracef("%s: delete of %s refused (received again since)", inv, m.ID)
			}
		}
	}
	w.schedulePoll(s, time.Now())
}

// reap is c's reaper's schedule: a sweep, unless the last one still runs.
func (w *world) reap(c *consumer, rh reaperapp.Handler) {
	w.at(time.Now().Add(w.sc.reaperEvery), func() { w.reap(c, rh) })
	if c.reaping || !w.indexed(c) {
		return // a sweep of an empty index changes nothing: skipped, to save time
	}
	c.reaping = true
	w.invSeq++
	inv := &invocation{id: w.invSeq, kind: "reaper", c: c, deadline: time.Now().Add(w.sc.reaperTimeout)}
	w.tracef("%s starts for %s", inv, c.name)
	w.launch(inv, func(ctx context.Context) func() {
		_, err := rh(ctx, events.EventBridgeEvent{ID: inv.String(), DetailType: "Scheduled Event", Source: "aws.events"})
		return func() { inv.err = err }
	})
}

// reaperDone checks a sweep that returned: it fails only for a fault the simulation
// injected (a throttled or failed request, an answer lost, a transaction conflict),
// never for what the table holds (another consumer's records in the index, say).
func (w *world) reaperDone(inv *invocation) {
	if inv.err != nil && !injected(inv.err) {
		w.obs.violation("reaper", "%s's sweep (%s) failed: %v", inv.c.name, inv, inv.err)
	}
}

// indexed reports whether any record is in the in-flight index of c's table: a sweep
// of an index with nothing in it is skipped. Any consumer's record counts, since the
// index belongs to the table.
func (w *world) indexed(c *consumer) bool {
	for _, x := range w.sc.consumers {
		if x.layout.Table != c.layout.Table {
			continue
		}
		for _, r := range x.recs {
			if r.inflight {
				return true
			}
		}
	}
	return false
}

// newReaper builds c's reaper, as its main builds it.
func (w *world) newReaper(c *consumer) (reaperapp.Handler, error) {
	return reaperapp.New(reaperapp.Config{
		Layout: c.layout, Scope: c.scope, Shards: w.sc.shards, Grace: c.grace, Margin: 2 * time.Second, MetricsNamespace: "Sim",
		DLQURL: w.dlqURL, MaxLease: c.timeout + c.grace,
	}, reaperapp.Deps{DynamoDB: ddbAPI{w}, SQS: sqsAPI{w}, Logs: w.trace.logs(), Metrics: io.Discard, Clock: w.newClock(), Tracer: w.sc.cfg.tracer()})
}

var _ persistence.DynamoDBAPI = ddbAPI{}
