package sim

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/sim/simsqs"
	"github.com/idemgo/sqs-lambda-consumer/internal/simdb"
)

// Report is what one schedule found.
type Report struct {
	Seed       uint64
	Scenario   string
	Config     string // the configuration, as the summary counts them
	Violations []Violation
	Stats      Stats
	Trace      string // the run's events, when asked for
}

// Failed reports whether any promise broke.
func (r *Report) Failed() bool { return len(r.Violations) > 0 }

// Run runs the schedule of seed inside a synctest bubble of t and returns what the
// oracle found. With trace, the report carries every event of the run.
func Run(t *testing.T, seed uint64, trace bool) *Report {
	var rep *Report
	synctest.Test(t, func(t *testing.T) {
		rep = runWorld(seed, trace)
	})
	return rep
}

func runWorld(seed uint64, trace bool) *Report {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	sc := newScenario(rng, seed)
	w := &world{
		seed: seed, rng: rng, sc: sc, skew: rand.New(rand.NewPCG(seed, 0xd41f7)),
		inflight: map[*call]bool{}, live: map[*invocation]bool{},
		trace: newTracer(trace),
	}
	w.obs = newObservations()
	w.start = time.Now()
	w.ops = w.sc.ops
	rep := &Report{Seed: seed, Scenario: w.sc.String(), Config: w.sc.cfg.String() + "/" + w.sc.mode.String()}
	if err := w.setup(); err != nil {
		rep.Violations = append(rep.Violations, Violation{"setup", err.Error()})
		return rep
	}
	w.tracef("scenario: %s", rep.Scenario)
	for _, o := range w.ops {
		for _, s := range o.sends {
			w.sendsLeft++
			w.at(w.start.Add(s.at), func() {
				w.sendsLeft--
				if s.door == viaIngress {
					w.clientPost(o, s)
				} else {
					w.producerSend(o, s)
				}
			})
		}
	}
	for _, c := range w.sc.consumers {
		rh, err := w.newReaper(c)
		if err != nil {
			rep.Violations = append(rep.Violations, Violation{"setup", err.Error()})
			return rep
		}
		w.at(w.start.Add(w.sc.reaperEvery), func() { w.reap(c, rh) })
		for range w.sc.slots {
			s := &slot{id: len(c.slots), c: c}
			if c.name != "a" {
				s.id += 100
			}
			c.slots = append(c.slots, s)
			w.schedulePoll(s, w.start)
		}
	}
	w.at(w.start.Add(ttlEvery), w.expire)
	lastSend := time.Duration(0)
	for _, o := range w.ops {
		for _, s := range o.sends {
			lastSend = max(lastSend, s.at)
		}
	}
	// Faults, then the world settles without them; an operator redrives what SQS parked
	// in the dead-letter queue, and the world settles again, sends still to come
	// included; the operator redrives what SQS parked again, as long as it parks some, up
	// to redriveRounds times; the HTTP clients read their requests' final status.
	w.run(w.start.Add(w.sc.faultEnd), nil)
	w.settle(time.Hour, false)
	w.redriveParked()
	w.run(w.start.Add(lastSend), nil)
	w.settle(time.Hour, true)
	w.redriveWhileParked()
	w.finalStatus()
	if w.sc.cfg.lateRedrive {
		// The final status is judged by the world the clients read it in: the late
		// redrive may execute a request again, by contract, after its records' TTL.
		if w.ingress != nil {
			w.checkStatus(w.deadLetters(false))
			w.ingress.statusChecked = true
		}
		w.lateRedrive()
	}
	w.check()
	w.stop()
	rep.Violations = w.obs.violations
	st := &w.obs.stats
	st.Ops, st.Invocations, st.Killed, st.Acks, st.Receives = len(w.ops), w.invSeq, w.obs.killed, w.obs.acks, w.obs.receives
	st.Calls, st.VirtualTime = w.callSeq, time.Since(w.start)
	for _, ids := range w.obs.sent {
		st.Sends += len(ids)
	}
	for _, m := range w.sqs.Messages(w.dlq) {
		if !m.MovedBySQS {
			st.DeadLettered++
		}
	}
	p := w.sc.stats
	st.TwoKeys, st.TwoDoors, st.FreshTwins, st.LongKeys, st.Lookalikes = p.twoKeys, p.twoDoors, p.freshTwins, p.longKeys, p.lookalikes
	st.OtherCallers, st.Forged = p.otherCallers, p.forged
	st.GatewayCalls = len(w.obs.gateway)
	rep.Stats = *st
	rep.Trace = w.trace.String()
	return rep
}

// ttlEvery is how often the simulated TTL process looks for expired records.
const ttlEvery = 7 * time.Minute

// expire is DynamoDB's TTL: an expired record is deleted at some time after its expiry
// (within days on AWS), here at a random later look.
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/howitworks-ttl.html
func (w *world) expire() {
	w.at(time.Now().Add(ttlEvery), w.expire)
	now := time.Now().Unix()
	for _, c := range w.sc.consumers {
		var expired []string
		for rk, r := range c.recs {
			if r.exp > 0 && r.exp < now {
				expired = append(expired, rk)
			}
		}
		sort.Strings(expired) // in the table's key order, as a scan finds them
		for _, rk := range expired {
			if w.p(0.5) {
				w.checkRetention(c, rk)
				key := c.store.Key(rk)
				_, _ = w.db.Delete(c.layout.Table, key)
				w.tracef("TTL deletes %s", keyDesc(c.layout.Table, key))
			}
		}
	}
}

// settle runs the world until nothing is left to do (no message in the input queue, no
// invocation running, no record in progress or with outbound messages pending, and, with
// sends, no send still to come), or reports what is stuck after limit.
func (w *world) settle(limit time.Duration, sends bool) {
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		if w.pendingWork(sends) == "" {
			return
		}
		w.run(time.Now().Add(30*time.Second), nil)
	}
	if p := w.pendingWork(sends); p != "" {
		w.obs.violation("stuck", "not settled %s after the faults stopped: %s", limit, p)
	}
}

// redriveRounds bounds the operator's redrives once the sends are over. Without faults
// a message can still need more receives than maxReceiveCount gives it: each receive it
// spends skipped (its batch ran out of time, an earlier message of its FIFO group
// failed), killed at the function's timeout by a slow outside call (the gateway's
// latency has a tail of seconds), or answered in progress while the killed holder's
// lease runs out. SQS then parks it again, and an operator redrives it again; a message
// still parked after that many rounds is stuck (found at seed 374420 of the long run,
// with maxReceiveCount 4, on the second round).
const redriveRounds = 5

// redriveWhileParked is the operator redriving what SQS parks, as long as it parks some,
// up to redriveRounds times, the world settling after each.
func (w *world) redriveWhileParked() {
	for range redriveRounds {
		if !w.redriveParked() {
			return
		}
		w.settle(time.Hour, true)
	}
}

// redriveParked is an operator redriving what SQS moved to the dead-letter queue after
// maxReceiveCount receives; it reports whether there was any.
func (w *world) redriveParked() bool {
	for _, m := range w.sqs.Messages(w.dlq) {
		if m.MovedBySQS {
			if o := w.opOf(m); o != nil {
				w.obs.parked[o.effectID()] = true
			}
			w.obs.stats.Parked++
		}
	}
	any := false
	for _, c := range w.sc.consumers {
		n := w.sqs.Redrive(w.dlq, c.input, func(m simsqs.Message) bool { return m.MovedBySQS && m.From == c.input })
		if n > 0 {
			w.tracef("operator redrives %d messages parked by SQS to %s", n, c.input)
			w.wakePollers(c)
			any = true
		}
	}
	return any
}

// pendingWork says what is left to do, "" when nothing.
func (w *world) pendingWork(sends bool) string {
	var parts []string
	for _, c := range w.sc.consumers {
		if n := len(w.sqs.Messages(c.input)); n > 0 {
			parts = append(parts, fmt.Sprintf("%d input messages", n))
		}
		for _, s := range c.slots {
			if s.busy {
				parts = append(parts, "an invocation running")
				break
			}
		}
		for _, rk := range slices.Sorted(maps.Keys(c.recs)) {
			if r := c.recs[rk]; r.inflight {
				parts = append(parts, "a record in the in-flight index")
				break
			} else if r.outbox {
				parts = append(parts, "a record with outbound messages pending")
				break
			}
		}
	}
	if sends && w.sendsLeft > 0 {
		parts = append(parts, fmt.Sprintf("%d sends to come", w.sendsLeft))
	}
	if w.ingress != nil && w.ingress.busy() {
		parts = append(parts, "an HTTP client waiting")
	}
	return strings.Join(parts, ", ")
}

// stop ends every goroutine of the run: live invocations are killed, and the world runs
// until each has returned.
func (w *world) stop() {
	w.stopped = true
	for len(w.live) > 0 {
		for _, inv := range sortedInvs(w.live) {
			w.kill(inv, "end of the simulation")
		}
		synctest.Wait()
		w.collect()
		// A request a killed invocation's goroutine made just before its kill, collected
		// only now: no event will answer it any more.
		for c := range w.inflight {
			if c.inv.isDead() {
				c.answer(reply{err: errKilled})
			}
		}
	}
}

func (w *world) setup() error {
	w.db = simdb.New()
	w.db.OnWrite = w.onWrite
	ctx := context.Background()
	// The records' tables (a table of their own, or the business table), each with the
	// in-flight index, then the business table if no layout made it.
	made := map[string]bool{}
	for _, c := range w.sc.consumers {
		c.names, c.recs = namesOf(c.layout, c.scope), map[string]recState{}
		store, err := persistence.NewDynamoStoreLayout(w.db, c.layout)
		if err != nil {
			return err
		}
		c.store = store
		if made[c.layout.Table] {
			continue
		}
		made[c.layout.Table] = true
		if err := persistence.CreateTableFor(ctx, w.db, c.layout); err != nil {
			return err
		}
	}
	if !made[bizTable] {
		if err := w.createTable(ctx, bizTable); err != nil {
			return err
		}
	}
	for _, a := range w.sc.accounts {
		item := map[string]types.AttributeValue{"pk": avS("acct#" + a.name), "balance": avN(0), "applied": avN(0)}
		if a.closed {
			item["closed"] = &types.AttributeValueMemberBOOL{Value: true}
		}
		if a.cap > 0 {
			item["cap"] = avN(a.cap)
		}
		if _, err := w.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(bizTable), Item: item}); err != nil {
			return err
		}
	}
	w.sqs = simsqs.New(time.Now)
	w.sqs.OnAccept = w.onAccept
	sfx := ""
	if w.sc.fifo {
		sfx = ".fifo"
	}
	w.dlq, w.outFIFO, w.outStd = "dlq"+sfx, "out.fifo", "out-std"
	w.dlqURL = w.sqs.CreateQueue(simsqs.QueueConfig{Name: w.dlq, Visibility: time.Minute})
	for _, c := range w.sc.consumers {
		c.input = "input" + sfx
		if c.name != "a" {
			c.input = "input-" + c.name + sfx
		}
		c.inputURL = w.sqs.CreateQueue(simsqs.QueueConfig{Name: c.input, ContentDedup: w.sc.contentDedup, Visibility: c.visibility,
			MaxReceive: w.sc.maxReceive, DLQ: w.dlq})
	}
	w.outFIFOURL = w.sqs.CreateQueue(simsqs.QueueConfig{Name: w.outFIFO, MaxBytes: w.sc.outMaxBytes, Visibility: time.Minute, WholeBatchFails: w.sc.wholeBatchFails})
	w.outStdURL = w.sqs.CreateQueue(simsqs.QueueConfig{Name: w.outStd, Visibility: time.Minute, WholeBatchFails: w.sc.wholeBatchFails})
	if w.sc.cfg.ingress {
		if err := w.createTable(ctx, ingressTable); err != nil {
			return err
		}
		if err := w.newIngress(); err != nil {
			return err
		}
	}
	w.keys = map[string][2]string{}
	for _, t := range []string{idemTable, bizTable, ingressTable} {
		if out, err := w.db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(t)}); err == nil {
			var ks [2]string
			for _, k := range out.Table.KeySchema {
				if k.KeyType == types.KeyTypeHash {
					ks[0] = aws.ToString(k.AttributeName)
				} else {
					ks[1] = aws.ToString(k.AttributeName)
				}
			}
			w.keys[t] = ks
		}
	}
	return nil
}

// createTable creates a table with partition key pk.
func (w *world) createTable(ctx context.Context, name string) error {
	_, err := w.db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	})
	return err
}

func (sc *scenario) String() string {
	q := "standard"
	if sc.fifo {
		q = "fifo"
		if sc.contentDedup {
			q = "fifo+content-dedup"
		}
	}
	cons := ""
	if len(sc.consumers) > 1 {
		cons = " consumers=" + sc.consumers[0].String() + "," + sc.consumers[1].String()
	}
	return fmt.Sprintf("config=%s%s drift=%t steps=%t mode=%s input=%s keyfield=%q keysource=%s slots=%d concurrency=%d batch=%d window=%s timeout=%s visibility=%s(told=%t) grace=%s cache=%d maxReceive=%d reaper=%s shards=%d outMax=%d wholeBatchFails=%t ttl=%s faults=%s until %s ops=%d",
		sc.cfg, cons, sc.cfg.drift, sc.cfg.steps, sc.mode, q, sc.keyField, sc.keySource, sc.slots, sc.concurrency, sc.batchSize, sc.window, sc.timeout, sc.visibility, sc.checkVisibility, sc.grace,
		sc.cacheSize, sc.maxReceive, sc.reaperEvery, sc.shards, sc.outMaxBytes, sc.wholeBatchFails, sc.ttl, sc.faults.name(), sc.faultEnd, len(sc.ops))
}

func (f faultRates) name() string {
	switch {
	case f.throttle >= 0.1:
		return "storm"
	case f.throttle >= 0.05:
		return "rough"
	}
	return "calm"
}

// tracer keeps a run's events when asked to. The functions' log lines come from their
// goroutines, in whatever order they run: they wait in pending, and the scheduler adds
// them to the trace, sorted, at its next step, so a replay prints the same trace.
type tracer struct {
	on      bool
	mu      sync.Mutex
	b       strings.Builder
	pending []string
}

func newTracer(on bool) *tracer { return &tracer{on: on} }

func (t *tracer) String() string {
	t.flush()
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}

// logs is where the functions' JSON log lines go: into the trace, or nowhere.
func (t *tracer) logs() io.Writer {
	if !t.on {
		return io.Discard
	}
	return t
}

// Write takes one log line of a function.
func (t *tracer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending = append(t.pending, string(p))
	return len(p), nil
}

// flush adds the pending log lines to the trace, in a fixed order.
func (t *tracer) flush() {
	if !t.on {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	slices.Sort(t.pending)
	for _, l := range t.pending {
		t.b.WriteString(l)
	}
	t.pending = t.pending[:0]
}

func (w *world) tracef(format string, args ...any) {
	if !w.trace.on {
		return
	}
	w.trace.flush()
	w.trace.mu.Lock()
	defer w.trace.mu.Unlock()
	fmt.Fprintf(&w.trace.b, "%10s  %s\n", time.Since(w.start).Round(time.Millisecond), fmt.Sprintf(format, args...))
}
