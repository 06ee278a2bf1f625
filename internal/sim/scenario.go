package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// scenario is what one seed chose: the configuration, the fault rates and the workload.
type scenario struct {
	mode            idem.Mode
	fifo            bool // the input queue is FIFO (else standard)
	contentDedup    bool // FIFO with content-based deduplication; producers send no dedup id
	keyField        string
	slots           int // concurrent pollers and environments
	concurrency     int // MAX_CONCURRENCY
	batchSize       int
	window          time.Duration // batching window
	timeout         time.Duration // function timeout
	visibility      time.Duration
	checkVisibility bool // tell the consumer its visibility timeout (its init refuses a lease that outlives it)
	grace           time.Duration
	margin          time.Duration
	cacheSize       int
	maxReceive      int
	reaperEvery     time.Duration
	reaperTimeout   time.Duration
	shards          int
	outMaxBytes     int // MaximumMessageSize of the outbound FIFO queue
	wholeBatchFails bool
	ttl             time.Duration
	faultEnd        time.Duration // faults stop then
	faults          faultRates
	ops             []*op
	// fold keeps the records in the business table, and a guarded operation's journal
	// entry is its record (idem.Result.HomeGuard): the commit writes one item fewer.
	fold     bool
	accounts []account
}

type account struct {
	name   string
	closed bool
	cap    int64
}

// faultRates are per-request probabilities while faults are on.
type faultRates struct {
	crashBefore, crashAfter float64 // the invocation dies before sending / after the answer
	throttle, serverError   float64
	lost                    float64 // applied, answer lost
	slow                    float64 // a long latency (a hang)
	lateInvoke              float64 // an invoke starts long after its receive
	lostDelete              float64 // the event source mapping's delete does not happen
	entryFail               float64 // one entry of a standard queue's batch fails (server side)
	recycle                 float64 // Lambda replaces a warm environment
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

func dur(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
}

func idemContentID(body string) string {
	sum := sha256.Sum256([]byte(body))
	return hex.EncodeToString(sum[:])
}

// newScenario draws a scenario from r.
func newScenario(r *rand.Rand) *scenario {
	sc := &scenario{
		mode:          pick(r, idem.ModeLease, idem.ModeSingleTransaction),
		fifo:          r.IntN(5) != 0,
		slots:         1 + r.IntN(3),
		concurrency:   pick(r, 1, 2, 10),
		batchSize:     pick(r, 1, 3, 10),
		window:        pick(r, 0, time.Second, 5*time.Second),
		timeout:       pick(r, 5*time.Second, 10*time.Second, 30*time.Second),
		grace:         pick(r, 0, 2*time.Second, 30*time.Second),
		margin:        pick(r, time.Second, 2*time.Second),
		cacheSize:     pick(r, 0, 100),
		maxReceive:    3 + r.IntN(4),
		reaperEvery:   pick(r, 30*time.Second, time.Minute, 2*time.Minute),
		reaperTimeout: 30 * time.Second,
		shards:        1 + r.IntN(3),
		outMaxBytes:   pick(r, 1<<20, 1<<20, 1024),
		ttl:           pick(r, 2*time.Hour, 6*time.Hour),
	}
	sc.wholeBatchFails = r.IntN(2) == 0
	if sc.fifo {
		sc.contentDedup = r.IntN(4) == 0
	}
	if r.IntN(2) == 0 || !sc.fifo {
		sc.keyField = pick(r, "", "id")
	}
	// The visibility timeout is at least the function timeout (the event source mapping
	// requires it); the consumer's own check also wants the lease (timeout + grace) to
	// end before it, and is told the visibility timeout only in some runs, so that
	// others run as AWS allows.
	// https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html
	sc.visibility = pick(r, sc.timeout, sc.timeout+sc.grace+time.Second, 6*sc.timeout)
	sc.checkVisibility = sc.visibility > sc.timeout+sc.grace && r.IntN(2) == 0
	storm := r.IntN(3)
	f := &sc.faults
	switch storm {
	case 0: // calm: a few faults
		*f = faultRates{crashBefore: 0.005, crashAfter: 0.005, throttle: 0.01, serverError: 0.005, lost: 0.01, slow: 0.005, lateInvoke: 0.05, lostDelete: 0.02, entryFail: 0.05, recycle: 0.05}
	case 1:
		*f = faultRates{crashBefore: 0.02, crashAfter: 0.02, throttle: 0.05, serverError: 0.02, lost: 0.05, slow: 0.02, lateInvoke: 0.2, lostDelete: 0.05, entryFail: 0.2, recycle: 0.1}
	default: // storm
		*f = faultRates{crashBefore: 0.05, crashAfter: 0.05, throttle: 0.1, serverError: 0.05, lost: 0.1, slow: 0.05, lateInvoke: 0.4, lostDelete: 0.1, entryFail: 0.4, recycle: 0.2}
	}
	sc.faultEnd = dur(r, 5*time.Minute, 40*time.Minute)
	sc.accounts = []account{{name: "a1"}, {name: "a2"}, {name: "a3"}, {name: "closed", closed: true}, {name: "cap", cap: 30}}
	sc.workload(r)
	return sc
}

// workload draws the operations and their sends.
func (sc *scenario) workload(r *rand.Rand) {
	n := 2 + r.IntN(10)
	span := dur(r, time.Minute, sc.faultEnd)
	accounts := []string{"a1", "a2", "a3"}[:1+r.IntN(3)]
	for i := range n {
		o := &op{n: i, name: fmt.Sprintf("o%d", i), acct: pick(r, accounts...), amt: int64(1 + r.IntN(9)), guard: r.IntN(4) != 0}
		o.id = fmt.Sprintf("p%d", i)
		o.key = "k-" + o.id
		switch x := r.IntN(20); {
		case x == 0:
			o.kind = kindBad
		case x == 1:
			o.kind, o.acct = kindClosed, "closed"
		case x <= 3:
			o.kind, o.acct, o.amt = kindCapped, "cap", int64(8+r.IntN(10))
		}
		switch {
		case o.kind == kindBad:
			// A bad body always carries its key: it must be refused for what it is.
		case !sc.fifo && sc.keyField == "" && r.IntN(8) == 0:
			o.key, o.kind = "", kindNoKey
		case sc.keyField != "" && r.IntN(3) == 0:
			o.key = "" // the key comes from the body's id field
		}
		if r.IntN(3) != 0 {
			o.out = r.IntN(4)
		} else {
			o.out = r.IntN(15) // more than 10: two SendMessageBatch requests for one record
		}
		b := body{ID: o.id, Acct: o.acct, Amt: o.amt, Out: o.out, Guard: o.guard}
		for j := range o.out {
			switch {
			case r.IntN(5) == 0:
				b.Std = append(b.Std, j)
			case sc.outMaxBytes < 1500 && r.IntN(6) == 0:
				b.Big = append(b.Big, j)
			}
		}
		if sc.contentDedup && o.kind == kindValid && r.IntN(2) == 0 {
			// No key at all: a body that repeats (the same credit, sent again later as a
			// new operation) and only the content-based deduplication id to key it by.
			b.ID, o.id, o.key, o.kind = "", "", "", kindKeyless
		}
		raw, _ := json.Marshal(b)
		o.body = string(raw)
		if o.kind == kindBad {
			o.body = pick(r, `{"acct":"a1","amt":-3}`, `{"acct":"a1","amt":`, `{"id":"`+o.id+`","amt":5}`)
		}
		at := dur(r, 0, span)
		o.sends = append(o.sends, send{at: at, group: o.acct, dedupID: sc.dedupID(o, 0), why: "first"})
		sc.duplicates(r, o, at)
		sc.ops = append(sc.ops, o)
	}
	// A keyless operation sent again later as a new operation with the same body.
	for _, o := range sc.ops {
		if o.kind == kindKeyless && r.IntN(2) == 0 {
			again := *o
			again.n, again.name, again.sends = len(sc.ops), fmt.Sprintf("o%d", len(sc.ops)), nil
			at := o.sends[0].at + dur(r, 6*time.Minute, 20*time.Minute)
			again.sends = []send{{at: at, group: o.acct, why: "a new operation with the same body"}}
			sc.ops = append(sc.ops, &again)
		}
	}
	// The same key with another payload.
	for _, o := range sc.ops {
		if o.kind == kindValid && o.key != "" && r.IntN(8) == 0 {
			t := *o
			t.n, t.name, t.kind, t.twinOf = len(sc.ops), fmt.Sprintf("o%d", len(sc.ops)), kindTwin, o
			t.amt = o.amt + 1
			b := body{ID: o.id, Acct: o.acct, Amt: t.amt, Out: o.out, Guard: o.guard}
			raw, _ := json.Marshal(b)
			t.body = string(raw)
			at := o.sends[0].at + dur(r, 0, 10*time.Minute)
			t.sends = []send{{at: at, group: o.acct, dedupID: "twin-" + o.id, why: "same key, other payload"}}
			sc.ops = append(sc.ops, &t)
		}
	}
}

func (sc *scenario) dedupID(o *op, n int) string {
	if !sc.fifo || sc.contentDedup {
		return ""
	}
	k := o.key
	if k == "" {
		// Without the key attribute the deduplication id is the key: a producer that
		// follows the README sends every copy of the operation with the same one.
		return "d-" + o.id
	}
	if n == 0 {
		return k
	}
	return fmt.Sprintf("%s#r%d", k, n)
}

// duplicates adds the producer's retries of an operation.
func (sc *scenario) duplicates(r *rand.Rand, o *op, at time.Duration) {
	for range r.IntN(4) {
		switch r.IntN(5) {
		case 0: // a retry inside the deduplication interval: SQS drops it
			o.sends = append(o.sends, send{at: at + dur(r, time.Second, 4*time.Minute), group: o.acct, dedupID: sc.dedupID(o, 0), why: "retry in window"})
		case 1: // a retry after the interval, or a new dedup id
			o.sends = append(o.sends, send{at: at + dur(r, time.Second, 30*time.Minute), group: o.acct, dedupID: sc.dedupID(o, 1+r.IntN(3)), why: "retry, new dedup id"})
		case 2: // the same operation in another group: two consumers may hold it at once
			o.sends = append(o.sends, send{at: at + dur(r, 0, 30*time.Second), group: "x-" + o.acct, dedupID: sc.dedupID(o, 5), why: "other group"})
		case 3: // after the record's TTL: only a guard keeps it single
			if o.guard && o.key != "" {
				o.sends = append(o.sends, send{at: at + sc.ttl + dur(r, time.Minute, 2*time.Hour), group: o.acct, dedupID: sc.dedupID(o, 7), why: "after TTL"})
			}
		default: // a redelivery a minute later
			o.sends = append(o.sends, send{at: at + dur(r, 30*time.Second, 3*time.Minute), group: o.acct, dedupID: sc.dedupID(o, 9), why: "retry a minute later"})
		}
	}
}
