package sim

import (
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/sim/simsqs"
)

// The late redrive (config.lateRedrive) and the retention check.
//
// Once the world has settled and the clients have read their final status, the
// operator comes back to the dead-letter queue past the records' TTL, at a drawn moment
// within the queue's retention, and redrives every input message it still keeps to its
// consumer (idemctl redrive: the body, the message's own attributes, its key, its group);
// then once more, a drawn moment within the retention after that (lateRounds). The world
// idles meanwhile, an hour at a time: only DynamoDB's TTL process changes anything
// (expire), and it runs as usual. After each redrive the world settles again; after the
// last it idles until the queue has let go of every dead letter it kept, so that the TTL
// process has looked at every record whose message the queue still held.
//
// The retention check is the promise of idem.Config.DLQRetention: a FAILED record that
// holds steps is never deleted by the TTL process while the dead-letter queue still keeps
// a message that, redriven, would come back to it. Such a message would find no record,
// and call again an outside service that may have forgotten its key.

// lateRounds is how many times the operator comes back: a copy it redrives that is
// dead-lettered again starts a new stay in the queue, which the next round may outlast
// the first's record with.
const lateRounds = 2

// lateRedrive is the operator's redrives past the TTL: the first a drawn time past it,
// each next one a drawn time within the queue's retention of the round before.
func (w *world) lateRedrive() {
	keep := w.dlqKeep()
	span := w.sc.ttl
	if keep > 0 {
		span = keep
	}
	w.idle(w.sc.ttl)
	for round := 1; round <= lateRounds; round++ {
		w.idle(dur(w.rng, time.Minute, span))
		moved := map[*consumer]int{}
		w.sqs.Move(w.dlq, func(m simsqs.Message) (string, simsqs.Message, bool) {
			c, out, ok := w.redriven(m)
			if ok {
				moved[c]++
				return c.input, out, true
			}
			return "", m, false
		})
		for _, c := range w.sc.consumers {
			if n := moved[c]; n > 0 {
				w.tracef("operator redrives %d dead letters to %s, past the records' TTL (round %d)", n, c.input, round)
				w.wakePollers(c)
			}
		}
		if len(moved) > 0 {
			// Copies of one key redriven together take turns, each answered in progress
			// while another holds it: one may spend its receives so, and SQS parks it,
			// for the operator to redrive again, as after the faults.
			w.settle(time.Hour, true)
			w.redriveWhileParked()
		}
	}
	w.idle(max(keep, w.sc.ttl) + 2*ttlEvery)
}

// dlqKeep is how long the dead-letter queue keeps a message: the consumer's
// DLQ_RETENTION when set; 0 (for good, as far as the run goes) when not.
func (w *world) dlqKeep() time.Duration { return w.sc.cfg.dlqRetention }

// kept reports whether the dead-letter queue still keeps m.
func (w *world) kept(m simsqs.Message) bool {
	keep := w.dlqKeep()
	return keep == 0 || time.Now().Before(m.EnqueuedAt.Add(keep))
}

// idle lets d pass, an hour at a time while the world is quiet (quiet): the periodic
// events due meanwhile (pollers finding nothing, the reaper, the TTL process) run once at
// each step. While it is not (an invocation running or about to, a message in a queue, a
// client's request), the world runs as usual.
func (w *world) idle(d time.Duration) {
	end := time.Now().Add(d)
	for now := time.Now(); now.Before(end); now = time.Now() {
		if !w.quiet() {
			w.run(end, w.quiet)
			continue
		}
		time.Sleep(min(time.Hour, end.Sub(now)))
		w.run(time.Now(), nil)
	}
}

// quiet reports whether nothing is running or waiting to: no invocation, no pending
// work (pendingWork), no client request in flight.
func (w *world) quiet() bool {
	return len(w.live) == 0 && w.pendingWork(false) == "" && (w.ingress == nil || !w.ingress.busy())
}

// redriven is what the operator sends back for the dead letter m, and to which consumer,
// as idemctl redrive builds it: an input message the queue still keeps, whole (a body
// cut to fit cannot be redriven), of a consumer it can name, with its own attributes and
// its key (sqsmsg.RedriveAttributes), its group, and a redrive's deduplication id. An
// outbound dead letter goes back to its own queue, not to an input, and is left alone.
func (w *world) redriven(m simsqs.Message) (*consumer, simsqs.Message, bool) {
	if !w.kept(m) {
		return nil, m, false
	}
	if _, ok := m.Attributes[sqsmsg.DLQOutboundQueueAttribute]; ok {
		return nil, m, false
	}
	if _, ok := m.Attributes[sqsmsg.DLQBodyCutAttribute]; ok {
		return nil, m, false
	}
	var c *consumer
	if m.MovedBySQS {
		c = w.consumerOfQueue(m.From)
	} else {
		src := aws.ToString(m.Attributes[sqsmsg.DLQSourceQueueAttribute].StringValue)
		for _, x := range w.sc.consumers {
			if src == w.sqs.ARN(x.input) {
				c = x
			}
		}
	}
	if c == nil {
		return nil, m, false
	}
	attrs, _, err := sqsmsg.RedriveAttributes(m.Body, m.DedupID, m.Attributes)
	if err != nil {
		return nil, m, false
	}
	m.Attributes, m.DedupID = attrs, ""
	if strings.HasSuffix(c.input, ".fifo") {
		m.DedupID = sqsmsg.RedriveDedupPrefix + m.ID
		if m.Group == "" {
			m.Group = "redrive"
		}
	} else {
		m.Group = ""
	}
	return c, m, true
}

// checkRetention runs before the TTL process deletes c's record rk: see the retention
// check above.
func (w *world) checkRetention(c *consumer, rk string) {
	if w.dlqKeep() == 0 {
		return // the consumer was told of no retention: it promises none
	}
	rec := w.record(c, rk)
	if rec == nil || rec.Status != persistence.StatusFailed || len(rec.Steps) == 0 {
		return
	}
	for _, m := range w.sqs.Messages(w.dlq) {
		to, back, ok := w.redriven(m)
		if !ok || to != c {
			continue
		}
		key, err := w.consumerKey(c, back)
		if err != nil {
			continue
		}
		if k, err := idem.RecordKey(c.scope, key, false); err == nil && k == rk {
			w.obs.violation("retention", "the TTL process deleted %s's FAILED record %s, which holds the steps %v, while the dead-letter queue keeps its message %s until %s (DLQ_RETENTION %s): redriven, it would call them again",
				c.name, rk, rec.Steps, m.ID, w.since(m.EnqueuedAt.Add(w.dlqKeep())), w.dlqKeep())
			return
		}
	}
}
