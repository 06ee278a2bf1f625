// Package demo is `make demo`: a realistic stream of payments with duplicates of every
// kind, bad input and a consumer killed mid-batch, consumed by several local consumers
// and the reaper, then checked from outside: every balance must equal the sum of the
// distinct payments sent.
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
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/runner"
	"github.com/idemgo/sqs-lambda-consumer/internal/syncw"
)

// SQSAPI is what the demo uses of SQS: sending, the runner's calls, and draining.
type SQSAPI interface {
	Sender
	runner.SQSAPI
	consumerapp.SQSAPI
}

// DynamoDBAPI is what the demo uses of DynamoDB: the consumer's calls and a Scan of the
// ledger for the check.
type DynamoDBAPI interface {
	idem.DynamoDBAPI
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	// DeleteItem plays DynamoDB's TTL deletion of idempotency records in the storm.
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// Functions are the consumers and the reaper of Options.Functions.
type Functions struct {
	Consumer func(instance int) runner.Handler
	Reap     func(ctx context.Context) (idem.SweepResult, error)
	Close    func()
}

// Crasher starts a consumer in another process, waits until it holds leases in the
// middle of a batch, and kills it with SIGKILL. It returns how many it killed.
type Crasher func(ctx context.Context) (int, error)

// Options configures Run. Env holds the variables `idemctl up` prints.
type Options struct {
	Env       map[string]string
	SQS       SQSAPI
	DynamoDB  DynamoDBAPI
	Payments  int // distinct payments (default 2000)
	Accounts  int // accounts, one FIFO group each (default 50)
	Consumers int // local consumer instances (default 4)
	Seed      uint64
	Crash     Crasher // nil: no consumer is killed
	// Chaos, when set, runs during the consumption and kills consumer processes at
	// random moments and at chosen phases (see Chaos).
	Chaos func(ctx context.Context, logs ChildLog) (ChaosResult, error)
	Out   io.Writer // progress and the summary
	Logs  io.Writer // the consumers' JSON logs (default: discarded)
	// Storm switches to the duplicate storm: every payment is delivered 1 to
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
	ConsumerDynamoDB idem.DynamoDBAPI
	// RedriveParked sends the payments SQS parked in the DLQ (maxReceiveCount reached
	// while consumers kept dying) back to the input queue and consumes them, as an
	// operator's `idemctl redrive` would, before the check.
	RedriveParked bool
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
	Applied            int            // business effects committed: credits in the ledger
	AppliedByMetrics   int            // handler runs the local consumers reported as applied
	AppliedByChildren  int            // ... the consumer processes reported as applied (their "applied" log lines)
	ChildConsumers     bool           // consumer processes ran beside the local consumers (chaos)
	DistinctPayments   int            // valid distinct payments sent
	DeadLettered       map[string]int // DLQ messages the consumer moved, by reason
	Redriven           int            // DLQ messages SQS moved after maxReceiveCount receives
	RedrivenApplied    int            // ... whose payment was applied all the same (a copy)
	Parked             []string       // payments only in the DLQ, not applied: redrive them
	RedriveSent        int            // with RedriveParked: parked payments sent back to the input queue
	RedriveApplied     int            // ... and applied then
	BadSent            int            // bad messages sent (each must end in the DLQ)
	Killed             int            // consumers killed with SIGKILL
	KilledByPhase      map[string]int // ... by where they died (see Phases, RandomKill)
	Timeouts           int            // invocations of the local consumers past their timeout (whole batch failed)
	Reaped             int            // stale locks failed by the reaper
	ReapLate           time.Duration  // the in-process reaper's latest reap past lease end + grace (period ReapEvery)
	ReapLateChildren   time.Duration  // the same for the consumer processes' reapers
	Guarded            int            // runs stopped by the ledger's journal entry (a redelivery past the TTL)
	LeaseLost          int            // commits refused because the lease had moved on
	Deliveries         map[string]int // storm: extra deliveries sent, by kind
	GuardedExpected    int            // storm: the most guarded runs there may be (after-TTL deliveries)
	LastProgress       time.Time      // when a local consumer last applied or answered a record
	Receipts           int            // distinct payments with a receipt
	ReceiptMessages    int            // receipt messages (one per applied payment expected)
	ReceiptsNotApplied int            // receipt messages for payments that were not applied (0 expected)
	LedgerOK           bool
	LedgerDiffs        []string
	OK                 bool
	Elapsed            time.Duration
}

// Run plays the whole demo against the resources in o.Env.
func Run(ctx context.Context, o Options) (Summary, error) {
	start := time.Now()
	if o.Payments <= 0 {
		o.Payments = 2000
	}
	if o.Accounts <= 0 {
		o.Accounts = 50
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
	cfg, err := consumerapp.FromEnv(lookup)
	if err != nil {
		return Summary{}, err
	}
	queueURL := o.Env["QUEUE_URL"]
	if queueURL == "" {
		return Summary{}, errors.New("demo: QUEUE_URL is not set")
	}
	cfg.LeaseGrace, cfg.DeadlineMargin = LeaseGrace, DeadlineMargin

	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	run := fmt.Sprintf("%d", time.Now().Unix())
	payments := Generate(rng, run, o.Payments, o.Accounts)
	var s Summary
	var first, second, extra, bad, afterDone, afterTTL, afterDelete []Message
	if o.Storm {
		if o.MaxDeliveries <= 0 {
			o.MaxDeliveries = 5
		}
		st := stormStream(rng, payments, o.MaxDeliveries)
		bad = badMessages(payments)
		first, second, afterDone, afterTTL, afterDelete, s.Deliveries = st.first, append(st.second, bad...), st.afterDone, st.afterTTL, st.afterDelete, st.kinds
		rng.Shuffle(len(second), func(i, j int) { second[i], second[j] = second[j], second[i] })
		if len(first) > stormHead { // the rest waits for the consumers (see sendPaced)
			first, second = first[:stormHead], append(first[stormHead:], second...)
		}
		s.GuardedExpected = len(afterTTL) + len(afterDelete)
	} else {
		first, second, extra, bad = stream(rng, payments)
	}
	s.DistinctPayments, s.BadSent = len(payments), len(bad)
	consumerDDB := o.ConsumerDynamoDB
	if consumerDDB == nil {
		consumerDDB = o.DynamoDB
	}

	fmt.Fprintf(o.Out, "demo: %d payments over %d accounts; %d consumers; %d bad messages\n", len(payments), o.Accounts, o.Consumers, len(bad))
	n, err := send(ctx, o.SQS, queueURL, first, 4)
	s.Sent += n
	if err != nil {
		return s, err
	}
	fmt.Fprintf(o.Out, "demo: sent %d messages (first half of the payments)\n", n)

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
	rr := &receiptReader{api: o.SQS, url: o.Env["RECEIPTS_QUEUE_URL"], seen: map[string]int{}}
	rctx, stopReceipts := context.WithCancel(ctx)
	defer stopReceipts()
	go rr.every(rctx, 5*time.Second)
	store, err := idem.NewDynamoStore(o.DynamoDB, cfg.IdempotencyTable)
	if err != nil {
		return s, err
	}
	// The reaper also sends receipts that a killed consumer committed but never sent.
	reaper := &idem.Reaper{Store: store, Shards: cfg.Shards, Grace: LeaseGrace, Sender: o.SQS}
	var seenMu sync.Mutex
	seen := map[string]bool{}
	var reaped int64
	sweep := func(ctx context.Context) (idem.SweepResult, error) {
		sweepOnce := reaper.Sweep
		if fns.Reap != nil {
			sweepOnce = fns.Reap
		}
		res, err := sweepOnce(ctx)
		seenMu.Lock()
		s.ReapLate = max(s.ReapLate, res.MaxLate)
		seenMu.Unlock()
		return res, err
	}
	var clock func() time.Time // the consumers' clock; nil: time.Now
	consume := func() error {
		stats, err := runner.Run(ctx, runner.Config{
			SQS: o.SQS, QueueURL: queueURL, Consumers: o.Consumers, BatchSize: 10,
			VisibilityTimeout: Visibility, FunctionTimeout: FunctionTimeout, WaitTime: time.Second,
			RetryAfter: time.Second, UntilIdle: 3 * time.Second, Progress: o.Out, ProgressEvery: 5 * time.Second,
			Reap: sweep, ReapEvery: ReapEvery,
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
		reaped += stats.Reaped
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
			OnReaped: func(n int, late time.Duration) {
				seenMu.Lock()
				reaped += int64(n)
				s.ReapLateChildren = max(s.ReapLateChildren, late)
				seenMu.Unlock()
			},
		}
		go func() { r, err := o.Chaos(ctx, logs); chaos <- chaosResult{r, err} }()
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

	c := counts.snapshot()
	seenMu.Lock()
	s.Delivered = len(seen)
	seenMu.Unlock()
	s.SuppressedBySQS = s.Sent - s.Delivered
	s.DedupRepeats = producer.repeats()
	s.SuppressedByDynamo = c[idem.MetricDuplicate]
	s.InProgress = c[idem.MetricInProgress]
	s.Guarded = c[idem.MetricGuarded]
	s.LeaseLost = c[idem.MetricLeaseLost]
	s.LastProgress = counts.lastProgress()
	s.Reaped = int(reaped)
	var redriven []string // bodies SQS moved itself
	if s.DeadLettered, redriven, err = dlqReasons(ctx, o.SQS, o.Env["DLQ_URL"]); err != nil {
		return s, err
	}
	// A message that consumers kept receiving without finishing (killed each time) is
	// moved to the DLQ by SQS's redrive policy after maxReceiveCount receives. Nothing is
	// lost: either its payment was applied through another copy, or it is parked in the
	// DLQ for a redrive. The idempotency record tells which.
	// applied tells from the payment's idempotency record whether it was committed.
	applied := func(p ledger.Payment) bool {
		pk, err := idem.RecordKey(cfg.Scope, ledger.Key(p), false)
		if err != nil {
			return false
		}
		rec, err := store.Get(ctx, pk, time.Now())
		return err == nil && rec.Status == idem.StatusCompleted
	}
	parked := map[string]bool{}
	var parkedPayments []ledger.Payment
	for _, body := range redriven {
		s.Redriven++
		p, err := ledger.Decode([]byte(body))
		if err != nil {
			continue
		}
		if applied(p) {
			s.RedrivenApplied++
		} else if !parked[p.PaymentID] {
			parked[p.PaymentID] = true
			s.Parked = append(s.Parked, p.PaymentID)
			parkedPayments = append(parkedPayments, p)
		}
	}
	if o.RedriveParked && len(parkedPayments) > 0 {
		// What an operator does with `idemctl redrive`: the parked messages go back to the
		// input queue (same body, key and group) and are consumed once more.
		msgs := make([]Message, len(parkedPayments))
		for i, p := range parkedPayments {
			msgs[i] = message(p, p.AccountID, "redrive-"+p.PaymentID)
		}
		n, err := send(ctx, o.SQS, queueURL, msgs, 4)
		s.RedriveSent = n
		if err != nil {
			return s, err
		}
		fmt.Fprintf(o.Out, "demo: redrove %d parked payments to the input queue\n", n)
		if err := consume(); err != nil {
			return s, err
		}
		s.Parked, parked = nil, map[string]bool{}
		for _, p := range parkedPayments {
			if applied(p) {
				s.RedriveApplied++
				continue
			}
			s.Parked = append(s.Parked, p.PaymentID)
			parked[p.PaymentID] = true
		}
		more, again, err := dlqReasons(ctx, o.SQS, o.Env["DLQ_URL"])
		if err != nil {
			return s, err
		}
		for r, n := range more {
			s.DeadLettered[r] += n
		}
		s.Redriven += len(again)
	}
	stopReceipts()
	if err := rr.drain(ctx); err != nil {
		return s, err
	}
	accts, err := ledger.Accounts(ctx, o.DynamoDB, cfg.LedgerTable)
	if err != nil {
		return s, err
	}
	got := map[string]int64{}
	s.Applied = 0 // counted from the ledger itself: one credit per payment_count
	for id, a := range accts {
		got[id] = a.BalanceCents
		s.Applied += int(a.Payments)
	}
	s.AppliedByMetrics = c[idem.MetricAcquired]
	var applicable []ledger.Payment
	for _, p := range payments {
		if !parked[p.PaymentID] {
			applicable = append(applicable, p)
		}
	}
	s.Receipts, s.ReceiptMessages, s.ReceiptsNotApplied = rr.counts(applicable)
	want := ledger.ExpectedBalances(applicable)
	for _, acct := range slices.Sorted(maps.Keys(want)) {
		if got[acct] != want[acct] {
			s.LedgerDiffs = append(s.LedgerDiffs, fmt.Sprintf("%s: balance %d, payments sum to %d", acct, got[acct], want[acct]))
		}
	}
	for acct := range got {
		if _, ok := want[acct]; !ok {
			s.LedgerDiffs = append(s.LedgerDiffs, fmt.Sprintf("%s: balance %d for an account with no valid payment", acct, got[acct]))
		}
	}
	s.LedgerOK = len(s.LedgerDiffs) == 0
	dlq := 0
	for _, v := range s.DeadLettered {
		dlq += v
	}
	// Receipts go out after the commit: exactly one per applied payment, none for a
	// payment that was refused or not applied. A run stopped by the journal is a second
	// execution of a payment: expected after the record's TTL or its deletion (the storm
	// plays those), a bug anywhere else.
	s.OK = s.LedgerOK && s.Applied == s.DistinctPayments-len(s.Parked) && dlq == s.BadSent &&
		s.Receipts == s.Applied && s.ReceiptMessages == s.Receipts && s.ReceiptsNotApplied == 0 &&
		(s.Killed == 0 || s.Reaped > 0 || cfg.Mode == idem.ModeSingleTransaction) && // no lease, nothing to reap
		s.Guarded <= s.GuardedExpected
	s.Elapsed = time.Since(start)
	return s, nil
}

// Generate returns n distinct payments over accounts, one currency per account.
func Generate(rng *rand.Rand, run string, n, accounts int) []ledger.Payment {
	ps := make([]ledger.Payment, n)
	for i := range ps {
		a := rng.IntN(accounts)
		ps[i] = ledger.Payment{
			PaymentID:   fmt.Sprintf("pay-%s-%05d", run, i),
			AccountID:   fmt.Sprintf("acct-%s-%03d", run, a),
			AmountCents: 1 + rng.Int64N(100_000),
			Currency:    ledger.Currencies[a%len(ledger.Currencies)],
		}
	}
	return ps
}

func message(p ledger.Payment, group, dedup string) Message {
	b, _ := json.Marshal(p) // a struct of strings and an int64 always marshals
	return Message{Body: string(b), Key: ledger.Key(p), Group: group, DedupID: dedup}
}

// stream splits the traffic: the first half of the payments; then the second half
// mixed with duplicates inside the FIFO window (same dedup id: SQS drops them),
// concurrent redeliveries (same key, another group, so another consumer may hold it at
// the same moment) and bad input; and late duplicates (new dedup id, same key and
// payload: the idempotency record answers them).
func stream(rng *rand.Rand, ps []ledger.Payment) (first, second, late, bad []Message) {
	half := len(ps) / 2
	for _, p := range ps[:half] {
		first = append(first, message(p, p.AccountID, idem.DeduplicationID(ledger.Key(p))))
	}
	for _, p := range ps[half:] {
		second = append(second, message(p, p.AccountID, idem.DeduplicationID(ledger.Key(p))))
		if rng.IntN(10) == 0 { // concurrent redelivery
			second = append(second, message(p, p.AccountID+"-replay", "replay-"+p.PaymentID))
		}
	}
	for i := 0; i < len(ps)/10; i++ { // in-window duplicates of the first half
		p := ps[rng.IntN(max(half, 1))]
		second = append(second, message(p, p.AccountID, idem.DeduplicationID(ledger.Key(p))))
	}
	for i := 0; i < len(ps)/13; i++ {
		p := ps[rng.IntN(len(ps))]
		late = append(late, message(p, p.AccountID, "late-"+p.PaymentID))
	}
	bad = badMessages(ps)
	second = append(second, bad...)
	rng.Shuffle(len(second), func(i, j int) { second[i], second[j] = second[j], second[i] })
	return first, second, late, bad
}

// badMessages are the bad input every run sends: each must end in the DLQ with its reason.
func badMessages(ps []ledger.Payment) []Message {
	half := len(ps) / 2
	g := "acct-bad"
	bad := []Message{
		{Body: `{"payment_id":"pay-bad-1","account_id":`, Key: "payment:pay-bad-1", Group: g, DedupID: "bad-1"},
		{Body: `{"payment_id":"pay-bad-2","account_id":"acct-bad","amount_cents":-500,"currency":"EUR"}`, Key: "payment:pay-bad-2", Group: g, DedupID: "bad-2"},
		{Body: `{"payment_id":"pay-bad-3","account_id":"acct-bad","amount_cents":500,"currency":"XXX"}`, Key: "payment:pay-bad-3", Group: g, DedupID: "bad-3"},
		{Body: `{"account_id":"acct-bad","amount_cents":500,"currency":"EUR"}`, Group: g, DedupID: "bad-4"}, // no key anywhere
	}
	// A payment the ledger refuses: another currency than its account's, after a payment
	// of the first half in the same FIFO group set the account's currency. It must get no
	// receipt.
	if half > 0 {
		p := ledger.Payment{PaymentID: "pay-bad-6", AccountID: ps[0].AccountID, AmountCents: 500, Currency: ledger.Currencies[0]}
		if p.Currency == ps[0].Currency {
			p.Currency = ledger.Currencies[1]
		}
		bad = append(bad, message(p, p.AccountID, "bad-6"))
	}
	// The same key as a payment of the first half with another amount: a producer bug.
	if half > 0 {
		p := ps[0]
		p.AmountCents++
		m := message(p, ps[0].AccountID, "conflict-"+p.PaymentID)
		bad = append(bad, m)
	}
	return bad
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
		for _, name := range []string{idem.MetricAcquired, idem.MetricDuplicate, idem.MetricInProgress, idem.MetricLeaseLost,
			idem.MetricPermanentFailure, idem.MetricDeadLettered, idem.MetricRetry, idem.MetricGuarded} {
			if v, ok := doc[name].(float64); ok {
				e.c[name] += int(v)
				if v > 0 && (name == idem.MetricAcquired || name == idem.MetricDuplicate || name == idem.MetricGuarded) {
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

// dlqReasons drains the DLQ: the consumer's dead letters by reason, and the bodies of the
// messages SQS's redrive policy moved (they carry no reason).
func dlqReasons(ctx context.Context, api SQSAPI, url string) (map[string]int, []string, error) {
	reasons := map[string]int{}
	var redriven []string
	err := drain(ctx, api, url, func(m sqstypes.Message) {
		a, ok := m.MessageAttributes[idem.DLQReasonAttribute]
		if !ok {
			redriven = append(redriven, aws.ToString(m.Body))
			return
		}
		reasons[shortReason(aws.ToString(a.StringValue))]++
	})
	return reasons, redriven, err
}

// shortReason keeps the most telling part of an error chain for the summary.
func shortReason(r string) string {
	r = strings.TrimPrefix(r, "permanent: ")
	if i := strings.LastIndex(r, ledger.ErrInvalidPayment.Error()+": "); i >= 0 {
		r = r[i+len(ledger.ErrInvalidPayment.Error()+": "):] // the ledger's own words: "field: what is wrong"
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

// receiptReader plays the downstream consumer of the receipts queue: it drains the
// queue now and then during the run (moto's FIFO send scans the whole queue for
// duplicate dedup ids, so a queue left to grow slows every receipt down) and counts.
type receiptReader struct {
	api   SQSAPI
	url   string
	mu    sync.Mutex
	seen  map[string]int // payment id -> receipt messages
	total int
}

func (r *receiptReader) drain(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return drain(ctx, r.api, r.url, func(m sqstypes.Message) {
		r.total++
		var rc ledger.Receipt
		if json.Unmarshal([]byte(aws.ToString(m.Body)), &rc) == nil {
			r.seen[rc.PaymentID]++
		}
	})
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

// counts returns the distinct payments with a receipt, the receipt messages, and the
// receipt messages of payments not among applied.
func (r *receiptReader) counts(applied []ledger.Payment) (distinct, total, notApplied int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := make(map[string]bool, len(applied))
	for _, p := range applied {
		ok[p.PaymentID] = true
	}
	for id, n := range r.seen {
		if !ok[id] {
			notApplied += n
		}
	}
	return len(r.seen), r.total, notApplied
}

// Print writes the summary a person reads at the end of `make demo`.
func (s Summary) Print(w io.Writer) {
	line := func(label string, v any) { fmt.Fprintf(w, "  %-52s %v\n", label, v) }
	fmt.Fprintln(w, "\n=== demo summary ===")
	line("messages sent (accepted by SQS)", s.Sent)
	line("  sent with a dedup id already sent (SQS drops them)", s.DedupRepeats)
	line("delivered to consumers (distinct message ids)", s.Delivered)
	line("  not delivered (computed: sent - delivered)", s.SuppressedBySQS)
	line("answered from the stored result (duplicates)", s.SuppressedByDynamo)
	line("refused while another consumer held the key", s.InProgress)
	line("business effects applied (ledger credits)", fmt.Sprintf("%d (distinct valid payments: %d)", s.Applied, s.DistinctPayments))
	line("  reported applied by the local consumers", s.AppliedByMetrics)
	if s.ChildConsumers {
		line("  reported applied by the consumer processes", s.AppliedByChildren)
	}
	if unreported := s.Applied - s.AppliedByMetrics - s.AppliedByChildren; unreported != 0 {
		why := "a commit whose answer its consumer did not get; the redelivery found it completed"
		if s.ChildConsumers {
			why = "a consumer process killed after its commit, or a commit whose answer was lost"
		}
		line("  unreported credits (computed: credits - reports)", fmt.Sprintf("%d (%s)", unreported, why))
	}
	line("receipts received downstream", fmt.Sprintf("%d messages for %d payments (%d for payments not applied)", s.ReceiptMessages, s.Receipts, s.ReceiptsNotApplied))
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
	if s.Redriven > 0 {
		line("moved to the DLQ by SQS after 5 receives", fmt.Sprintf("%d (payment applied through another copy: %d)", s.Redriven, s.RedrivenApplied))
	}
	if s.RedriveSent > 0 {
		line("parked payments redriven from the DLQ / then applied", fmt.Sprintf("%d / %d", s.RedriveSent, s.RedriveApplied))
	}
	if len(s.Parked) > 0 {
		line("payments parked in the DLQ, not applied", fmt.Sprintf("%d: %s (idemctl redrive)", len(s.Parked), strings.Join(s.Parked, ", ")))
	}
	if len(s.Deliveries) > 0 {
		line("storm: extra deliveries sent, by kind", "")
		for _, k := range StormKinds {
			fmt.Fprintf(w, "      %d × %s\n", s.Deliveries[k], k)
		}
	}
	line("runs stopped by the ledger journal (record expired or deleted)", fmt.Sprintf("%d (at most %d expected)", s.Guarded, s.GuardedExpected))
	line("commits refused: lease lost", s.LeaseLost)
	line("consumers killed (SIGKILL)", s.Killed)
	if len(s.KilledByPhase) > 0 {
		for _, p := range append(slices.Clone(Phases), RandomKill) {
			fmt.Fprintf(w, "      %d × %s\n", s.KilledByPhase[p], p)
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
	if !s.LedgerOK {
		verdict = "FAIL"
	}
	line("ledger check: every balance = sum of distinct payments", verdict)
	for _, d := range s.LedgerDiffs {
		fmt.Fprintf(w, "      %s\n", d)
	}
	overall := "OK"
	if !s.OK {
		overall = "FAIL"
	}
	line("elapsed", s.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "demo: %s\n", overall)
}
