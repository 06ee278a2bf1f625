package sim

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
)

// delivery is one outbound message as a downstream consumer receives it.
type delivery struct {
	queue, group, key, body string
	out                     outbound
	seq                     int64
}

// logical is one outbound message of one landed run: the run and its position.
type logical struct {
	run string
	i   int
}

// checkOutbound is the downstream receiver's view. Every landed run's messages arrive
// (or are dead-lettered with a reason), and no message arrives for a run whose writes
// did not land (a commit refused, guarded, or fenced out, a holder whose lease was taken
// over). No two distinct messages share a key; a message keeps its key, group and body
// on every delivery (a re-execution past its record's TTL, by contract a new one, aside);
// and in each FIFO group the first deliveries follow the order of the commits.
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
		ds = append(ds, delivery{queue: a.Queue, group: a.Msg.Group, key: key, body: a.Msg.Body, out: b, seq: a.Msg.Seq})
	}
	first := map[logical]delivery{}
	byKey := map[string]delivery{}
	for _, d := range ds {
		l := logical{d.out.Run, d.out.I}
		if _, ok := o.runs[l.run]; !ok {
			o.violation("outbound", "message %d of %s carries run %s, whose writes never landed (a commit refused, guarded or fenced out sent it)", d.out.I, shortID(d.out.Src), l.run)
		}
		if d.key == "" {
			o.violation("outbound", "message %d of %s carries no %s attribute", d.out.I, shortID(d.out.Src), idem.KeyAttribute)
		} else if f, ok := byKey[d.key]; ok {
			switch {
			case f.out.Src != d.out.Src || f.out.I != d.out.I:
				o.violation("outbound", "messages %d of %s and %d of %s share the key %q: a receiver keyed on it applies one and refuses the other", f.out.I, shortID(f.out.Src), d.out.I, shortID(d.out.Src), d.key)
			case f.queue != d.queue || f.group != d.group:
				o.violation("outbound", "message %d of %s was delivered twice to different queues or groups", d.out.I, shortID(d.out.Src))
			case f.body != d.body && o.reexecuted[d.out.Src] == 0:
				o.violation("outbound", "message %d of %s was delivered twice under one key with different bodies (runs %s and %s)", d.out.I, shortID(d.out.Src), f.out.Run, d.out.Run)
			}
		} else {
			byKey[d.key] = d
		}
		if _, ok := first[l]; ok {
			o.stats.OutboundDuplicates++ // delivered again after the deduplication interval, or on a standard queue
			continue
		}
		first[l] = d
		o.stats.OutboundDelivered++
	}
	// Dead-lettered outbound messages.
	dead := map[logical]bool{}
	for _, m := range w.sqs.Messages(w.dlq) {
		if _, ok := m.Attributes[sqsmsg.DLQOutboundQueueAttribute]; !ok {
			continue
		}
		var b outbound
		if json.Unmarshal([]byte(m.Body), &b) == nil {
			dead[logical{b.Run, b.I}] = true
			if !strings.Contains(aws.ToString(m.Attributes[sqsmsg.DLQReasonAttribute].StringValue), "shorter than") {
				o.violation("outbound", "message %d of %s dead-lettered for an unexpected reason: %s", b.I, shortID(b.Src),
					aws.ToString(m.Attributes[sqsmsg.DLQReasonAttribute].StringValue))
			}
		}
	}
	// Every landed run's messages arrived or were dead-lettered.
	type effectAmt struct {
		effect string
		amt    int64
	}
	outs := map[effectAmt]int{}
	for _, op := range w.ops {
		outs[effectAmt{op.effectID(), op.amt}] = op.b.Out
	}
	runs := make([]string, 0, len(o.runs))
	for run := range o.runs {
		runs = append(runs, run)
	}
	sort.Strings(runs)
	for _, run := range runs {
		l := o.runs[run]
		n := outs[effectAmt{l.effect, l.amt}]
		for i := range n {
			if _, ok := first[logical{run, i}]; !ok && !dead[logical{run, i}] {
				o.violation("outbound", "message %d of %d of %s (run %s) was never delivered", i, n, shortID(l.effect), run)
			}
		}
	}
	w.checkOrder(ds, first)
}

// checkOrder: per FIFO group, first deliveries in commit order, then position order,
// for runs committed through the same input group (the README's exceptions: across a
// message SQS parked, and for records committed through other input groups).
func (w *world) checkOrder(ds []delivery, first map[logical]delivery) {
	o := &w.obs
	groups := map[string][]delivery{}
	for _, d := range ds {
		if d.queue == w.outFIFO && first[logical{d.out.Run, d.out.I}].seq == d.seq {
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
			ra, rb := o.runs[a.out.Run], o.runs[b.out.Run]
			if o.parked[ra.effect] || o.parked[rb.effect] || !w.sc.fifo || ra.group != rb.group {
				continue // the guarantee is per input group (and SQS broke that group's order when it parked a message)
			}
			if ra.seq > rb.seq || ra.seq == rb.seq && a.out.I > b.out.I {
				o.violation("order", "group %s: message %d of %s (committed #%d, from input group %s) arrived after message %d of %s (committed #%d)",
					g, b.out.I, shortID(b.out.Src), rb.seq, rb.group, a.out.I, shortID(a.out.Src), ra.seq)
			}
		}
	}
}
