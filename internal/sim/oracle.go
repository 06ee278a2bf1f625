package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/sim/simsqs"
	"github.com/idemgo/sqs-lambda-consumer/internal/simdb"
)

// The oracle: a small model of what must hold, checked as the run goes (an effect
// applied twice, an acknowledgement without an outcome) and at its end, once the faults
// have stopped and the world has settled. It reads only what an outside observer could:
// the business table, the queues and the idempotency table; never the code under test.

// Violation is one broken promise.
type Violation struct {
	Check string // effect, ack, dead-letter, outbound, order, stuck, ...
	Text  string
}

func (v Violation) String() string { return v.Check + ": " + v.Text }

type observations struct {
	violations  []Violation
	done        map[*invocation]bool
	killed      int
	sent        map[*op][]string  // message ids SQS stored for an operation
	credits     map[string]int    // effect id -> credits committed
	creditSeq   map[string]int64  // effect id -> commit sequence of its first credit
	creditGroup map[string]string // effect id -> the input message group whose delivery committed it
	creditAt    map[string]time.Time
	creditMsg   map[string]string // effect id -> the input message whose delivery committed it
	reexecuted  map[string]int    // effect ids applied again past their record's TTL (no guard: a new execution by contract)
	parked      map[string]bool   // effect ids of operations a message of which SQS moved to the DLQ
	msgOp       map[string]*op    // input message id -> operation
	acks        int
	receives    int
	stats       Stats
}

// Stats counts what a run did.
type Stats struct {
	Ops, Sends, Receives, Invocations, Killed, Acks int
	Calls                                           int64
	OutboundDelivered, OutboundDuplicates           int
	DeadLettered, Parked                            int
	Folded                                          int // commits whose journal entry was the record (fold scenarios)
	VirtualTime                                     time.Duration
}

func (o *observations) violation(check, format string, args ...any) {
	o.violations = append(o.violations, Violation{Check: check, Text: fmt.Sprintf(format, args...)})
}

func (o *observations) received(m simsqs.Message) { o.receives++ }

// onWrite watches the business table: a credit is an account update that set last_op.
func (w *world) onWrite(wr simdb.Write) {
	if wr.Table != bizTable || wr.New == nil {
		return
	}
	pk, _ := wr.New["pk"].(*types.AttributeValueMemberS)
	if pk != nil && strings.HasPrefix(pk.Value, recPrefix) && wr.New["op"] != nil && wr.Old["op"] == nil {
		w.obs.stats.Folded++
	}
	if pk == nil || !strings.HasPrefix(pk.Value, "acct#") {
		return
	}
	if numAttr(wr.New, "applied") == numAttr(wr.Old, "applied") {
		return
	}
	id, _ := wr.New["last_op"].(*types.AttributeValueMemberS)
	if id == nil {
		return
	}
	w.obs.credits[id.Value]++
	if w.obs.credits[id.Value] == 1 {
		w.obs.creditSeq[id.Value] = wr.Seq
		w.obs.creditAt[id.Value] = time.Now()
		if c := w.cur; c != nil {
			w.obs.creditMsg[id.Value] = c.msgID
			for _, m := range c.inv.msgs {
				if m.ID == c.msgID {
					w.obs.creditGroup[id.Value] = m.Group
				}
			}
		}
	}
	w.tracef("commit #%d credits %s (input group %q)", wr.Seq, id.Value, w.obs.creditGroup[id.Value])
	if n := w.obs.credits[id.Value]; n > 1 && !w.secondApplyAllowed(id.Value) {
		w.obs.violation("effect", "effect %s applied %d times", id.Value, n)
	}
}

// secondApplyAllowed: a delivery of an operation without a guard after its record's
// TTL is a new execution by contract (the README says so: only a guard write keeps an
// effect single past the record's retention). An operator's redrive can bring one.
func (w *world) secondApplyAllowed(id string) bool {
	for _, o := range w.ops {
		if o.effectID() == id && o.guard {
			return false
		}
	}
	first, ok := w.obs.creditAt[id]
	if ok && time.Since(first) > w.sc.ttl {
		w.obs.reexecuted[id]++
		return true
	}
	return false
}

func (w *world) opOf(m simsqs.Message) *op {
	if v, ok := m.Attributes["sim-op"]; ok {
		for _, o := range w.ops {
			if o.name == aws.ToString(v.StringValue) {
				return o
			}
		}
	}
	return nil
}

// dlqCopies returns the consumer's dead letters by source message id.
func (w *world) dlqCopies() map[string]simsqs.Message {
	out := map[string]simsqs.Message{}
	for _, m := range w.sqs.Messages(w.dlq) {
		if src, ok := m.Attributes[idem.DLQSourceMessageIDAttribute]; ok {
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
	if !w.journalHas(op) {
		o.violation("ack", "message %s of %s (%s) acknowledged, but neither its effect is in place nor is it dead-lettered", m.ID, op.name, op.kind)
		return
	}
	// The message whose delivery committed the effect is acknowledged only once the
	// outbound messages of that commit are sent (or dead-lettered), unless another
	// delivery of the key in the same batch holds them (it is not acknowledged until
	// they are sent).
	if o.creditMsg[op.effectID()] == m.ID && !w.otherDeliveryIn(inv, m, op) && w.outboxPending(m) {
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
func (w *world) outboxPending(m simsqs.Message) bool {
	ev := w.sqs.Event(w.input, []simsqs.Message{m})
	key, err := idem.MessageKey(ev.Records[0], w.sc.keyField)
	if err != nil {
		return false
	}
	pk, err := idem.RecordKey(scope, key, false)
	if err != nil {
		return false
	}
	out, _ := w.db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(w.sc.layout().Table), Key: w.recordItemKey(pk)})
	_, pending := out.Item["outbox"]
	return pending
}

// journalHas reports whether the journal holds op's effect with op's amount (an entry
// of its own, or in a fold scenario the completed record that is the entry).
func (w *world) journalHas(o *op) bool {
	items, _ := w.db.Items(bizTable)
	for _, it := range items {
		id, _ := it["op"].(*types.AttributeValueMemberS)
		if id != nil && id.Value == o.effectID() && numAttr(it, "amt") == o.amt {
			return true
		}
	}
	return false
}

// check is the end-of-run oracle.
func (w *world) check() {
	o := &w.obs
	dlq := w.sqs.Messages(w.dlq)
	reasons := map[*op][]string{}
	for _, m := range dlq {
		op := w.opOf(m)
		if m.MovedBySQS {
			o.violation("stuck", "message %s of %s is still parked in the dead-letter queue after the redrive", m.ID, opName(op))
			continue
		}
		if _, ok := m.Attributes[outboundQueueAttribute]; ok {
			continue // an outbound message dead-lettered: checked with the outbound messages
		}
		r := aws.ToString(m.Attributes[idem.DLQReasonAttribute].StringValue)
		if op == nil {
			o.violation("dead-letter", "message %s in the dead-letter queue belongs to no operation: %s", m.ID, r)
			continue
		}
		reasons[op] = append(reasons[op], r)
	}
	// Effects, per effect id: the operations that must have applied it.
	byEffect := map[string][]*op{}
	for _, op := range w.ops {
		byEffect[op.effectID()] = append(byEffect[op.effectID()], op)
	}
	for _, op := range w.ops {
		rs := reasons[op]
		delivered := len(o.sent[op]) > 0
		expect := op.kind.reasons()
		for _, r := range rs {
			if !containsAny(r, expect) && (op.kind != kindValid || !w.twinDeadLettered(op, r)) {
				o.violation("dead-letter", "%s (%s) dead-lettered with %q", op.name, op.kind, r)
			}
		}
		switch op.kind {
		case kindBad, kindClosed, kindKeyless, kindNoKey:
			if delivered && len(rs) == 0 {
				o.violation("dead-letter", "%s (%s) was delivered but is not in the dead-letter queue", op.name, op.kind)
			}
		}
	}
	for id, ops := range byEffect {
		// An effect is applied once at most (a re-execution past the record's TTL of an
		// operation without a guard aside), at least once when an operation that must
		// apply it was stored by SQS and not dead-lettered, and never for operations
		// that must not apply.
		got := o.credits[id] - o.reexecuted[id]
		must, may := false, false
		var who []string
		for _, op := range ops {
			switch op.kind {
			case kindValid, kindTwin:
				may = true
				if len(o.sent[op]) > 0 && len(reasons[op]) == 0 {
					must = true
					who = append(who, op.name)
				}
			case kindCapped:
				may = true
				if len(o.sent[op]) > 0 && len(reasons[op]) == 0 {
					must = true // not refused, so it was applied
					who = append(who, op.name)
				}
			}
		}
		switch {
		case got > 1:
			o.violation("effect", "effect %s applied %d times", shortID(id), got)
		case got == 0 && must:
			o.violation("effect", "effect %s never applied, though operations %s were delivered and not dead-lettered", shortID(id), strings.Join(who, ","))
		case got > 0 && !may:
			o.violation("effect", "effect %s applied, though none of its operations may apply it (%s)", shortID(id), kinds(ops))
		}
	}
	w.checkRecords()
	w.checkOutbound()
	if n := len(w.sqs.Messages(w.input)); n > 0 {
		o.violation("stuck", "%d messages still in the input queue", n)
	}
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

// twinDeadLettered: of a valid operation and its twin (same key, other payload), the
// one processed second is dead-lettered, whichever it is.
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

func (k opKind) reasons() []string {
	switch k {
	case kindBad:
		return []string{"invalid message", "hash payload", "not valid JSON"}
	case kindCapped:
		return []string{"over the cap"}
	case kindTwin:
		return []string{"payload does not match"}
	}
	if r := k.reason(); r != "" {
		return []string{r}
	}
	return nil
}

// checkRecords: once settled, nothing is in progress and no outbox is pending.
func (w *world) checkRecords() {
	for _, it := range w.records() {
		pk, _ := it["pk"].(*types.AttributeValueMemberS)
		status, _ := it["status"].(*types.AttributeValueMemberS)
		if status != nil && status.Value == string(idem.StatusInProgress) {
			w.obs.violation("stuck", "record %s is still IN_PROGRESS", pk.Value)
		}
		if _, ok := it["outbox"]; ok {
			w.obs.violation("stuck", "record %s still has outbound messages pending", pk.Value)
		}
	}
}

// outboundQueueAttribute marks an outbound message that was dead-lettered.
const outboundQueueAttribute = idem.DLQOutboundQueueAttribute

// delivery is one outbound message as a downstream consumer receives it.
type delivery struct {
	queue, group, key, body string
	src                     string
	i, n                    int
	seq                     int64
}

// checkOutbound is the downstream receiver's view: every applied operation's messages
// arrive (or are dead-lettered with a reason), no two distinct messages share a key, a
// message keeps its key and body on every delivery, and in each FIFO group the first
// deliveries follow the order of the commits.
func (w *world) checkOutbound() {
	o := &w.obs
	var ds []delivery
	for _, a := range w.sqs.Accepted() {
		if a.Queue != w.outFIFO && a.Queue != w.outStd {
			continue
		}
		var b outbound
		if err := json.Unmarshal([]byte(a.Msg.Body), &b); err != nil {
			o.violation("outbound", "unreadable outbound message %s: %v", a.Msg.ID, err)
			continue
		}
		key := ""
		if v, ok := a.Msg.Attributes[idem.KeyAttribute]; ok {
			key = aws.ToString(v.StringValue)
		}
		ds = append(ds, delivery{queue: a.Queue, group: a.Msg.Group, key: key, body: a.Msg.Body, src: b.Src, i: b.I, n: b.N, seq: a.Msg.Seq})
	}
	type logical struct {
		src string
		i   int
	}
	first := map[logical]delivery{}
	byKey := map[string]logical{}
	for _, d := range ds {
		l := logical{d.src, d.i}
		if f, ok := first[l]; ok {
			o.stats.OutboundDuplicates++ // delivered again after the deduplication interval, or on a standard queue
			if f.key != d.key || f.body != d.body || f.queue != d.queue || f.group != d.group {
				o.violation("outbound", "message %d of %s was delivered twice with different keys, bodies or groups", d.i, shortID(d.src))
			}
			continue
		}
		first[l] = d
		o.stats.OutboundDelivered++
		if d.key == "" {
			o.violation("outbound", "message %d of %s carries no %s attribute", d.i, shortID(d.src), idem.KeyAttribute)
		} else if prev, ok := byKey[d.key]; ok && prev != l {
			o.violation("outbound", "messages %d and %d of %s share the key %q: a receiver keyed on it applies one and refuses the other", prev.i, d.i, shortID(d.src), d.key)
		}
		byKey[d.key] = l
	}
	// Dead-lettered outbound messages.
	dead := map[logical]bool{}
	for _, m := range w.sqs.Messages(w.dlq) {
		if _, ok := m.Attributes[outboundQueueAttribute]; !ok {
			continue
		}
		var b outbound
		if json.Unmarshal([]byte(m.Body), &b) == nil {
			dead[logical{b.Src, b.I}] = true
			if !strings.Contains(aws.ToString(m.Attributes[idem.DLQReasonAttribute].StringValue), "shorter than") {
				o.violation("outbound", "message %d of %s dead-lettered for an unexpected reason: %s", b.I, shortID(b.Src),
					aws.ToString(m.Attributes[idem.DLQReasonAttribute].StringValue))
			}
		}
	}
	// Every applied effect's messages arrived or were dead-lettered; none of an effect
	// that was not applied.
	want := map[string]int{}
	for _, op := range w.ops {
		if o.credits[op.effectID()] > 0 {
			var b body
			if json.Unmarshal([]byte(op.body), &b) == nil {
				want[op.effectID()] = b.Out
			}
		}
	}
	for src, n := range want {
		for i := range n {
			l := logical{src, i}
			if _, ok := first[l]; !ok && !dead[l] {
				o.violation("outbound", "message %d of %d of %s was never delivered", i, n, shortID(src))
			}
		}
	}
	for l := range first {
		if _, ok := want[l.src]; !ok {
			o.violation("outbound", "message %d of %s was sent, but its effect was not applied", l.i, shortID(l.src))
		}
	}
	// FIFO order: per group, first deliveries in commit order, then position order.
	groups := map[string][]delivery{}
	for _, d := range ds {
		if d.queue == w.outFIFO && first[logical{d.src, d.i}].seq == d.seq {
			groups[d.group] = append(groups[d.group], d)
		}
	}
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		seq := groups[g]
		for j := 1; j < len(seq); j++ {
			a, b := seq[j-1], seq[j]
			if o.parked[a.src] || o.parked[b.src] || !w.sc.fifo || o.creditGroup[a.src] != o.creditGroup[b.src] {
				continue // the guarantee is per input group (and SQS broke that group's order when it parked a message)
			}
			ca, cb := o.creditSeq[a.src], o.creditSeq[b.src]
			if ca > cb || ca == cb && a.i > b.i {
				o.violation("order", "group %s: message %d of %s (committed #%d, from input group %s) arrived after message %d of %s (committed #%d)",
					g, b.i, shortID(b.src), cb, o.creditGroup[b.src], a.i, shortID(a.src), ca)
			}
		}
	}
}
