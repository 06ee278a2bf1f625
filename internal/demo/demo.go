// Package demo is `make demo`: a realistic stream of the wired example's messages (the
// ledger's payments by default) with duplicates of every kind, bad input and a consumer
// killed mid-batch, consumed by several local consumers and the reaper, then checked
// from outside: the example's tables must hold what the distinct messages sent leave
// (example.Checker's Expect against its Read), with one outbound message each
// (example.Confirmer). The traffic is the example's (example.Traffic): an example
// without it has no demo, and one without a Checker or a Confirmer has those checks
// skipped, the summary says why.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dynamotypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/emf"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/runner"
	"github.com/idemgo/sqs-lambda-consumer/internal/syncw"
)

// SQSAPI is what the demo uses of SQS: sending, the runner's calls, and draining.
type SQSAPI interface {
	Sender
	runner.SQSAPI
	consumerapp.SQSAPI
}

// DynamoDBAPI is what the demo uses of DynamoDB: the consumer's calls, and the example's
// Prepare and Read.
type DynamoDBAPI interface {
	persistence.DynamoDBAPI
	example.DynamoDB
	// DeleteItem plays DynamoDB's TTL deletion of idempotency records in the storm.
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// Functions are the consumers and the reaper of Options.Functions.
type Functions struct {
	Consumer func(instance int) runner.Handler
	Reap     func(ctx context.Context) (reaper.SweepResult, error)
	Close    func()
}

// Crasher starts a consumer in another process, waits until it holds leases in the
// middle of a batch, and kills it with SIGKILL. It returns how many it killed.
type Crasher func(ctx context.Context) (int, error)

// Options configures Run. Env holds the variables `idemctl up` prints.
type Options struct {
	Env map[string]string
	// Outbound are the URLs of the example's outbound queues, FIFO or standard, each
	// counted (idemctl demo gives the stack's queues but the input queue and its
	// dead-letter queue). The Confirmer's queue is counted whether listed or not.
	Outbound []string
	// Examples are the examples Env's EXAMPLE picks from (default: the build's,
	// functions/consumer/wiring).
	Examples []example.Example
	SQS      SQSAPI
	DynamoDB DynamoDBAPI
	Messages int // distinct valid messages (default 2000)
	Groups   int // FIFO groups (default 50): the ledger's accounts

	Consumers int // local consumer instances (default 4)
	Seed      uint64
	Crash     Crasher // nil: no consumer is killed
	// Chaos, when set, runs during the consumption and kills consumer processes at
	// random moments and at chosen phases (see Chaos).
	Chaos func(ctx context.Context, logs ChildLog) (ChaosResult, error)
	Out   io.Writer // progress and the summary
	Logs  io.Writer // the consumers' JSON logs (default: discarded)
	// Storm switches to the duplicate storm: every message is delivered 1 to
	// MaxDeliveries times (default 5), each extra delivery of one kind (see StormKinds),
	// the last two kinds after the rest is consumed.
	Storm         bool
	MaxDeliveries int
	// Functions, when set, runs the consumers and the reaper as Lambda execution
	// environments (their bootstraps in child processes, see internal/lambdaenv) instead
	// of calling their handlers in this process; output takes the functions' logs and
	// metrics. ConsumerDynamoDB does not apply to them.
	Functions func(consumers int, output io.Writer) (Functions, error)
	// ConsumerDynamoDB, when set, is the client the local consumers use (for instance
	// through a fault-injecting proxy); the reaper and the final check use DynamoDB.
	ConsumerDynamoDB persistence.DynamoDBAPI
	// RedriveParked sends the messages SQS parked in the DLQ (maxReceiveCount reached
	// while consumers kept dying) back to the input queue and consumes them, as an
	// operator's `idemctl redrive` would, before the check.
	RedriveParked bool
	// HTTP, when set, sends HTTP.Requests of the Messages valid messages through the
	// ingress over real HTTP instead of straight to the queue (the HTTP phase; not with
	// Storm).
	HTTP *HTTPOptions
}

// Kinds of extra deliveries in the duplicate storm.
const (
	KindSameDedupID    = "same dedup id"            // SQS drops it within its 5-minute window
	KindNewDedupID     = "new dedup id"             // reaches a consumer; the record answers
	KindConcurrent     = "concurrent"               // another FIFO group: two consumers at once
	KindAfterCompleted = "after completion"         // sent once everything before is consumed
	KindAfterTTL       = "after TTL, before delete" // consumed with the clock past the record's TTL
	KindAfterDelete    = "after deletion"           // consumed once the record was deleted, as TTL does
)

// StormKinds lists the kinds of extra deliveries, in the order they are sent.
var StormKinds = []string{KindSameDedupID, KindNewDedupID, KindConcurrent, KindAfterCompleted, KindAfterTTL, KindAfterDelete}

// Timing of the local run: short, so crashed leases are reaped and redelivered within
// seconds rather than the deployed minutes. The crashed consumer's messages stay
// invisible for CrashVisibility, longer than its lease plus the reaper's grace, so the
// reaper fails the stale locks before the messages come back.
const (
	FunctionTimeout = 10 * time.Second
	LeaseGrace      = 2 * time.Second
	DeadlineMargin  = time.Second
	ReapEvery       = 2 * time.Second
	Visibility      = 10 * time.Second
	CrashVisibility = 30 * time.Second
)

// Summary is what the demo prints.
type Summary struct {
	Sent               int            // messages SQS accepted from the producer
	DedupRepeats       int            // ... with a dedup id SQS had accepted before in this run (counted at the producer)
	Delivered          int            // distinct messages consumers received
	SuppressedBySQS    int            // computed: Sent - Delivered, accepted but never received (FIFO dedup)
	SuppressedByDynamo int            // delivered, answered from the idempotency record
	InProgress         int            // deliveries refused while another consumer held the key
	Example            string         // the example's name
	Applied            int            // business effects committed, counted in the example's tables
	AppliedByMetrics   int            // handler runs the local consumers reported as applied
	AppliedByChildren  int            // ... the consumer processes reported as applied (their "applied" log lines)
	ChildConsumers     bool           // consumer processes ran beside the local consumers (chaos)
	Distinct           int            // valid distinct messages sent
	DeadLettered       map[string]int // DLQ messages the consumer moved, by reason
	Redriven           int            // DLQ messages SQS moved after maxReceiveCount receives
	RedrivenApplied    int            // ... whose message was applied all the same (a copy)
	Parked             []string       // messages only in the DLQ, not applied: redrive them (business ids)
	ParkedKeys         []string       // ... their idempotency keys
	RedriveSent        int            // with RedriveParked: parked messages sent back to the input queue
	RedriveApplied     int            // ... and applied then
	BadSent            int            // bad messages sent (each must end in the DLQ)
	BadMissing         []string       // bad messages whose reason no dead letter gave (none expected)
	Killed             int            // consumers killed with SIGKILL
	KilledByPhase      map[string]int // ... by where they died (see Phases, RandomKill)
	Timeouts           int            // invocations of the local consumers past their timeout (whole batch failed)
	Reaped             int            // stale locks failed by the reaper
	ReapLate           time.Duration  // the in-process reaper's latest reap past lease end + grace (period ReapEvery)
	ReapLateChildren   time.Duration  // the same for the consumer processes' reapers
	// How the in-process reaper's sweeps went: the longest gap between the starts of two
	// sweeps, and the longest sweep. A lock becomes reapable at lease end + grace; the
	// first sweep to start after that finds it, at most SweepGap later, and fails it
	// before that sweep ends, at most SweepTook after its start: so ReapLate stays under
	// SweepGap + SweepTook. (The ticker starts a sweep every ReapEvery, or at the first
	// tick after a sweep that ran longer.)
	SweepGap, SweepTook time.Duration
	SweepTookChildren   time.Duration  // the consumer processes' longest sweep
	Guarded             int            // runs stopped by the example's guard write (a redelivery past the TTL)
	LeaseLost           int            // commits refused because the lease had moved on
	Deliveries          map[string]int // storm: extra deliveries sent, by kind
	GuardedExpected     int            // storm: the most guarded runs there may be (after-TTL deliveries)
	LastProgress        time.Time      // when a local consumer last applied or answered a record
	Outbound            int            // distinct messages with an outbound message (the ledger's receipts)
	OutboundMessages    int            // outbound messages (one per applied message expected)
	OutboundNotApplied  int            // outbound messages for messages that were not applied (0 expected)
	OutboundSkipped     string         // why outbound messages were not counted ("": they were)
	OutboundQueues      []QueueCount   // every outbound queue's messages
	StateOK             bool           // the example's tables hold what Expect says
	StateDiffs          []string
	StateSkipped        string       // why the tables were not checked ("": they were)
	HTTP                *HTTPSummary // the HTTP phase (nil: none)
	// Gateways are what the stand-ins of the example's outside services saw
	// (example.Caller), one per service.
	Gateways []GatewaySummary
	OK       bool
	Elapsed  time.Duration
}

// Run plays the whole demo against the resources in o.Env.
func Run(ctx context.Context, o Options) (Summary, error) {
	start := time.Now()
	if o.Messages <= 0 {
		o.Messages = 2000
	}
	if o.Groups <= 0 {
		o.Groups = 50
	}
	if o.Consumers <= 0 {
		o.Consumers = 4
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	o.Out = syncw.New(o.Out) // the runner reports progress on it from its own goroutine
	producer := &producerCount{SQSAPI: o.SQS, url: o.Env["QUEUE_URL"], seen: map[string]bool{}}
	o.SQS = producer
	if o.Logs == nil {
		o.Logs = io.Discard
	}
	lookup := func(k string) (string, bool) { v, ok := o.Env[k]; return v, ok }
	if o.Examples == nil {
		o.Examples = wiring.Examples
	}
	// The traffic first: without it there is no demo, whatever the environment.
	ex, err := example.FromEnv(o.Examples, lookup)
	if err != nil {
		return Summary{}, fmt.Errorf("demo: %w", err)
	}
	gen, err := example.TrafficOf(ex)
	if err != nil {
		return Summary{}, fmt.Errorf("demo: %w", err)
	}
	cfg, err := consumerapp.FromEnvOf(o.Examples, lookup)
	if err != nil {
		return Summary{}, err
	}
	queueURL := o.Env["QUEUE_URL"]
	if queueURL == "" {
		return Summary{}, errors.New("demo: QUEUE_URL is not set")
	}
	for _, name := range example.ServicesOf(ex) {
		if o.Env[name] == "" {
			return Summary{}, fmt.Errorf("demo: %s (example %s's outside service) is not set: start a stand-in (internal/gateway) and give its URL", name, ex.Name())
		}
	}
	cfg.LeaseGrace, cfg.DeadlineMargin = LeaseGrace, DeadlineMargin
	s := Summary{Example: ex.Name()}
	checker, err := example.CheckerOf(ex)
	if err != nil {
		s.StateSkipped = err.Error()
	}
	rr := &receiptReader{api: o.SQS, seen: map[string]map[string]bool{}}
	if conf, err := example.ConfirmerOf(ex); err != nil {
		s.OutboundSkipped = err.Error()
	} else if name := conf.OutboundQueue(); name != "" {
		if rr.url = o.Env[name]; rr.url == "" {
			return Summary{}, fmt.Errorf("demo: %s (example %s's outbound queue) is not set", name, ex.Name())
		}
		rr.confirms = conf.Confirms
	}
	readers := []*receiptReader{rr} // rr first: the Confirmer's queue, when there is one
	for _, url := range o.Outbound {
		if url != rr.url {
			readers = append(readers, &receiptReader{api: o.SQS, url: url, seen: map[string]map[string]bool{}})
		}
	}

	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	run := fmt.Sprintf("%d", time.Now().Unix())
	// The HTTP phase carries the last HTTP.Requests valid messages; its clients that
	// reuse a key with another body send decoys: valid messages that must never be
	// applied.
	nHTTP, nDecoys := 0, 0
	if o.HTTP != nil && o.HTTP.Requests > 0 && !o.Storm {
		nHTTP = min(o.HTTP.Requests, o.Messages/2)
		nDecoys = max(1, nHTTP/len(ClientKinds))
	}
	traffic := gen.Traffic(rng, run, o.Messages+nDecoys, o.Groups) // Prepare takes them all
	valid, decoys := traffic[:o.Messages], traffic[o.Messages:]
	viaQueue, viaHTTP := valid[:len(valid)-nHTTP], valid[len(valid)-nHTTP:]
	// The key the consumer sees: a producer's own, or, through the ingress, the key its
	// caller's requests are kept and sent under (HTTPOptions.ConsumerKey).
	consumerKeys := map[string]string{} // business id -> the consumer's key
	if o.HTTP != nil && o.HTTP.ConsumerKey != nil {
		for _, m := range viaHTTP {
			consumerKeys[m.ID] = o.HTTP.ConsumerKey(m.Key)
		}
	}
	asConsumed := func(ms []example.Message) []example.Message {
		out := slices.Clone(ms)
		for i, m := range out {
			if k, ok := consumerKeys[m.ID]; ok {
				out[i].Key = k
			}
		}
		return out
	}
	if err := example.Prepare(ctx, ex, o.DynamoDB, lookup, traffic); err != nil {
		return s, fmt.Errorf("demo: prepare example %s: %w", ex.Name(), err)
	}
	var bads []example.Bad
	var first, second, extra, bad, afterDone, afterTTL, afterDelete []Message
	if o.Storm {
		if o.MaxDeliveries <= 0 {
			o.MaxDeliveries = 5
		}
		st := stormStream(rng, viaQueue, o.MaxDeliveries)
		bads = gen.Bad(run, viaQueue)
		bad = badMessages(bads)
		first, second, afterDone, afterTTL, afterDelete, s.Deliveries = st.first, append(st.second, bad...), st.afterDone, st.afterTTL, st.afterDelete, st.kinds
		rng.Shuffle(len(second), func(i, j int) { second[i], second[j] = second[j], second[i] })
		if len(first) > stormHead { // the rest waits for the consumers (see sendPaced)
			first, second = first[:stormHead], append(first[stormHead:], second...)
		}
		s.GuardedExpected = len(afterTTL) + len(afterDelete)
	} else {
		bads = gen.Bad(run, viaQueue)
		first, second, extra, bad = stream(rng, viaQueue, badMessages(bads))
	}
	s.Distinct, s.BadSent = len(valid), len(bad)
	consumerDDB := o.ConsumerDynamoDB
	if consumerDDB == nil {
		consumerDDB = o.DynamoDB
	}

	fmt.Fprintf(o.Out, "demo: example %s: %d messages over %d groups; %d consumers; %d bad messages\n", ex.Name(), len(valid), o.Groups, o.Consumers, len(bad))
	n, err := send(ctx, o.SQS, queueURL, first, 4)
	s.Sent += n
	if err != nil {
		return s, err
	}
	fmt.Fprintf(o.Out, "demo: sent %d messages (first half of the traffic)\n", n)

	if o.Crash != nil {
		fmt.Fprintln(o.Out, "demo: starting a consumer in a child process and killing it (SIGKILL) mid-batch")
		if s.Killed, err = o.Crash(ctx); err != nil {
			return s, fmt.Errorf("demo: crash a consumer: %w", err)
		}
	}

	counts := &emfCounts{}
	var fns Functions
	if o.Functions != nil {
		if fns, err = o.Functions(o.Consumers, io.MultiWriter(o.Logs, counts)); err != nil {
			return s, err
		}
		defer fns.Close()
	}
	rctx, stopReceipts := context.WithCancel(ctx)
	defer stopReceipts()
	for _, r := range readers {
		go r.every(rctx, 5*time.Second)
	}
	store, err := persistence.NewDynamoStore(o.DynamoDB, cfg.IdempotencyTable)
	if err != nil {
		return s, err
	}
	// The reaper also sends the outbound messages a killed consumer committed but never sent.
	sweeper := &reaper.Reaper{Store: store, Shards: cfg.Shards, Grace: LeaseGrace, Sender: o.SQS}
	var seenMu sync.Mutex
	seen := map[string]bool{}
	var reaped int64
	var lastSweep time.Time
	sweep := func(ctx context.Context) (reaper.SweepResult, error) {
		sweepOnce := sweeper.Sweep
		if fns.Reap != nil {
			sweepOnce = fns.Reap
		}
		start := time.Now()
		res, err := sweepOnce(ctx)
		took := time.Since(start)
		seenMu.Lock()
		s.ReapLate = max(s.ReapLate, res.MaxLate)
		if !lastSweep.IsZero() {
			s.SweepGap = max(s.SweepGap, start.Sub(lastSweep))
		}
		s.SweepTook, lastSweep = max(s.SweepTook, took), start
		reaped += int64(res.Reaped)
		seenMu.Unlock()
		return res, err
	}
	// The in-process reaper runs all along, as the scheduled rule does, not only while a
	// local run consumes: the chaos's killed consumers leave locks while the local ones
	// wait for it, idle.
	reaperCtx, stopReaper := context.WithCancel(ctx)
	reaperDone := make(chan struct{})
	go func() {
		defer close(reaperDone)
		runner.Periodically(reaperCtx, ReapEvery, FunctionTimeout, func(sctx context.Context) {
			if _, err := sweep(sctx); err != nil && reaperCtx.Err() == nil {
				fmt.Fprintf(o.Out, "demo: reaper sweep failed: %v\n", err)
			}
		})
	}()
	stopReaperOnce := sync.OnceFunc(func() { stopReaper(); <-reaperDone })
	defer stopReaperOnce()
	var clock func() time.Time // the consumers' clock; nil: time.Now
	consume := func() error {
		stats, err := runner.Run(ctx, runner.Config{
			SQS: o.SQS, QueueURL: queueURL, Consumers: o.Consumers, BatchSize: 10,
			VisibilityTimeout: Visibility, FunctionTimeout: FunctionTimeout, WaitTime: time.Second,
			RetryAfter: time.Second, UntilIdle: 3 * time.Second, Progress: o.Out, ProgressEvery: 5 * time.Second,
			NewHandler: func(i int) (runner.Handler, error) {
				if fns.Consumer != nil {
					return fns.Consumer(i), nil
				}
				h, err := consumerapp.New(cfg, consumerapp.Deps{
					DynamoDB: consumerDDB, SQS: o.SQS, Logs: o.Logs, Metrics: counts, Owner: fmt.Sprintf("demo-consumer-%d", i),
					Clock: clock,
				})
				return runner.Handler(h), err
			},
			OnReceive: func(id string) { seenMu.Lock(); seen[id] = true; seenMu.Unlock() },
		})
		seenMu.Lock()
		s.Timeouts += int(stats.Timeouts)
		seenMu.Unlock()
		return err
	}
	type chaosResult struct {
		res ChaosResult
		err error
	}
	chaos := make(chan chaosResult, 1)
	if o.Chaos != nil {
		fmt.Fprintln(o.Out, "demo: chaos: consumer processes run beside the local ones and are killed (SIGKILL) at random moments and chosen phases")
		s.ChildConsumers = true
		logs := ChildLog{
			OnMessage: func(id string) { seenMu.Lock(); seen[id] = true; seenMu.Unlock() },
			OnApplied: func() { seenMu.Lock(); s.AppliedByChildren++; seenMu.Unlock() },
			OnReaped: func(n int, late, took time.Duration) {
				seenMu.Lock()
				reaped += int64(n)
				s.ReapLateChildren = max(s.ReapLateChildren, late)
				s.SweepTookChildren = max(s.SweepTookChildren, took)
				seenMu.Unlock()
			},
		}
		go func() { r, err := o.Chaos(ctx, logs); chaos <- chaosResult{r, err} }()
	}
	var hp *httpPhase
	httpDone := make(chan struct{})
	if nHTTP > 0 {
		hp = newHTTPPhase(o.HTTP)
		fmt.Fprintf(o.Out, "demo: HTTP: %d of the messages through the ingress at %s, %d clients at a time (%s), %d decoys as other bodies\n",
			nHTTP, o.HTTP.URL, o.HTTP.Clients, strings.Join(ClientKinds, ", "), nDecoys)
		hrng := rand.New(rand.NewPCG(o.Seed, 0x4854545021))
		go func() { defer close(httpDone); hp.run(ctx, hrng, viaHTTP, decoys) }()
	} else {
		close(httpDone)
	}
	var runErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runErr = consume()
		if o.Chaos == nil || runErr != nil {
			return
		}
		// The queue may go idle while the chaos still kills; once it is done, drain what
		// its last victims left in flight.
		c := <-chaos
		s.Killed += c.res.Killed
		s.KilledByPhase = c.res.ByPhase
		if c.err != nil {
			runErr = c.err
			return
		}
		fmt.Fprintf(o.Out, "demo: chaos done (%d kills); draining what the killed consumers left\n", c.res.Killed)
		runErr = consume()
	}()
	if o.Storm {
		n, err = sendPaced(ctx, o.SQS, queueURL, second, stormDepth)
	} else {
		n, err = send(ctx, o.SQS, queueURL, second, 4)
	}
	s.Sent += n
	if err == nil && o.Storm {
		fmt.Fprintf(o.Out, "demo: sent %d messages (second half, duplicates with the same and new dedup ids, concurrent copies, bad input)\n", n)
	} else if err == nil {
		fmt.Fprintf(o.Out, "demo: sent %d messages (second half, in-window duplicates, concurrent redeliveries, bad input)\n", n)
		// After-window duplicates: same keys, new dedup ids, once the originals are done.
		time.Sleep(2 * time.Second)
		n, err = send(ctx, o.SQS, queueURL, extra, 4)
		s.Sent += n
		fmt.Fprintf(o.Out, "demo: sent %d late duplicates (new dedup id, same key and payload)\n", n)
	}
	wg.Wait()
	if err != nil {
		return s, err
	}
	if runErr != nil {
		return s, runErr
	}
	if o.Storm {
		forget := func(ctx context.Context, key string) error {
			pk, err := idem.RecordKey(cfg.Scope, key, false)
			if err != nil {
				return err
			}
			_, err = o.DynamoDB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
				TableName: aws.String(cfg.IdempotencyTable), Key: map[string]dynamotypes.AttributeValue{"pk": &dynamotypes.AttributeValueMemberS{Value: pk}},
			})
			return err
		}
		n, err := latePhases(ctx, o, queueURL, afterDone, afterTTL, afterDelete, cfg.TTL, &clock, forget, consume)
		s.Sent += n
		if err != nil {
			return s, err
		}
	}

	if hp != nil {
		<-httpDone
		completed, notDone := hp.statuses(ctx)
		if len(notDone) > 0 {
			// The consumers went idle while clients still retried: consume the rest.
			fmt.Fprintf(o.Out, "demo: HTTP: %d accepted requests not completed yet; consuming what is left\n", len(notDone))
			if err := consume(); err != nil {
				return s, err
			}
			completed, notDone = hp.statuses(ctx)
		}
		hp.s.Completed, hp.s.NotDone = completed, notDone
		if o.HTTP.Sent != nil {
			hp.s.IngressSent = o.HTTP.Sent()
		}
		s.HTTP = &hp.s
		s.Sent += hp.s.IngressSent
		fmt.Fprintf(o.Out, "demo: HTTP: %d requests accepted, %d completed\n", hp.s.Accepted, completed)
	}

	c := counts.snapshot()
	seenMu.Lock()
	s.Delivered = len(seen)
	seenMu.Unlock()
	s.SuppressedBySQS = s.Sent - s.Delivered
	s.DedupRepeats = producer.repeats()
	s.SuppressedByDynamo = c[emf.MetricDuplicate]
	s.InProgress = c[emf.MetricInProgress]
	s.Guarded = c[emf.MetricGuarded]
	s.LeaseLost = c[emf.MetricLeaseLost]
	s.LastProgress = counts.lastProgress()
	var redriven []string // bodies SQS moved itself
	var reasons []string  // every dead letter's full reason
	var lettered []string // the bodies of the consumer's dead letters
	if s.DeadLettered, redriven, reasons, lettered, err = dlqReasons(ctx, o.SQS, o.Env["DLQ_URL"]); err != nil {
		return s, err
	}
	// A message that consumers kept receiving without finishing (killed each time) is
	// moved to the DLQ by SQS's redrive policy after maxReceiveCount receives. Nothing is
	// lost: either its message was applied through another copy, or it is parked in the
	// DLQ for a redrive. The idempotency record tells which.
	// applied tells from the message's idempotency record whether it was committed.
	applied := func(p example.Message) bool {
		pk, err := idem.RecordKey(cfg.Scope, asConsumed([]example.Message{p})[0].Key, false)
		if err != nil {
			return false
		}
		rec, err := store.Get(ctx, pk, time.Now())
		return err == nil && rec.Status == persistence.StatusCompleted
	}
	parked := map[string]bool{}
	var parkedMsgs []example.Message
	s.Redriven = len(redriven)
	parkedBad, redriven := parkedBadMessages(bads, redriven, lettered)
	for _, body := range redriven {
		p, err := ex.Decode([]byte(body))
		if err != nil {
			continue
		}
		if applied(p) {
			s.RedrivenApplied++
		} else if !parked[p.ID] {
			parked[p.ID] = true
			s.Parked = append(s.Parked, p.ID)
			s.ParkedKeys = append(s.ParkedKeys, p.Key)
			parkedMsgs = append(parkedMsgs, p)
		}
	}
	if o.RedriveParked && len(parkedMsgs)+len(parkedBad) > 0 {
		// What an operator does with `idemctl redrive`: the parked messages go back to the
		// input queue (same body, key and group) and are consumed once more.
		msgs := make([]Message, 0, len(parkedMsgs)+len(parkedBad))
		for _, p := range parkedMsgs {
			msgs = append(msgs, message(p, p.Group, "redrive-"+p.ID))
		}
		allBad := badMessages(bads)
		for _, i := range parkedBad {
			m := allBad[i]
			m.DedupID = outbox.DeduplicationID("redrive-" + m.DedupID)
			msgs = append(msgs, m)
		}
		n, err := send(ctx, o.SQS, queueURL, msgs, 4)
		s.RedriveSent = n
		if err != nil {
			return s, err
		}
		fmt.Fprintf(o.Out, "demo: redrove %d parked messages to the input queue\n", n)
		if err := consume(); err != nil {
			return s, err
		}
		s.Parked, s.ParkedKeys, parked = nil, nil, map[string]bool{}
		for _, p := range parkedMsgs {
			if applied(p) {
				s.RedriveApplied++
				continue
			}
			s.Parked = append(s.Parked, p.ID)
			s.ParkedKeys = append(s.ParkedKeys, p.Key)
			parked[p.ID] = true
		}
		more, again, moreReasons, _, err := dlqReasons(ctx, o.SQS, o.Env["DLQ_URL"])
		if err != nil {
			return s, err
		}
		for r, n := range more {
			s.DeadLettered[r] += n
		}
		s.Redriven += len(again)
		reasons = append(reasons, moreReasons...)
	}
	s.BadMissing = missingReasons(bads, reasons)
	stopReaperOnce() // the last consumer is done
	seenMu.Lock()
	s.Reaped = int(reaped)
	seenMu.Unlock()
	stopReceipts()
	for _, r := range readers {
		if err := r.drain(ctx); err != nil {
			return s, err
		}
	}
	s.AppliedByMetrics = c[emf.MetricAcquired]
	var applicable []example.Message // every valid message not parked; never a decoy
	for _, p := range valid {
		if !parked[p.ID] {
			applicable = append(applicable, p)
		}
	}
	s.Outbound, s.OutboundMessages, s.OutboundNotApplied = rr.counts(applicable)
	for _, r := range readers {
		if r.url != "" {
			s.OutboundQueues = append(s.OutboundQueues, r.queueCount())
		}
	}
	dlq := 0
	for _, v := range s.DeadLettered {
		dlq += v
	}
	// A run stopped by the guard is a second execution of a message: expected after the
	// record's TTL or its deletion (the storm plays those), a bug anywhere else.
	s.OK = dlq == s.BadSent && len(s.BadMissing) == 0 &&
		(s.Killed == 0 || s.Reaped > 0 || cfg.Mode == idem.ModeSingleTransaction) && // no lease, nothing to reap
		s.Guarded <= s.GuardedExpected &&
		(s.HTTP == nil || s.HTTP.OK()) // every request accepted once and completed, every other body refused
	// Every message not parked is applied once: counted in the example's tables, which
	// hold what Expect says.
	if checker != nil {
		got, err := checker.Read(ctx, o.DynamoDB, lookup)
		if err != nil {
			return s, fmt.Errorf("demo: read example %s's tables: %w", ex.Name(), err)
		}
		s.Applied = got.Applied // counted from the example's tables themselves
		want, err := checker.Expect(traffic, applicable)
		if err != nil {
			return s, err
		}
		s.StateDiffs = CompareState(want, got.State)
		s.StateOK = len(s.StateDiffs) == 0
		s.OK = s.OK && s.StateOK && s.Applied == s.Distinct-len(s.Parked)
	}
	// An outside call made in a step: once per applied message, again only by a new
	// attempt after a crash between the call and its recording, never for a refused one.
	if services := example.ServicesOf(ex); len(services) > 0 {
		var parkedMsgs []example.Message
		for _, p := range valid {
			if parked[p.ID] {
				parkedMsgs = append(parkedMsgs, p)
			}
		}
		late := map[string]int{}
		for _, m := range append(slices.Clone(afterTTL), afterDelete...) {
			late[m.Key]++
		}
		for _, name := range services {
			g, err := gatewayCheck(ctx, name, o.Env[name], asConsumed(applicable), asConsumed(parkedMsgs), bads, late, recordAttempts(ctx, store, cfg.Scope))
			if err != nil {
				return s, err
			}
			s.Gateways = append(s.Gateways, g)
			s.OK = s.OK && g.OK()
		}
	}
	// Outbound messages go out after the commit: exactly one per applied message, none for
	// a message that was refused or not applied (an example that sends none expects 0).
	if s.OutboundSkipped == "" {
		wantOutbound := s.Distinct - len(s.Parked)
		if rr.url == "" {
			wantOutbound = 0
		}
		s.OK = s.OK && s.Outbound == wantOutbound && s.OutboundMessages == s.Outbound && s.OutboundNotApplied == 0
	}
	for _, q := range s.OutboundQueues {
		s.OK = s.OK && q.OK()
	}
	s.Elapsed = time.Since(start)
	return s, nil
}

// message is m as the producer sends it, in group with the deduplication id dedup.
func message(m example.Message, group, dedup string) Message {
	return Message{Body: m.Body, Key: m.Key, Group: group, DedupID: dedup}
}

// original is m as a correct producer sends it: in its group, with the deduplication id
// derived from its key.
func original(m example.Message) Message {
	return message(m, m.Group, outbox.DeduplicationID(m.Key))
}

// stream splits the traffic: the first half of the messages; then the second half
// mixed with duplicates inside the FIFO window (same dedup id: SQS drops them),
// concurrent redeliveries (same key, another group, so another consumer may hold it at
// the same moment) and bad input; and late duplicates (new dedup id, same key and
// payload: the idempotency record answers them).
func stream(rng *rand.Rand, ps []example.Message, bad []Message) (first, second, late, _ []Message) {
	half := len(ps) / 2
	for _, p := range ps[:half] {
		first = append(first, original(p))
	}
	for _, p := range ps[half:] {
		second = append(second, original(p))
		if rng.IntN(10) == 0 { // concurrent redelivery
			second = append(second, message(p, p.Group+"-replay", "replay-"+p.ID))
		}
	}
	for i := 0; i < len(ps)/10; i++ { // in-window duplicates of the first half
		second = append(second, original(ps[rng.IntN(max(half, 1))]))
	}
	for i := 0; i < len(ps)/13; i++ {
		p := ps[rng.IntN(len(ps))]
		late = append(late, message(p, p.Group, "late-"+p.ID))
	}
	second = append(second, bad...)
	rng.Shuffle(len(second), func(i, j int) { second[i], second[j] = second[j], second[i] })
	return first, second, late, bad
}

// badMessages are the example's bad input as sent: each must end in the DLQ with its
// reason. They go out with the second half, after their groups' first messages.
func badMessages(bads []example.Bad) []Message {
	out := make([]Message, len(bads))
	for i, b := range bads {
		out[i] = Message{Body: b.Body, Key: b.Key, Group: b.Group, DedupID: fmt.Sprintf("bad-%d-%s", i, outbox.DeduplicationID(b.ID))}
		if len(out[i].DedupID) > 128 {
			out[i].DedupID = outbox.DeduplicationID(out[i].DedupID)
		}
	}
	return out
}

// parkedBadMessages sorts the bodies SQS parked in the DLQ (maxReceiveCount reached):
// it returns the bad messages among them to send back, by their index in bads, and the
// other bodies. A bad message parked before any consumer read it to the end (its
// consumers killed each time) goes back, and must then be dead-lettered for its reason;
// one a consumer dead-lettered already (lettered holds the dead letters' bodies: it was
// killed before its delete, so SQS parked the same message again) needs nothing more.
// Bodies, not reasons, tell them apart: two bad messages may share a reason. A bad body
// is told by its text, not by Decode: a payload mismatch or a business refusal decodes.
func parkedBadMessages(bads []example.Bad, parked, lettered []string) (send []int, others []string) {
	badBody := map[string]int{}
	for i, b := range bads {
		badBody[b.Body] = i
	}
	for _, body := range parked {
		i, ok := badBody[body]
		switch {
		case !ok:
			others = append(others, body)
		case !slices.Contains(send, i) && !slices.Contains(lettered, body):
			send = append(send, i)
		}
	}
	return send, others
}

// missingReasons returns the reasons of bads that no dead letter's reason contains.
func missingReasons(bads []example.Bad, reasons []string) []string {
	var missing []string
	for _, b := range bads {
		if !slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(r, b.Reason) }) {
			missing = append(missing, fmt.Sprintf("%s: %q", b.ID, b.Reason))
		}
	}
	return missing
}

// CompareState returns a line per name whose value got differs from want's, and per
// name only got has with a value other than 0.
func CompareState(want, got example.State) []string {
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			diffs = append(diffs, fmt.Sprintf("%s: %d, want %d", k, got[k], want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok && got[k] != 0 {
			diffs = append(diffs, fmt.Sprintf("%s: %d, where no applied message should have left anything", k, got[k]))
		}
	}
	return diffs
}

// producerCount counts, from the input queue's SendMessageBatch answers, the accepted
// messages whose dedup id SQS had already accepted in this run: a FIFO queue accepts
// them and does not deliver them within its 5-minute deduplication interval.
type producerCount struct {
	SQSAPI
	url  string
	mu   sync.Mutex
	seen map[string]bool
	rep  int
}

func (p *producerCount) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out, err := p.SQSAPI.SendMessageBatch(ctx, in, optFns...)
	if err != nil || aws.ToString(in.QueueUrl) != p.url {
		return out, err
	}
	dedup := map[string]string{}
	for _, e := range in.Entries {
		dedup[aws.ToString(e.Id)] = aws.ToString(e.MessageDeduplicationId)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ok := range out.Successful {
		id := dedup[aws.ToString(ok.Id)]
		if p.seen[id] {
			p.rep++
		}
		p.seen[id] = true
	}
	return out, err
}

func (p *producerCount) repeats() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rep
}

// emfCounts sums the counters of the consumers' EMF lines.
type emfCounts struct {
	mu   sync.Mutex
	c    map[string]int
	last time.Time // when a record was last applied or answered
}

func (e *emfCounts) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.c == nil {
		e.c = map[string]int{}
	}
	for _, line := range strings.Split(string(p), "\n") {
		var doc map[string]any
		if json.Unmarshal([]byte(line), &doc) != nil {
			continue
		}
		for _, name := range []string{emf.MetricAcquired, emf.MetricDuplicate, emf.MetricInProgress, emf.MetricLeaseLost,
			emf.MetricPermanentFailure, emf.MetricDeadLettered, emf.MetricRetry, emf.MetricGuarded} {
			if v, ok := doc[name].(float64); ok {
				e.c[name] += int(v)
				if v > 0 && (name == emf.MetricAcquired || name == emf.MetricDuplicate || name == emf.MetricGuarded) {
					e.last = time.Now()
				}
			}
		}
	}
	return len(p), nil
}

func (e *emfCounts) lastProgress() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last
}

func (e *emfCounts) snapshot() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.c)
}

// drain receives every message of a queue and deletes it.
func drain(ctx context.Context, api SQSAPI, url string, each func(sqstypes.Message)) error {
	for {
		out, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			return fmt.Errorf("demo: read %s: %w", url, err)
		}
		if len(out.Messages) == 0 {
			return nil
		}
		var entries []sqstypes.DeleteMessageBatchRequestEntry
		for i, m := range out.Messages {
			each(m)
			entries = append(entries, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle})
		}
		if _, err := api.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
			return fmt.Errorf("demo: delete from %s: %w", url, err)
		}
	}
}

// dlqReasons drains the DLQ: the consumer's dead letters by short reason, the bodies of
// the messages SQS's redrive policy moved (they carry no reason), every dead letter's
// full reason, and the dead letters' bodies (the message's own).
func dlqReasons(ctx context.Context, api SQSAPI, url string) (map[string]int, []string, []string, []string, error) {
	reasons := map[string]int{}
	var redriven, full, bodies []string
	err := drain(ctx, api, url, func(m sqstypes.Message) {
		a, ok := m.MessageAttributes[sqsmsg.DLQReasonAttribute]
		if !ok {
			redriven = append(redriven, aws.ToString(m.Body))
			return
		}
		full = append(full, aws.ToString(a.StringValue))
		bodies = append(bodies, aws.ToString(m.Body))
		reasons[shortReason(aws.ToString(a.StringValue))]++
	})
	return reasons, redriven, full, bodies, err
}

// shortReason keeps the most telling part of an error chain for the summary.
func shortReason(r string) string {
	r = strings.TrimPrefix(r, "permanent: ")
	if i := strings.LastIndex(r, "invalid "); i >= 0 {
		// The example's own words after its sentinel ("ledger: invalid payment: "):
		// "field: what is wrong".
		if _, rest, ok := strings.Cut(r[i:], ": "); ok {
			r = rest
		}
	}
	if i := strings.LastIndex(r, "idem: "); i >= 0 && strings.Contains(r[i:], "payload does not match") {
		return "payload does not match the stored payload for this key"
	}
	parts := strings.Split(r, ": ")
	if len(parts) > 2 {
		r = strings.Join(parts[len(parts)-2:], ": ")
	}
	if len(r) > 90 {
		r = r[:90] + "…"
	}
	return r
}

// receiptReader plays the downstream consumer of an outbound queue: it drains the
// queue now and then during the run (moto's FIFO send scans the whole queue for
// duplicate dedup ids, so a queue left to grow slows every receipt down) and counts its
// messages by idempotency-key, and, on the Confirmer's queue, by the message each
// confirms.
type receiptReader struct {
	api      SQSAPI
	url      string                           // "": the example sends nothing
	confirms func(body string) (string, bool) // nil: a queue the Confirmer does not read
	mu       sync.Mutex
	seen     map[string]map[string]bool // business id -> the idempotency-keys of its outbound messages
	keys     map[string]int             // idempotency-key -> copies received
	total    int
}

func (r *receiptReader) drain(ctx context.Context) error {
	if r.url == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return drain(ctx, r.api, r.url, func(m sqstypes.Message) {
		r.total++
		key := aws.ToString(m.MessageAttributes[idem.KeyAttribute].StringValue)
		if r.keys == nil {
			r.keys = map[string]int{}
		}
		r.keys[key]++
		if r.confirms == nil {
			return
		}
		if id, ok := r.confirms(aws.ToString(m.Body)); ok {
			if r.seen[id] == nil {
				r.seen[id] = map[string]bool{}
			}
			r.seen[id][key] = true
		}
	})
}

// QueueCount is what an outbound queue delivered downstream: its messages and their
// distinct idempotency-keys. A resend (a crash between a send and its mark) is a message
// whose key came before: a FIFO queue drops it within SQS's 5-minute deduplication
// interval, a standard queue delivers it and its receiver drops it by the key
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/standard-queues.html).
type QueueCount struct {
	URL            string
	Messages, Keys int
}

// OK reports whether a FIFO queue delivered each key once (a demo ends well within the
// deduplication interval of the send it repeats); a standard queue may deliver it again.
func (q QueueCount) OK() bool { return !strings.HasSuffix(q.URL, ".fifo") || q.Messages == q.Keys }

func (r *receiptReader) queueCount() QueueCount {
	r.mu.Lock()
	defer r.mu.Unlock()
	return QueueCount{URL: r.url, Messages: r.total, Keys: len(r.keys)}
}

// every drains the queue every d until ctx ends.
func (r *receiptReader) every(ctx context.Context, d time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
			// A pass runs to its end even when the run stops meanwhile: a receive cut
			// short would hide its messages from the final count until they are visible
			// again. A failed pass is retried by the next one and by the final drain.
			_ = r.drain(context.WithoutCancel(ctx))
		}
	}
}

// counts returns, on the Confirmer's queue, the distinct messages with an outbound
// message, their outbound messages (by idempotency-key: a resend counts once), and those
// of messages not among applied.
func (r *receiptReader) counts(applied []example.Message) (distinct, total, notApplied int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := make(map[string]bool, len(applied))
	for _, p := range applied {
		ok[p.ID] = true
	}
	for id, keys := range r.seen {
		total += len(keys)
		if !ok[id] {
			notApplied += len(keys)
		}
	}
	return len(r.seen), total, notApplied
}

// Print writes the summary a person reads at the end of `make demo`.
func (s Summary) Print(w io.Writer) {
	line := func(label string, v any) { fmt.Fprintf(w, "  %-52s %v\n", label, v) }
	fmt.Fprintln(w, "\n=== demo summary ===")
	line("messages sent (accepted by SQS)", s.Sent)
	if s.HTTP != nil {
		line("  sent by the ingress (HTTP phase)", s.HTTP.IngressSent)
	}
	line("  sent with a dedup id already sent (SQS drops them)", s.DedupRepeats)
	line("delivered to consumers (distinct message ids)", s.Delivered)
	line("  not delivered (computed: sent - delivered)", s.SuppressedBySQS)
	line("answered from the stored result (duplicates)", s.SuppressedByDynamo)
	line("refused while another consumer held the key", s.InProgress)
	if s.StateSkipped != "" {
		line("business effects applied (counted in its tables)", fmt.Sprintf("not counted (distinct valid messages: %d)", s.Distinct))
	} else {
		line("business effects applied (counted in its tables)", fmt.Sprintf("%d (distinct valid messages: %d)", s.Applied, s.Distinct))
	}
	line("  reported applied by the local consumers", s.AppliedByMetrics)
	if s.ChildConsumers {
		line("  reported applied by the consumer processes", s.AppliedByChildren)
	}
	if unreported := s.Applied - s.AppliedByMetrics - s.AppliedByChildren; unreported != 0 && s.StateSkipped == "" {
		why := "a commit whose answer its consumer did not get; the redelivery found it completed"
		if s.ChildConsumers {
			why = "a consumer process killed after its commit, or a commit whose answer was lost"
		}
		line("  unreported effects (computed: effects - reports)", fmt.Sprintf("%d (%s)", unreported, why))
	}
	if s.OutboundSkipped != "" {
		line("outbound messages received downstream", "not counted: "+s.OutboundSkipped)
	} else {
		line("outbound messages received downstream", fmt.Sprintf("%d for %d messages (%d for messages not applied)", s.OutboundMessages, s.Outbound, s.OutboundNotApplied))
	}
	for _, q := range s.OutboundQueues {
		line("  on "+q.URL[strings.LastIndex(q.URL, "/")+1:], fmt.Sprintf("%d messages, %d idempotency-keys", q.Messages, q.Keys))
	}
	dlq := 0
	for _, n := range s.DeadLettered {
		dlq += n
	}
	line("dead-lettered by the consumer (bad messages sent)", fmt.Sprintf("%d (%d)", dlq, s.BadSent))
	reasons := slices.Collect(maps.Keys(s.DeadLettered))
	sort.Strings(reasons)
	for _, r := range reasons {
		fmt.Fprintf(w, "      %d × %s\n", s.DeadLettered[r], r)
	}
	if s.HTTP != nil {
		s.HTTP.print(line, w)
	}
	for _, g := range s.Gateways {
		g.print(line, w)
	}
	if s.Redriven > 0 {
		line("moved to the DLQ by SQS after 5 receives", fmt.Sprintf("%d (applied through another copy: %d)", s.Redriven, s.RedrivenApplied))
	}
	if s.RedriveSent > 0 {
		line("parked messages redriven from the DLQ / then applied", fmt.Sprintf("%d / %d", s.RedriveSent, s.RedriveApplied))
	}
	if len(s.Parked) > 0 {
		line("messages parked in the DLQ, not applied", fmt.Sprintf("%d: %s (idemctl redrive)", len(s.Parked), strings.Join(s.Parked, ", ")))
	}
	if len(s.Deliveries) > 0 {
		line("storm: extra deliveries sent, by kind", "")
		for _, k := range StormKinds {
			fmt.Fprintf(w, "      %d × %s\n", s.Deliveries[k], k)
		}
	}
	line("runs stopped by the guard write (record expired or deleted)", fmt.Sprintf("%d (at most %d expected)", s.Guarded, s.GuardedExpected))
	line("commits refused: lease lost", s.LeaseLost)
	line("consumers killed (SIGKILL)", s.Killed)
	if len(s.KilledByPhase) > 0 {
		for _, p := range append(slices.Clone(Phases), RandomKill) {
			if n, ok := s.KilledByPhase[p]; ok {
				fmt.Fprintf(w, "      %d × %s\n", n, p)
			}
		}
	}
	line("invocations timed out (whole batch failed)", s.Timeouts)
	line("stale locks reaped", s.Reaped)
	if s.Reaped > 0 {
		late := fmt.Sprintf("%s by the demo's reaper (every %s)", s.ReapLate.Round(time.Millisecond), ReapEvery)
		if s.ChildConsumers {
			late += fmt.Sprintf(", %s by the consumer processes' own", s.ReapLateChildren.Round(time.Millisecond))
		}
		line("  latest reap past lease end + grace", late)
	}
	verdict := "OK"
	switch {
	case s.StateSkipped != "":
		verdict = "skipped: " + s.StateSkipped
	case !s.StateOK:
		verdict = "FAIL"
	}
	line(s.Example+" check: tables = what the applied messages leave", verdict)
	for _, d := range s.StateDiffs {
		fmt.Fprintf(w, "      %s\n", d)
	}
	for _, m := range s.BadMissing {
		fmt.Fprintf(w, "      bad message not dead-lettered for its reason: %s\n", m)
	}
	overall := "OK"
	if !s.OK {
		overall = "FAIL"
	}
	line("elapsed", s.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "demo: %s\n", overall)
}
