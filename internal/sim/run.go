package sim

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/sim/simsqs"
	"github.com/idemgo/sqs-lambda-consumer/internal/simdb"
)

// Report is what one schedule found.
type Report struct {
	Seed       uint64
	Scenario   string
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
	sc := newScenario(rng)
	// Drawn apart, so that the other scenarios of a seed are what they were before fold
	// scenarios existed (the seeds of internal/sim/holes keep their schedules).
	sc.fold = rand.New(rand.NewPCG(seed, 0xf01d)).IntN(3) == 0
	w := &world{
		seed: seed, rng: rng, sc: sc,
		inflight: map[*call]bool{}, byKey: map[string][]*op{}, live: map[*invocation]bool{},
		trace: newTracer(trace),
	}
	w.obs = observations{
		done: map[*invocation]bool{}, sent: map[*op][]string{}, credits: map[string]int{},
		creditSeq: map[string]int64{}, creditGroup: map[string]string{}, creditAt: map[string]time.Time{}, creditMsg: map[string]string{}, reexecuted: map[string]int{}, parked: map[string]bool{}, msgOp: map[string]*op{},
	}
	w.start = time.Now()
	w.ops = w.sc.ops
	rep := &Report{Seed: seed, Scenario: w.sc.String()}
	if err := w.setup(); err != nil {
		rep.Violations = append(rep.Violations, Violation{"setup", err.Error()})
		return rep
	}
	w.tracef("scenario: %s", rep.Scenario)
	for _, o := range w.ops {
		for _, s := range o.sends {
			w.sendsLeft++
			w.at(w.start.Add(s.at), func() { w.sendsLeft--; w.producerSend(o, s) })
		}
	}
	rh, err := w.newReaper()
	if err != nil {
		rep.Violations = append(rep.Violations, Violation{"setup", err.Error()})
		return rep
	}
	w.at(w.start.Add(w.sc.reaperEvery), func() { w.reap(rh) })
	w.at(w.start.Add(ttlEvery), w.expire)
	for i := range w.sc.slots {
		s := &slot{id: i}
		w.slots = append(w.slots, s)
		w.schedulePoll(s, w.start)
	}
	lastSend := time.Duration(0)
	for _, o := range w.ops {
		for _, s := range o.sends {
			lastSend = max(lastSend, s.at)
		}
	}
	// Faults, then the world settles without them; an operator redrives what SQS parked
	// in the dead-letter queue, and the world settles again, sends still to come
	// included.
	w.run(w.start.Add(w.sc.faultEnd), nil)
	w.settle(time.Hour, false)
	w.redriveParked()
	w.run(w.start.Add(lastSend), nil)
	w.settle(time.Hour, true)
	if w.redriveParked() {
		w.settle(time.Hour, true)
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
	table := w.sc.layout().Table
	for _, it := range w.records() {
		if e := numAttr(it, "expires_at"); e > 0 && e < now && w.p(0.5) {
			_, _ = w.db.Delete(table, w.db.Key(table, it))
			w.tracef("TTL deletes %s", it["pk"].(*types.AttributeValueMemberS).Value)
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
	n := w.sqs.Redrive(w.dlq, w.input, func(m simsqs.Message) bool { return m.MovedBySQS })
	if n > 0 {
		w.tracef("operator redrives %d messages parked by SQS", n)
		w.wakePollers()
	}
	return n > 0
}

// pendingWork says what is left to do, "" when nothing.
func (w *world) pendingWork(sends bool) string {
	var parts []string
	if n := len(w.sqs.Messages(w.input)); n > 0 {
		parts = append(parts, fmt.Sprintf("%d input messages", n))
	}
	for _, s := range w.slots {
		if s.busy {
			parts = append(parts, "an invocation running")
			break
		}
	}
	for _, it := range w.records() {
		if _, ok := it["inflight"]; ok {
			parts = append(parts, "a record in the in-flight index")
			break
		}
		if _, ok := it["outbox"]; ok {
			parts = append(parts, "a record with outbound messages pending")
			break
		}
	}
	if sends && w.sendsLeft > 0 {
		parts = append(parts, fmt.Sprintf("%d sends to come", w.sendsLeft))
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
	}
}

func (w *world) setup() error {
	w.db = simdb.New()
	w.db.OnWrite = w.onWrite
	ctx := context.Background()
	// The records' table: idem's own, or in a fold scenario the business table, with
	// the in-flight index.
	if err := idem.CreateTableFor(ctx, w.db, w.sc.layout()); err != nil {
		return err
	}
	if !w.sc.fold {
		_, err := w.db.CreateTable(ctx, &dynamodb.CreateTableInput{
			TableName:            aws.String(bizTable),
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		})
		if err != nil {
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
	sfx := ""
	if w.sc.fifo {
		sfx = ".fifo"
	}
	w.input, w.dlq, w.outFIFO, w.outStd = "input"+sfx, "dlq"+sfx, "out.fifo", "out-std"
	w.dlqURL = w.sqs.CreateQueue(simsqs.QueueConfig{Name: w.dlq, Visibility: time.Minute})
	w.inputURL = w.sqs.CreateQueue(simsqs.QueueConfig{Name: w.input, ContentDedup: w.sc.contentDedup, Visibility: w.sc.visibility,
		MaxReceive: w.sc.maxReceive, DLQ: w.dlq})
	w.outFIFOURL = w.sqs.CreateQueue(simsqs.QueueConfig{Name: w.outFIFO, MaxBytes: w.sc.outMaxBytes, Visibility: time.Minute, WholeBatchFails: w.sc.wholeBatchFails})
	w.outStdURL = w.sqs.CreateQueue(simsqs.QueueConfig{Name: w.outStd, Visibility: time.Minute, WholeBatchFails: w.sc.wholeBatchFails})
	return nil
}

func (sc *scenario) String() string {
	q := "standard"
	if sc.fifo {
		q = "fifo"
		if sc.contentDedup {
			q = "fifo+content-dedup"
		}
	}
	return fmt.Sprintf("fold=%t mode=%s input=%s keyfield=%q slots=%d concurrency=%d batch=%d window=%s timeout=%s visibility=%s(told=%t) grace=%s cache=%d maxReceive=%d reaper=%s shards=%d outMax=%d wholeBatchFails=%t ttl=%s faults=%s until %s ops=%d",
		sc.fold, sc.mode, q, sc.keyField, sc.slots, sc.concurrency, sc.batchSize, sc.window, sc.timeout, sc.visibility, sc.checkVisibility, sc.grace,
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
