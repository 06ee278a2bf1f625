package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
)

// The workload: operations a producer sends, with duplicates of every kind. An
// operation credits an account (a business write committed with the record), puts a
// journal entry (a guard write, for most), and asks for several outbound messages, some
// to a FIFO queue in the account's group, some to a standard queue, some too large for
// a queue whose MaximumMessageSize is small. producers.go adds what misbehaving
// producers do on top, and sends.

// opKind is what an operation must end as.
type opKind int

const (
	kindValid   opKind = iota // applied exactly once
	kindBad                   // invalid body: dead-lettered
	kindClosed                // refused by a business rule (a write's condition): dead-lettered
	kindCapped                // applied, or refused over the account's cap (by the handler or the condition)
	kindTwin                  // the business id of an earlier op with another payload: one of the two is dead-lettered
	kindKeyless               // no key but a content-based deduplication id: dead-lettered
	kindNoKey                 // no key at all (standard queue, no KEY_FIELD): dead-lettered
	kindForged                // straight to SQS under a key of the HTTP callers' namespace, unsigned: dead-lettered
)

func (k opKind) String() string {
	return [...]string{"valid", "bad", "closed", "capped", "twin", "keyless", "nokey", "forged"}[k]
}

// op is one operation of the workload: one business operation, whatever keys and
// doors its producer sends it under.
type op struct {
	n      int
	name   string // o<n>: the sim-op attribute of every send straight to SQS
	id     string // business id in the body ("" for keyless operations)
	key    string // the producer's idempotency key ("" when none)
	acct   string
	amt    int64
	out    int
	guard  bool
	b      body
	body   string
	kind   opKind
	twinOf *op
	sends  []send
	c      *consumer // whose input queue it goes to
	caller int       // through the ingress: which of simCallers the client signs as
}

// door is how a send reaches the input queue.
type door int

const (
	viaSQS     door = iota // the producer's SendMessage
	viaIngress             // an HTTP client's POST to the ingress
)

// send is one send of an operation by its producer.
type send struct {
	at      time.Duration // after the start
	key     string        // the key it carries ("" for none)
	dedupID string        // FIFO: "" only with content-based deduplication (straight to SQS)
	group   string
	door    door
	why     string // first, retry in window, retry after window, other group, after TTL, ...
}

// effectID is the journal id and outbound source of an operation's effect: its
// business id, or, without one, the idempotency key the consumer derives.
func (o *op) effectID() string {
	if o.id != "" {
		return o.id
	}
	return o.contentKey()
}

func (o *op) contentKey() string { return idemContentID(o.body) }

// setBody writes the operation's body from o.b.
func (o *op) setBody() {
	raw, _ := json.Marshal(o.b)
	o.body = string(raw)
}

// workload draws the operations and their sends.
func (sc *scenario) workload(r *rand.Rand) {
	n := 2 + r.IntN(10)
	span := dur(r, time.Minute, sc.faultEnd)
	accounts := []string{"a1", "a2", "a3"}[:1+r.IntN(3)]
	a := sc.consumers[0]
	for i := range n {
		o := &op{n: i, name: fmt.Sprintf("o%d", i), acct: pick(r, accounts...), amt: int64(1 + r.IntN(9)), guard: r.IntN(4) != 0, c: a}
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
		o.b = body{ID: o.id, Acct: o.acct, Amt: o.amt, Out: o.out, Guard: o.guard}
		for j := range o.out {
			switch {
			case r.IntN(5) == 0:
				o.b.Std = append(o.b.Std, j)
			case sc.outMaxBytes < 1500 && r.IntN(6) == 0:
				o.b.Big = append(o.b.Big, j)
			}
		}
		if sc.contentDedup && o.kind == kindValid && r.IntN(2) == 0 {
			// No key at all: a body that repeats (the same credit, sent again later as a
			// new operation) and only the content-based deduplication id to key it by.
			o.b.ID, o.id, o.key, o.kind = "", "", "", kindKeyless
		}
		o.setBody()
		if o.kind == kindBad {
			o.body = pick(r, `{"acct":"a1","amt":-3}`, `{"acct":"a1","amt":`, `{"id":"`+o.id+`","amt":5}`)
		}
		at := dur(r, 0, span)
		o.sends = append(o.sends, send{at: at, key: o.key, group: o.acct, dedupID: sc.dedupID(o, o.key, 0), why: "first"})
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
			t := sc.twin(o, o.amt+1)
			at := o.sends[0].at + dur(r, 0, 10*time.Minute)
			t.sends = []send{{at: at, key: o.key, group: o.acct, dedupID: "twin-" + o.id, why: "same key, other payload"}}
			sc.ops = append(sc.ops, t)
		}
	}
}

// twin is a new operation with o's business id and another amount.
func (sc *scenario) twin(o *op, amt int64) *op {
	t := *o
	t.n, t.name, t.kind, t.twinOf, t.sends = len(sc.ops), fmt.Sprintf("o%d", len(sc.ops)), kindTwin, o, nil
	t.amt = amt
	t.b.Amt = amt
	t.setBody()
	return &t
}

// dedupID is the deduplication id of the nth copy of o sent under key, as a producer
// that follows the README derives it: outbox.DeduplicationID of the key (of the body's
// id without one), another for copies that must reach the consumer again.
func (sc *scenario) dedupID(o *op, key string, n int) string {
	if !sc.fifo || sc.contentDedup {
		return ""
	}
	if key == "" {
		// Without the key attribute the deduplication id is the key: a producer that
		// follows the README sends every copy of the operation with the same one.
		return "d-" + o.id
	}
	if n == 0 {
		return outbox.DeduplicationID(key)
	}
	return outbox.DeduplicationID(fmt.Sprintf("%s#r%d", key, n))
}

// duplicates adds the producer's retries of an operation.
func (sc *scenario) duplicates(r *rand.Rand, o *op, at time.Duration) {
	for range r.IntN(4) {
		s := send{key: o.key, group: o.acct}
		switch r.IntN(5) {
		case 0: // a retry inside the deduplication interval: SQS drops it
			s.at, s.dedupID, s.why = at+dur(r, time.Second, 4*time.Minute), sc.dedupID(o, o.key, 0), "retry in window"
		case 1: // a retry after the interval, or a new dedup id
			s.at, s.dedupID, s.why = at+dur(r, time.Second, 30*time.Minute), sc.dedupID(o, o.key, 1+r.IntN(3)), "retry, new dedup id"
		case 2: // the same operation in another group: two consumers may hold it at once
			s.at, s.group, s.dedupID, s.why = at+dur(r, 0, 30*time.Second), "x-"+o.acct, sc.dedupID(o, o.key, 5), "other group"
		case 3: // after the record's TTL: only a guard keeps it single
			if !o.guard || o.key == "" {
				continue
			}
			// Half the time within minutes of the TTL's end, while the record a late
			// consumer wrote may still live (one draw, as before).
			late := dur(r, time.Minute, 2*time.Hour)
			if late < time.Hour {
				late = time.Second + (late-time.Minute)/20
			}
			s.at, s.dedupID, s.why = at+sc.ttl+late, sc.dedupID(o, o.key, 7), "after TTL"
		default: // a redelivery a minute later
			s.at, s.dedupID, s.why = at+dur(r, 30*time.Second, 3*time.Minute), sc.dedupID(o, o.key, 9), "retry a minute later"
		}
		o.sends = append(o.sends, s)
	}
}
