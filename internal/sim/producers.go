package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/sim/simsqs"
)

// Producers misbehave as real ones do: one business operation sent under two keys (a
// producer that makes up a key per try, an HTTP client that retries with a fresh
// Idempotency-Key), the same operation sent once through the ingress and once straight
// to SQS, keys at and past every length limit and keys that look like the hashed form
// of another, another body under a used business id. Drawn from a source of their own
// (producerRand), after the workload, so that the workload's draws stay as they were.

func producerRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e0d)) }

// The key lengths a producer may use: SQS's 128-character deduplication id and one past
// it, the ingress's MaxKeyLength and one past it, idem.MaxRawKeyBytes and one past it.
var keyLengths = []int{128, 129, 200, 255, 256, idem.MaxRawKeyBytes, idem.MaxRawKeyBytes + 1, 1500}

// misbehave adds the second consumer's operations, the stepping handler's calls, the
// ingress's clients and the producers' misbehaviour to the workload.
func (sc *scenario) misbehave(r *rand.Rand) {
	if len(sc.consumers) > 1 {
		sc.workloadB(r)
	}
	for _, o := range sc.ops {
		if sc.cfg.steps && o.kind == kindValid && r.IntN(2) == 0 {
			o.b.Call = true
			o.setBody()
		}
		if sc.cfg.ingress && o.c == sc.consumers[0] && o.key != "" && r.IntN(3) != 0 {
			// An HTTP client: every send of the operation is a POST of the same key, its
			// retries included (the ingress derives the group and deduplication id).
			for i := range o.sends {
				o.sends[i].door = viaIngress
			}
		}
	}
	n := len(sc.ops)
	for _, o := range sc.ops[:n] {
		if o.kind != kindValid || o.key == "" {
			continue
		}
		first := o.sends[0]
		switch x := r.IntN(12); {
		case x == 0: // another key for the same operation: a fresh key per try
			sc.stats.twoKeys++
			o.sends = append(o.sends, send{at: first.at + dur(r, time.Second, 10*time.Minute), key: "k2-" + o.id, group: o.acct,
				dedupID: sc.dedupID(o, "k2-"+o.id, 0), door: first.door, why: "the same operation under a fresh key"})
		case x == 1 && sc.cfg.ingress && o.c == sc.consumers[0]: // through the other door too
			sc.stats.twoDoors++
			other, key := viaSQS, o.key
			if first.door == viaSQS {
				other = viaIngress
			}
			if r.IntN(2) == 0 {
				key = "k3-" + o.id
			}
			o.sends = append(o.sends, send{at: first.at + dur(r, 0, 10*time.Minute), key: key, group: o.acct,
				dedupID: sc.dedupID(o, key, 0), door: other, why: "the same operation through the other door"})
		case x == 2: // another body under the business id, under a third key
			sc.stats.freshTwins++
			t := sc.twin(o, o.amt+2)
			key := "kt-" + o.id
			t.key = key
			t.sends = []send{{at: first.at + dur(r, 0, 10*time.Minute), key: key, group: o.acct, dedupID: sc.dedupID(t, key, 0),
				door: first.door, why: "another body with the business id under a fresh key"}}
			sc.ops = append(sc.ops, t)
		}
	}
	if r.IntN(3) == 0 {
		sc.longKeys(r)
	}
	if sc.cfg.ingress {
		sc.otherCallers(r)
	}
	if r.IntN(4) == 0 {
		sc.forge(r)
	}
	if sc.fifo && sc.keyField == "" && !sc.contentDedup && r.IntN(4) == 0 {
		sc.nearMax(r)
	}
}

// nearMax: a producer sends a message 32 bytes under SQS's 1 MiB, keyed by a
// 128-character MessageDeduplicationId alone, with a body the handler refuses for good.
// Its dead letter cannot hold the whole body beside the key it must add and its reason
// (issue 37, hole 4): it must still be dead-lettered at once, with its reason.
func (sc *scenario) nearMax(r *rand.Rand) {
	o := &op{n: len(sc.ops), name: fmt.Sprintf("o%d", len(sc.ops)), acct: "a1", amt: 1, c: sc.consumers[0], kind: kindBad}
	o.id = "n" + o.name
	head, tail := `{"acct":"a1","amt":1,"pad":"`, `"}`
	room := simsqs.MaxQueueBytes - 32 - (len("sim-op") + len("String") + len(o.name)) // the sim-op attribute counts
	o.body = head + strings.Repeat("x", room-len(head)-len(tail)) + tail
	dedup := "d-" + o.id + "-"
	dedup += strings.Repeat("y", sqsmsg.MaxDeduplicationIDChars-len(dedup))
	o.sends = []send{{at: dur(r, 0, sc.faultEnd), group: o.acct, dedupID: dedup, why: "a message near 1 MiB keyed by a 128-character deduplication id"}}
	sc.ops = append(sc.ops, o)
}

// otherCallers: a second HTTP caller (the role, simCallers[1]) sends a request of its
// own (another business operation) under an Idempotency-Key the first caller uses. Under
// the caller scope both are taken and applied; where the two share keys (the account
// scope, both being of one account, or the shared scope) the later one is answered 422.
func (sc *scenario) otherCallers(r *rand.Rand) {
	n := len(sc.ops)
	for _, o := range sc.ops[:n] {
		if o.kind != kindValid || o.key == "" || o.sends[0].door != viaIngress || r.IntN(4) != 0 {
			continue
		}
		sc.stats.otherCallers++
		c := &op{n: len(sc.ops), name: fmt.Sprintf("o%d", len(sc.ops)), id: "c" + o.id, key: o.key, acct: o.acct, amt: 1 + int64(r.IntN(9)),
			guard: r.IntN(2) == 0, c: o.c, caller: 1}
		c.b = body{ID: c.id, Acct: c.acct, Amt: c.amt, Guard: c.guard}
		c.setBody()
		c.sends = []send{{at: o.sends[0].at + dur(r, 0, 5*time.Minute), key: o.key, group: c.acct, door: viaIngress,
			why: "another caller's request under a key in use"}}
		sc.ops = append(sc.ops, c)
	}
}

// forge: a producer sends straight to SQS, unsigned, under the key an HTTP caller's
// request is (or would be) sent under by the ingress, a little before that request: had
// the consumer taken it, the caller's request would be answered from the forger's
// record. Its body's id is that key too, so that a consumer keyed by the body's id sees
// it as well.
func (sc *scenario) forge(r *rand.Rand) {
	var cands []*op
	for _, o := range sc.ops {
		if o.kind == kindValid && o.key != "" && o.c == sc.consumers[0] {
			cands = append(cands, o)
		}
	}
	if len(cands) == 0 {
		return
	}
	v := pick(r, cands...)
	scope := sc.cfg.keyScope
	if !sc.cfg.ingress {
		scope = "" // the default scope: a caller's own
	}
	ns, _ := ingressapp.Namespace(scope, callerIdentity(v, 0))
	key := idem.CallerKey(ns, v.key)
	sc.stats.forged++
	f := &op{n: len(sc.ops), name: fmt.Sprintf("o%d", len(sc.ops)), id: key, key: key, acct: v.acct, amt: 1 + int64(r.IntN(9)),
		guard: r.IntN(2) == 0, c: v.c, kind: kindForged}
	f.b = body{ID: f.id, Acct: f.acct, Amt: f.amt, Guard: f.guard}
	f.setBody()
	f.sends = []send{{at: max(0, v.sends[0].at-dur(r, 0, time.Minute)), key: key, group: f.acct, dedupID: sc.dedupID(f, key, 0),
		why: "a forged key of an HTTP caller"}}
	sc.ops = append(sc.ops, f)
}

// longKeys gives one operation a key at or past a length limit, and sometimes adds an
// operation whose key looks like that key's hashed form: "sha256-<hex>" is what
// outbox.DeduplicationID makes of a key over 128 characters, "sha256:<hex>" what
// idem.RecordKey makes of one over MaxRawKeyBytes.
func (sc *scenario) longKeys(r *rand.Rand) {
	twinned := map[*op]bool{}
	for _, o := range sc.ops {
		twinned[o.twinOf] = true
	}
	var cands []*op
	for _, o := range sc.ops {
		if o.kind == kindValid && o.key != "" && !twinned[o] {
			cands = append(cands, o)
		}
	}
	if len(cands) == 0 {
		return
	}
	o := pick(r, cands...)
	n := pick(r, keyLengths...)
	key := o.key + "-" + strings.Repeat("x", n-len(o.key)-1)
	sc.stats.longKeys++
	for i := range o.sends {
		if o.sends[i].key == o.key {
			o.sends[i].key = key
			o.sends[i].dedupID = sc.dedupID(o, key, 0)
		}
	}
	o.key = key
	if n <= 128 || r.IntN(2) == 0 {
		return
	}
	sum := sha256.Sum256([]byte(key))
	look := "sha256-" + hex.EncodeToString(sum[:])
	if n > idem.MaxRawKeyBytes && r.IntN(2) == 0 {
		look = "sha256:" + hex.EncodeToString(sum[:])
	}
	sc.stats.lookalikes++
	l := &op{n: len(sc.ops), name: fmt.Sprintf("o%d", len(sc.ops)), id: "l" + o.id, key: look, acct: o.acct, amt: 1 + int64(r.IntN(9)),
		guard: r.IntN(2) == 0, c: o.c}
	l.b = body{ID: l.id, Acct: l.acct, Amt: l.amt, Guard: l.guard}
	l.setBody()
	first := o.sends[0]
	l.sends = []send{{at: first.at + dur(r, time.Second, 4*time.Minute), key: look, group: l.acct, dedupID: sc.dedupID(l, look, 0),
		door: first.door, why: "a key that looks like another's hashed form"}}
	sc.ops = append(sc.ops, l)
}

// workloadB is the second consumer's operations: a few valid ones, some refused, with
// duplicates.
func (sc *scenario) workloadB(r *rand.Rand) {
	b := sc.consumers[1]
	for i := range 1 + r.IntN(5) {
		o := &op{n: len(sc.ops), name: fmt.Sprintf("o%d", len(sc.ops)), id: fmt.Sprintf("q%d", i), acct: pick(r, "a1", "a2", "a3"),
			amt: int64(1 + r.IntN(9)), guard: r.IntN(4) != 0, out: r.IntN(4), c: b}
		o.key = "kb-" + o.id
		if r.IntN(8) == 0 {
			o.kind, o.acct = kindClosed, "closed"
		}
		o.b = body{ID: o.id, Acct: o.acct, Amt: o.amt, Out: o.out, Guard: o.guard}
		o.setBody()
		at := dur(r, 0, sc.faultEnd)
		o.sends = append(o.sends, send{at: at, key: o.key, group: o.acct, dedupID: sc.dedupID(o, o.key, 0), why: "first"})
		sc.duplicates(r, o, at)
		sc.ops = append(sc.ops, o)
	}
}

// producerSend sends one message of an operation straight to SQS, as a producer outside
// the system.
func (w *world) producerSend(o *op, s send) {
	in := &sqs.SendMessageInput{
		QueueUrl: aws.String(o.c.inputURL), MessageBody: aws.String(o.body),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			"sim-op": {DataType: aws.String("String"), StringValue: aws.String(o.name)},
		},
	}
	if s.key != "" {
		in.MessageAttributes[idem.KeyAttribute] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(s.key)}
	}
	if w.sc.fifo {
		in.MessageGroupId = aws.String(s.group)
		if s.dedupID != "" {
			in.MessageDeduplicationId = aws.String(s.dedupID)
		}
	}
	out, err := w.sqs.SendMessage(context.Background(), in)
	if err != nil {
		w.obs.violation("producer", "op %s: the input queue refused a send (%s): %v", o.name, s.why, err)
		return
	}
	w.obs.accepted[o] = true
	w.tracef("producer sends %s (%s, %s) as %s", o.name, o.kind, s.why, aws.ToString(out.MessageId))
}
