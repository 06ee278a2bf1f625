package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing/synctest"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// The scheduler. Every goroutine of the code under test runs inside one synctest
// bubble, whose clock is virtual: it moves only when every goroutine is blocked. The
// code under test reaches the world only through the simulated services, and every
// such request blocks its goroutine on a channel until the scheduler answers it. The
// scheduler waits until every goroutine is blocked (synctest.Wait), takes the requests
// that arrived, sorts them by a key that does not depend on goroutine timing (the
// invocation, the SQS message the request is for, the request itself), draws each
// one's latency and fate from the seeded source in that order, and then runs the
// earliest event of its queue. So one seed gives one history, whatever the Go
// scheduler does.

// event is something that happens at a virtual time.
type event struct {
	at  time.Time
	seq int64
	fn  func()
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// reply is the answer to a request.
type reply struct {
	out any
	err error
}

// call is one request of the code under test to a simulated service.
type call struct {
	inv     *invocation // nil: not from an invocation (never the case for the code under test)
	msgID   string      // the SQS message the request is for ("" for batch-level work)
	service string      // dynamodb, sqs
	op      string
	desc    string   // what the request touches, for ordering and the trace
	items   []string // DynamoDB: the items it writes (conflict.go)
	exec    func() (any, error)
	reply   chan reply
	arrived time.Time // when the code under test made it
	reach   time.Time // when it reaches the service (after a hang on the network)
	n       int64     // arrival order after sorting

	mu       sync.Mutex
	answered bool // a reply was sent, or the caller gave up
}

// answer sends r to the caller unless it already has an answer (it gave up on its
// context, or its invocation was killed).
func (c *call) answer(r reply) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answered {
		return
	}
	c.answered = true
	c.reply <- r
}

func (c *call) abandon() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.answered = true
}

// errKilled is what a request of a killed invocation gets: its process is gone.
var errKilled = errors.New("sim: the execution environment was killed")

type invKey struct{}

func invOf(ctx context.Context) *invocation {
	inv, _ := ctx.Value(invKey{}).(*invocation)
	return inv
}

// do runs a request: it queues it for the scheduler and waits for the answer, or for
// the caller's context to end (then the request may still be applied: it left).
func (w *world) do(ctx context.Context, service, op, desc string, items []string, exec func() (any, error)) (any, error) {
	inv := invOf(ctx)
	if inv == nil {
		return nil, fmt.Errorf("sim: %s %s called outside an invocation", service, op)
	}
	if inv.isDead() {
		return nil, errKilled
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := &call{inv: inv, service: service, op: op, desc: desc, items: items, exec: exec, reply: make(chan reply, 1)}
	if m, ok := idem.MessageFromContext(ctx); ok {
		c.msgID = m.MessageId
	}
	w.mu.Lock()
	c.arrived = time.Now()
	w.arrivals = append(w.arrivals, c)
	w.mu.Unlock()
	done := ctx.Done()
	if done == nil {
		r := <-c.reply
		return r.out, r.err
	}
	select {
	case r := <-c.reply:
		return r.out, r.err
	case <-done:
		c.abandon()
		return nil, ctx.Err()
	}
}

// at queues fn at virtual time t.
func (w *world) at(t time.Time, fn func()) {
	w.evSeq++
	heap.Push(&w.events, &event{at: t, seq: w.evSeq, fn: fn})
}

// collect takes what the code under test did since the last step, in a fixed order.
func (w *world) collect() {
	w.trace.flush()
	w.mu.Lock()
	arr, fin := w.arrivals, w.finished
	w.arrivals, w.finished = nil, nil
	w.mu.Unlock()
	sort.SliceStable(arr, func(i, j int) bool {
		a, b := arr[i], arr[j]
		if a.inv.id != b.inv.id {
			return a.inv.id < b.inv.id
		}
		if a.msgID != b.msgID {
			return a.msgID < b.msgID
		}
		if a.op != b.op {
			return a.op < b.op
		}
		return a.desc < b.desc
	})
	for _, c := range arr {
		w.callSeq++
		c.n = w.callSeq
		w.schedule(c)
	}
	sort.Slice(fin, func(i, j int) bool { return fin[i].id < fin[j].id })
	for _, inv := range fin {
		w.finish(inv)
	}
}

// run advances the world until stop returns true or the virtual time reaches limit.
func (w *world) run(limit time.Time, stop func() bool) {
	for {
		synctest.Wait()
		w.collect()
		if stop != nil && stop() {
			return
		}
		if w.events.Len() == 0 {
			return
		}
		ev := heap.Pop(&w.events).(*event)
		if ev.at.After(limit) {
			heap.Push(&w.events, ev)
			if now := time.Now(); now.Before(limit) {
				time.Sleep(limit.Sub(now))
			}
			synctest.Wait()
			w.collect()
			return
		}
		if now := time.Now(); ev.at.After(now) {
			heap.Push(&w.events, ev)
			time.Sleep(ev.at.Sub(now))
			continue
		}
		ev.fn()
	}
}
