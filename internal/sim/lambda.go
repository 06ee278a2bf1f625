package sim

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/reaper/reaperapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/sim/simsqs"
)

// The Lambda side: the SQS event source mapping's pollers, execution environments
// (warm between invocations, fresh after a crash or a timeout), invocations with a
// deadline, and the reaper's schedule.

// slot is one concurrent poller of the event source mapping, with the execution
// environment that serves it.
type slot struct {
	id      int
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
}

// invocation is one call of a function.
type invocation struct {
	id       int
	kind     string // consumer, reaper
	slot     *slot
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
func (w *world) newEnv() (*environment, error) {
	w.envSeq++
	sc := w.sc
	cfg := consumerapp.Config{
		FunctionTimeout: sc.timeout,
		Handler:         &handler{w: w, db: ddbAPI{w}, table: bizTable, outFIFO: w.outFIFOURL, outStd: w.outStdURL, fold: sc.fold},
		Layout:          sc.layout(), DLQURL: w.dlqURL, Scope: scope, TTL: sc.ttl, LeaseGrace: sc.grace,
		Shards: sc.shards, Concurrency: sc.concurrency, DeadlineMargin: sc.margin, CacheSize: sc.cacheSize,
		KeyField: sc.keyField, MetricsNamespace: "Sim", Mode: sc.mode,
	}
	if sc.checkVisibility {
		cfg.VisibilityTimeout = sc.visibility
	}
	h, err := consumerapp.New(cfg, consumerapp.Deps{
		DynamoDB: ddbAPI{w}, SQS: sqsAPI{w}, Logs: w.trace.logs(), Metrics: io.Discard, Owner: fmt.Sprintf("env-%d", w.envSeq),
	})
	if err != nil {
		return nil, err
	}
	return &environment{id: w.envSeq, consumer: h}, nil
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
	msgs := w.sqs.Receive(w.input, w.sc.batchSize, w.rng)
	if len(msgs) == 0 {
		next := time.Now().Add(20 * time.Second)
		if t, now := w.sqs.NextVisible(w.input); now {
			next = time.Now().Add(time.Second)
		} else if !t.IsZero() && t.Before(next) {
			next = t
		}
		w.schedulePoll(s, next)
		return
	}
	for _, m := range msgs {
		w.obs.received(m)
	}
	s.busy = true
	delay := time.Duration(w.rng.Int64N(int64(w.sc.window) + 1))
	if w.faultsOn() && w.p(w.sc.faults.lateInvoke) {
		delay += time.Duration(w.rng.Int64N(int64(w.sc.visibility + w.sc.timeout)))
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

// wakePollers is SQS answering the long polls that wait: a message arrived, and a
// waiting poll returns at once.
func (w *world) wakePollers() {
	for _, s := range w.slots {
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
		env, err := w.newEnv()
		if err != nil {
			w.obs.violation("init", "the consumer's init failed: %v", err)
			s.busy = false
			return
		}
		s.env = env
	}
	w.invSeq++
	inv := &invocation{id: w.invSeq, kind: "consumer", slot: s, msgs: msgs, deadline: time.Now().Add(w.sc.timeout)}
	ev := w.sqs.Event(w.input, msgs)
	w.tracef("%s starts on env-%d with %s, deadline in %s", inv, s.env.id, msgIDs(msgs), w.sc.timeout)
	ctx, cancel := context.WithDeadline(context.WithValue(context.Background(), invKey{}, inv), inv.deadline)
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: inv.String()})
	h := s.env.consumer
	w.live[inv] = true
	go func() {
		defer cancel()
		resp, err := h(ctx, ev)
		w.mu.Lock()
		inv.resp, inv.err = resp, err
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
	for c := range w.inflight {
		if c.inv == inv {
			// Its goroutine must end (the simulation needs every goroutine to), so it
			// gets an error; the process it stands for is gone and does nothing more.
			c.answer(reply{err: errKilled})
		}
	}
	switch inv.kind {
	case "consumer":
		inv.slot.env = nil
		inv.slot.busy = false
		w.schedulePoll(inv.slot, time.Now().Add(time.Duration(w.rng.IntN(1000))*time.Millisecond))
	case "reaper":
		w.reaping = false
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
	if inv.kind == "reaper" {
		w.reaping = false
		w.tracef("%s done: err=%v", inv, inv.err)
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
			if !w.sqs.Delete(w.input, m.Receipt(), m.ID) {
				w.tracef("%s: delete of %s refused (received again since)", inv, m.ID)
			}
		}
	}
	w.schedulePoll(s, time.Now())
}

// reap is the reaper's schedule: a sweep, unless the last one still runs.
func (w *world) reap(rh reaperapp.Handler) {
	w.at(time.Now().Add(w.sc.reaperEvery), func() { w.reap(rh) })
	if w.reaping || !w.indexed() {
		return // a sweep of an empty index changes nothing: skipped, to save time
	}
	w.reaping = true
	w.invSeq++
	inv := &invocation{id: w.invSeq, kind: "reaper", deadline: time.Now().Add(w.sc.reaperTimeout)}
	w.tracef("%s starts", inv)
	ctx, cancel := context.WithDeadline(context.WithValue(context.Background(), invKey{}, inv), inv.deadline)
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: inv.String()})
	w.live[inv] = true
	go func() {
		defer cancel()
		_, err := rh(ctx, events.EventBridgeEvent{ID: inv.String(), DetailType: "Scheduled Event", Source: "aws.events"})
		w.mu.Lock()
		inv.err = err
		w.finished = append(w.finished, inv)
		w.mu.Unlock()
	}()
	w.at(inv.deadline, func() {
		if !inv.isDead() && !w.obs.done[inv] {
			w.kill(inv, "timeout")
		}
	})
}

// indexed reports whether any record is in the in-flight index.
func (w *world) indexed() bool {
	for _, it := range w.records() {
		if _, ok := it["inflight"]; ok {
			return true
		}
	}
	return false
}

func (w *world) newReaper() (reaperapp.Handler, error) {
	return reaperapp.New(reaperapp.Config{
		Layout: w.sc.layout(), Shards: w.sc.shards, Grace: w.sc.grace, Margin: 2 * time.Second, MetricsNamespace: "Sim",
		DLQURL: w.dlqURL, MaxLease: w.sc.timeout + w.sc.grace,
	}, reaperapp.Deps{DynamoDB: ddbAPI{w}, SQS: sqsAPI{w}, Logs: w.trace.logs(), Metrics: io.Discard})
}

var _ idem.DynamoDBAPI = ddbAPI{}
