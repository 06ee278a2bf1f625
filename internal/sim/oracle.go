package sim

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/sim/simsqs"
	"github.com/idemgo/sqs-lambda-consumer/internal/simdb"
)

// The oracle: a small model of what must hold, checked as the run goes (an
// acknowledgement without an outcome, a step in two holders at once, a stored response
// that changes) and at its end, once the faults have stopped and the world has settled.
// It reads only what an outside observer could: the tables, the queues, the outside
// service's log and the ingress's answers; never the code under test's memory.
// outbound.go checks the outbound messages, responses.go the records and their
// responses, outside.go the steps, ingress.go what the HTTP clients were told.

// Violation is one broken promise.
type Violation struct {
	Check string // effect, ack, dead-letter, outbound, order, stuck, response, step, status, reaper, ...
	Text  string
}

func (v Violation) String() string { return v.Check + ": " + v.Text }

// landed is a handler run whose writes landed: its credit committed.
type landed struct {
	effect string
	amt    int64
	seq    int64     // commit sequence
	group  string    // the input message group of the delivery that committed it
	msg    string    // the input message whose delivery committed it
	at     time.Time // true time of the commit
}

type observations struct {
	violations []Violation
	done       map[*invocation]bool
	killed     int
	accepted   map[*op]bool               // operations a producer was told were taken (SQS acknowledged the send, or the ingress answered 202/200)
	sent       map[*op][]string           // input messages SQS stored for an operation
	msgOp      map[string]*op             // input message id -> operation
	keysOf     map[string]map[string]bool // effect id -> the keys the consumer derives from its stored messages
	credits    map[string]int             // effect id -> credits committed
	firstAt    map[string]time.Time       // effect id -> its first credit
	reexecuted map[string]int             // effect ids applied again past their record's TTL (no guard: a new execution by contract)
	applied    map[*op]int                // operation -> credits of its body (its effect id and amount)
	runs       map[string]landed          // run -> its landed writes
	runByMsg   map[string]string          // input message id -> the run its delivery committed
	tokenRun   map[string]string          // a holder's token -> the first run seen under it, to name it
	parked     map[string]bool            // effect ids of operations a message of which SQS moved to the DLQ
	holds      map[string][]hold          // consumer|record key -> its holders (responses.go)
	gateway    []gatewayCall              // the outside service's log (outside.go)
	keys       map[string]gatewayKey      // the outside service's keys: stepKey(consumer, record key, step) -> its last application
	lookups    map[string]bool            // stepKey(token, record key, step) -> whether the service's lookup answered applied
	acks       int
	receives   int
	stats      Stats
}

func newObservations() observations {
	return observations{
		done: map[*invocation]bool{}, accepted: map[*op]bool{}, sent: map[*op][]string{}, msgOp: map[string]*op{},
		keysOf: map[string]map[string]bool{}, credits: map[string]int{}, firstAt: map[string]time.Time{},
		reexecuted: map[string]int{}, applied: map[*op]int{}, runs: map[string]landed{}, runByMsg: map[string]string{}, tokenRun: map[string]string{},
		parked: map[string]bool{}, holds: map[string][]hold{}, keys: map[string]gatewayKey{}, lookups: map[string]bool{},
	}
}

// Stats counts what a run did.
type Stats struct {
	Ops, Sends, Receives, Invocations, Killed, Acks int
	Calls                                           int64
	OutboundDelivered, OutboundDuplicates           int
	DeadLettered, Parked                            int
	Folded                                          int // commits whose journal entry was the record (fold scenarios)
	Conflicts                                       int // requests DynamoDB refused for a transaction conflict (conflict.go)
	GatewayCalls                                    int // calls the outside service received
	HTTPRequests                                    int // requests to the ingress
	// What the producers were drawn to do wrong (producers.go).
	TwoKeys, TwoDoors, FreshTwins, LongKeys, Lookalikes int
	OtherCallers, Forged                                int // a second HTTP caller's request under a used key; a forged caller's key
	VirtualTime                                         time.Duration
	// VirtualHours sums VirtualTime over runs: a million runs' virtual time overflows a
	// time.Duration (292 years).
	VirtualHours float64
}

func (o *observations) violation(check, format string, args ...any) {
	o.violations = append(o.violations, Violation{Check: check, Text: fmt.Sprintf(format, args...)})
}

func (o *observations) received(simsqs.Message) { o.receives++ }

// nameToken names a holder's token by a run under it, the first seen.
func (o *observations) nameToken(token, run string) {
	if _, ok := o.tokenRun[token]; !ok && token != "" {
		o.tokenRun[token] = run
	}
}

// onAccept notes every message a queue stored: on an input queue, the operation it
// belongs to and the key the consumer will derive from it.
func (w *world) onAccept(a simsqs.Accepted) {
	c := w.consumerOfQueue(a.Queue)
	if c == nil {
		return
	}
	o := w.opOf(a.Msg)
	if o == nil {
		w.obs.violation("producer", "message %s on %s belongs to no operation", a.Msg.ID, a.Queue)
		return
	}
	w.obs.sent[o] = append(w.obs.sent[o], a.Msg.ID)
	w.obs.msgOp[a.Msg.ID] = o
	if key, err := w.consumerKey(c, a.Msg); err == nil {
		if w.obs.keysOf[o.effectID()] == nil {
			w.obs.keysOf[o.effectID()] = map[string]bool{}
		}
		w.obs.keysOf[o.effectID()][key] = true
	}
	w.tracef("%s stores %s of %s (%s)", a.Queue, a.Msg.ID, o.name, o.kind)
	w.wakePollers(c)
}

// consumerKey is the idempotency key c derives from an input message.
func (w *world) consumerKey(c *consumer, m simsqs.Message) (string, error) {
	ev := w.sqs.Event(c.input, []simsqs.Message{m})
	return w.sc.keyRule().Key(ev.Records[0])
}

// keyRule is how the consumers key a message (KEY_SOURCE, KEY_FIELD).
func (sc *scenario) keyRule() idem.KeyRule {
	return idem.KeyRule{Source: sc.keySource, Field: sc.keyField, Keys: stackKeys}
}

// consumerOfQueue returns the consumer whose input queue is name, nil for another.
func (w *world) consumerOfQueue(name string) *consumer {
	for _, c := range w.sc.consumers {
		if c.input == name {
			return c
		}
	}
	return nil
}

// onWrite watches the tables: the consumers' records (responses.go), and the credits, an
// account update that set last_op.
func (w *world) onWrite(wr simdb.Write) {
	w.watchRecords(wr)
	if wr.Table != bizTable || wr.New == nil {
		return
	}
	pk := strAttr(wr.New, "pk")
	if !strings.HasPrefix(pk, "acct#") || numAttr(wr.New, "applied") == numAttr(wr.Old, "applied") {
		return
	}
	id, run := strAttr(wr.New, "last_op"), strAttr(wr.New, "last_run")
	if id == "" {
		return
	}
	l := landed{effect: id, amt: numAttr(wr.New, "balance") - numAttr(wr.Old, "balance"), seq: wr.Seq, at: time.Now()}
	if c := w.cur; c != nil {
		l.msg = c.msgID
		for _, m := range c.inv.msgs {
			if m.ID == c.msgID {
				l.group = c.inv.c.input + "/" + m.Group // a group of one consumer's input queue
			}
		}
		w.obs.runByMsg[c.msgID] = run
	}
	w.obs.runs[run] = l
	w.obs.nameToken(strAttr(wr.New, "last_holder"), run)
	w.obs.credits[id]++
	if first, ok := w.obs.firstAt[id]; !ok {
		w.obs.firstAt[id] = l.at
	} else if time.Since(first) > w.sc.ttl && !w.guarded(id) {
		// A delivery of an operation without a guard after its record's TTL is a new
		// execution by contract (only a guard write keeps an effect single past the
		// record's retention). An operator's redrive can bring one.
		w.obs.reexecuted[id]++
	}
	for _, o := range w.ops {
		if o.effectID() == id && o.amt == l.amt {
			w.obs.applied[o]++
			break
		}
	}
	w.tracef("commit #%d credits %s by %s (input group %q)", wr.Seq, id, run, l.group)
}

// guarded reports whether an effect's operations carry a guard write.
func (w *world) guarded(id string) bool {
	for _, o := range w.ops {
		if o.effectID() == id && o.guard {
			return true
		}
	}
	return false
}

// opOf returns the operation of an input message: by its sim-op attribute (straight
// from a producer), or by its body (from the ingress, which sends only the key).
func (w *world) opOf(m simsqs.Message) *op {
	if o := w.cutBodyOp(m); o != nil { // a dead letter cut to fit (edges.go)
		return o
	}
	if v, ok := m.Attributes["sim-op"]; ok {
		for _, o := range w.ops {
			if o.name == aws.ToString(v.StringValue) {
				return o
			}
		}
		return nil
	}
	for _, o := range w.ops {
		if o.body == m.Body {
			return o
		}
	}
	return nil
}

// dlqCopies returns the consumer's dead letters by source message id.
func (w *world) dlqCopies() map[string]simsqs.Message {
	out := map[string]simsqs.Message{}
	for _, m := range w.sqs.Messages(w.dlq) {
		if src, ok := m.Attributes[sqsmsg.DLQSourceMessageIDAttribute]; ok {
			out[aws.ToString(src.StringValue)] = m
		}
	}
	return out
}

// acknowledged checks a message the event source mapping is about to delete: its
// operation's effect is in place, or the consumer dead-lettered it. Anything else is an
// error acknowledged as success.
func (o *observations) acknowledged(w *world, inv *invocation, m simsqs.Message) {
	o.acks++
	op := w.opOf(m)
	if op == nil {
		return
	}
	if _, ok := w.dlqCopies()[m.ID]; ok {
		return
	}
	if o.applied[op] == 0 {
		o.violation("ack", "message %s of %s (%s) acknowledged, but neither its effect is in place nor is it dead-lettered", m.ID, op.name, op.kind)
		return
	}
	// The message whose delivery committed the effect is acknowledged only once the
	// outbound messages of that commit are sent (or dead-lettered), unless another
	// delivery of the key in the same batch holds them (it is not acknowledged until
	// they are sent).
	if _, ok := o.runByMsg[m.ID]; ok && !w.otherDeliveryIn(inv, m, op) && w.outboxPending(inv.c, m) {
		o.violation("ack", "message %s of %s, which committed its effect, acknowledged while the commit's outbound messages are still pending", m.ID, op.name)
	}
}

// otherDeliveryIn reports whether inv's batch holds another message of op's effect.
func (w *world) otherDeliveryIn(inv *invocation, m simsqs.Message, op *op) bool {
	for _, x := range inv.msgs {
		if o := w.opOf(x); x.ID != m.ID && o != nil && o.effectID() == op.effectID() {
			return true
		}
	}
	return false
}

// outboxPending reports whether the idempotency record of m's key holds pending
// outbound messages.
func (w *world) outboxPending(c *consumer, m simsqs.Message) bool {
	key, err := w.consumerKey(c, m)
	if err != nil {
		return false
	}
	rk, err := idem.RecordKey(c.scope, key, false)
	if err != nil {
		return false
	}
	out, _ := w.db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(c.layout.Table), Key: c.store.Key(rk)})
	_, pending := out.Item[c.names.outbox]
	return pending
}

// check is the end-of-run oracle.
func (w *world) check() {
	o := &w.obs
	reasons, parked := w.deadLetters(true), w.checkParks()
	for _, op := range w.ops {
		rs := reasons[op]
		for _, r := range rs {
			if !containsAny(r, w.reasons(op, parked)) && (op.kind != kindValid || !w.twinDeadLettered(op, r)) {
				o.violation("dead-letter", "%s (%s) dead-lettered with %q", op.name, op.kind, r)
			}
		}
		switch op.kind {
		case kindBad, kindClosed, kindKeyless, kindNoKey, kindForged:
			if len(o.sent[op]) > 0 && len(rs) == 0 {
				o.violation("dead-letter", "%s (%s) was delivered but is not in the dead-letter queue", op.name, op.kind)
			}
		}
	}
	w.checkEffects(reasons)
	w.checkRecords()
	w.checkResponses()
	w.checkOutbound()
	w.checkEdges()
	if w.ingress != nil && w.ingress.statusChecked {
		// checked when the clients read it, before the late redrive (late.go)
	} else {
		w.checkStatus(reasons)
	}
	for _, c := range w.sc.consumers {
		if n := len(w.sqs.Messages(c.input)); n > 0 {
			o.violation("stuck", "%d messages still in %s", n, c.input)
		}
	}
}

// deadLetters returns the reasons of the dead letters of each operation that the
// dead-letter queue holds now; with report, it reports those that break a promise: a
// message SQS parked still there after the redrives, a dead letter of no operation.
func (w *world) deadLetters(report bool) map[*op][]string {
	reasons := map[*op][]string{}
	for _, m := range w.sqs.Messages(w.dlq) {
		op := w.opOf(m)
		if m.MovedBySQS {
			if report {
				w.obs.violation("stuck", "message %s of %s is still parked in the dead-letter queue after %d redrives", m.ID, opName(op), redriveRounds+1)
			}
			continue
		}
		if _, ok := m.Attributes[sqsmsg.DLQOutboundQueueAttribute]; ok {
			continue // an outbound message dead-lettered: checked with the outbound messages
		}
		r := aws.ToString(m.Attributes[sqsmsg.DLQReasonAttribute].StringValue)
		if op == nil {
			if report {
				w.obs.violation("dead-letter", "message %s in the dead-letter queue belongs to no operation: %s", m.ID, r)
			}
			continue
		}
		reasons[op] = append(reasons[op], r)
	}
	return reasons
}

// checkEffects: each effect (business id) is applied once at most, or once per key the
// consumer saw it under when it has no guard (a key is an operation, by contract), a
// re-execution past its record's TTL aside; at least once when an operation that must
// apply it was taken by SQS or the ingress and not dead-lettered; never for operations
// that must not apply.
func (w *world) checkEffects(reasons map[*op][]string) {
	o := &w.obs
	byEffect := map[string][]*op{}
	for _, op := range w.ops {
		byEffect[op.effectID()] = append(byEffect[op.effectID()], op)
	}
	for id, ops := range byEffect {
		got := o.credits[id] - o.reexecuted[id]
		allowed := 1
		if !w.guarded(id) {
			allowed = max(1, len(o.keysOf[id]))
		}
		must, may := false, false
		var who []string
		for _, op := range ops {
			switch op.kind {
			case kindValid, kindTwin, kindCapped:
				may = true
				if o.accepted[op] && len(reasons[op]) == 0 {
					must = true // not refused, so it was applied
					who = append(who, op.name)
				}
			}
		}
		switch {
		case got > allowed:
			o.violation("effect", "effect %s applied %d times (at most %d: %s)", shortID(id), got, allowed, keyCount(allowed))
		case got == 0 && must:
			o.violation("effect", "effect %s never applied, though operations %s were taken and not dead-lettered", shortID(id), strings.Join(who, ","))
		case got > 0 && !may:
			o.violation("effect", "effect %s applied, though none of its operations may apply it (%s)", shortID(id), kinds(ops))
		}
	}
}

func keyCount(n int) string {
	if n == 1 {
		return "guarded, or one key"
	}
	return fmt.Sprintf("no guard, %d keys", n)
}

func kinds(ops []*op) string {
	var ks []string
	for _, o := range ops {
		ks = append(ks, o.name+":"+o.kind.String())
	}
	return strings.Join(ks, ",")
}

func opName(o *op) string {
	if o == nil {
		return "?"
	}
	return o.name
}

func shortID(id string) string {
	if len(id) > 16 {
		return id[:12] + "…"
	}
	return id
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// twinDeadLettered: of a valid operation and its twin (its business id with another
// payload), the one processed second is dead-lettered, whichever it is.
func (w *world) twinDeadLettered(o *op, reason string) bool {
	if !strings.Contains(reason, "payload does not match") {
		return false
	}
	for _, t := range w.ops {
		if t.twinOf == o {
			return true
		}
	}
	return false
}

// reasons are the texts one of which the dead-letter reason of operation o contains;
// parked are the operations a step of which was parked past its service's key window
// where StepWith may (checkParks).
func (w *world) reasons(o *op, parked map[*op]bool) []string {
	k := o.kind
	rs := k.reasons()
	if parked[o] {
		rs = append(rs, idem.ErrPastKeyWindow.Error())
	}
	if w.sc.keySource == idem.KeyFromField && (k == kindBad || k == kindKeyless) {
		// Keyed by the body's id field alone: a body without it has no key.
		rs = append(rs, "no idempotency key", "not a JSON object")
	}
	return rs
}

func (k opKind) reasons() []string {
	switch k {
	case kindBad:
		return []string{"invalid message", "hash payload", "not valid JSON"}
	case kindClosed:
		return []string{"account closed"}
	case kindCapped:
		return []string{"over the cap"}
	case kindTwin:
		return []string{"payload does not match"}
	case kindKeyless:
		// Redriven (late.go), it is keyless still: its deduplication id is the redrive's.
		return []string{"content-based deduplication", "a redrive gave it"}
	case kindNoKey:
		return []string{"no idempotency key"}
	case kindForged:
		return []string{"HTTP callers' namespace"}
	}
	return nil
}

// checkRecords: once settled, nothing is in progress and no outbox is pending.
func (w *world) checkRecords() {
	for _, c := range w.sc.consumers {
		for _, it := range w.records(c) {
			rk, _ := c.recordKey(it)
			if strAttr(it, c.names.status) == string(persistence.StatusInProgress) {
				w.obs.violation("stuck", "record %s of %s is still IN_PROGRESS", rk, c.name)
			}
			if _, ok := it[c.names.outbox]; ok {
				w.obs.violation("stuck", "record %s of %s still has outbound messages pending", rk, c.name)
			}
		}
	}
}

// stackKeys are the stack's keys every function of the simulated stack holds (the
// template gives each the stack's secret): the ingress signs with them, the consumers
// verify what it signed.
var stackKeys = func() *sqsmsg.Keys {
	k, err := sqsmsg.NewKeys([]byte("the simulated stack's secret, 32+ bytes long"))
	if err != nil {
		panic(err) // a constant too short: a bug of this file, found by any test
	}
	return k
}()
