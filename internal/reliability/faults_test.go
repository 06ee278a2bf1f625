package reliability_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
	"github.com/idemgo/sqs-lambda-consumer/internal/faults"
)

// fault is one step of the fault schedule: it starts faults and returns how to stop them.
type fault struct {
	name  string
	start func(tcp *faults.TCP, errs *faults.HTTPErrors) error
}

// completion targets: the writes of a commit and of a release.
var completion = []string{"DynamoDB_20120810.TransactWriteItems", "DynamoDB_20120810.UpdateItem"}

// schedule lists the faults in the order they are played: the ones that matter most
// (answers lost after the write, throttling, 5xx) first, while the traffic is heaviest.
var schedule = []fault{
	{"lost responses during completion (30% of commits applied, answered 500 or cut)", func(_ *faults.TCP, e *faults.HTTPErrors) error {
		return e.Set(faults.Rule{Kind: faults.LostResponse, Share: 0.15, Targets: completion},
			faults.Rule{Kind: faults.LostConnection, Share: 0.15, Targets: completion})
	}},
	{"lost acquires (20% of PutItem applied, answered 500)", func(_ *faults.TCP, e *faults.HTTPErrors) error {
		return e.Set(faults.Rule{Kind: faults.LostResponse, Share: 0.2, Targets: []string{"DynamoDB_20120810.PutItem"}})
	}},
	{"throttling (20% ThrottlingException, 10% ProvisionedThroughputExceeded)", func(_ *faults.TCP, e *faults.HTTPErrors) error {
		return e.Set(faults.Rule{Kind: faults.Throttling, Share: 0.2}, faults.Rule{Kind: faults.ThroughputExceeded, Share: 0.1})
	}},
	{"5xx (10% InternalServerError, 10% ServiceUnavailable)", func(_ *faults.TCP, e *faults.HTTPErrors) error {
		return e.Set(faults.Rule{Kind: faults.InternalError, Share: 0.1}, faults.Rule{Kind: faults.Unavailable, Share: 0.1})
	}},
	{"connection resets (10%)", func(p *faults.TCP, _ *faults.HTTPErrors) error {
		return p.ResetPeer("reset", faults.Upstream, 0, 0.1)
	}},
	{"latency spikes (+300ms ±200ms on a third of the connections)", func(p *faults.TCP, _ *faults.HTTPErrors) error {
		return p.Latency("spike", faults.Downstream, 300*time.Millisecond, 200*time.Millisecond, 0.33)
	}},
	{"timeouts: requests that never get an answer (3%)", func(p *faults.TCP, _ *faults.HTTPErrors) error {
		return p.Timeout("timeout", faults.Upstream, 0, 0.03)
	}},
	{"bandwidth stalls (1 KB/s on 20% of the connections)", func(p *faults.TCP, _ *faults.HTTPErrors) error {
		return p.Bandwidth("stall", faults.Downstream, 1, 0.2)
	}},
}

// opCounter counts SDK operations before the retry step: one per call, however many
// attempts it takes.
type opCounter struct{ n atomic.Int64 }

func (c *opCounter) option(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("reliability.ops",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			c.n.Add(1)
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
}

// TestStoreFaults puts toxiproxy (TCP faults) and an error injector (AWS error answers,
// lost responses) between the consumers and DynamoDB, and plays a schedule of faults
// while the demo's traffic is consumed: latency spikes, resets, timeouts, bandwidth
// stalls, throttling, 5xx, and writes applied whose answer is lost, during acquire and
// completion. Expected: the ledger exact, nothing lost, no run stopped by the journal
// (which would mean a second execution), and the run converges once the faults stop.
func TestStoreFaults(t *testing.T) {
	parallel(t, 2)
	payments, accounts, step, cycles := size(300, 2000), size(10, 50), time.Duration(size(1, 5))*time.Second, size(1, 3)
	w := newWorld(t)
	tcp, err := faults.NewTCP(awstest.Endpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tcp.Close() })
	errs, err := faults.NewHTTPErrors(tcp.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = errs.Close() })
	attempts, ops := awstest.NewCalls(), &opCounter{}
	faulty := dynamodb.NewFromConfig(awstest.ConfigFor(t, errs.URL()), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, attempts.APIOption, ops.option)
	})

	var (
		mu        sync.Mutex
		faultsOff time.Time
		played    []string
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(size(5, 30))*time.Minute)
	defer cancel()
	out := &progress{t: t}
	schedDone := make(chan error, 1)
	// The schedule follows the consumers' traffic, not the clock alone: it starts once
	// their first requests went through, and each fault lasts step and at least until
	// stepRequests more requests met it, so that a loaded machine (make test runs the
	// scenarios side by side) slows the schedule down with the traffic instead of playing
	// it to an idle store. A fault waits for its requests 10 steps at most: a run that
	// stalls fails on its own.
	const stepRequests = 40
	requestsSeen := func(n int64, wait time.Duration) {
		for limit := time.Now().Add(wait); errs.Stats().Requests < n && time.Now().Before(limit); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	go func() {
		requestsSeen(1, time.Minute)
		for range cycles {
			for _, f := range schedule {
				if err := f.start(tcp, errs); err != nil {
					schedDone <- fmt.Errorf("start %s: %w", f.name, err)
					return
				}
				fmt.Fprintf(out, "faults: %s for %s\n", f.name, step)
				from := errs.Stats().Requests
				time.Sleep(step)
				requestsSeen(from+stepRequests, 10*step)
				tcp.Clear()
				errs.Clear()
				mu.Lock()
				played = append(played, f.name)
				mu.Unlock()
			}
		}
		mu.Lock()
		faultsOff = time.Now()
		mu.Unlock()
		fmt.Fprintln(out, "faults: all stopped")
		schedDone <- nil
	}()
	s, err := demo.Run(ctx, demo.Options{
		Env: w.vars, SQS: w.sqs, DynamoDB: w.ddb, ConsumerDynamoDB: faulty,
		Messages: payments, Groups: accounts, Consumers: 4, Seed: 13, Out: out, Logs: consumerLog(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-schedDone; err != nil {
		t.Fatal(err)
	}
	checkSummary(t, s)
	if s.Guarded != 0 {
		t.Errorf("%d runs were stopped by the journal: a payment was executed twice", s.Guarded)
	}
	st := errs.Stats()
	var injected []string
	for _, k := range faults.Kinds() {
		if n := st.Injected[k]; n > 0 {
			injected = append(injected, fmt.Sprintf("%d %s", n, k))
		}
	}
	if st.Injected[faults.LostResponse]+st.Injected[faults.LostConnection] == 0 || st.Injected[faults.Throttling] == 0 {
		t.Errorf("the schedule injected too little to mean anything: %v", st.Injected)
	}
	converge := time.Duration(0)
	if s.LastProgress.After(faultsOff) {
		converge = s.LastProgress.Sub(faultsOff)
	}
	retries := int64(attempts.Total()) - ops.n.Load()
	report(t, "store faults",
		"messages / groups / consumers", fmtInts(payments, accounts, 4),
		"fault schedule", fmt.Sprintf("%d × %d steps of %s: %s", cycles, len(schedule), step, strings.Join(played[:len(schedule)], "; ")),
		"AWS error answers injected", strings.Join(injected, ", "),
		"DynamoDB calls / HTTP attempts / retries by the SDK", fmt.Sprintf("%d / %d / %d", ops.n.Load(), attempts.Total(), retries),
		"deliveries refused in progress / commits refused (lease lost)", fmtInts(s.InProgress, s.LeaseLost),
		"effects in the tables / distinct messages", fmtInts(s.Applied, s.Distinct),
		"double effects / missing / runs stopped by the guard", fmtInts(s.Applied-s.Distinct+len(s.Parked), len(s.Parked), s.Guarded),
		"DLQ: bad (sent) / moved by SQS (applied through a copy)", fmtInts(dlq(s), s.BadSent, s.Redriven, s.RedrivenApplied),
		"from the last fault to the last record done (backlog included)", elapsed(converge),
		"time", elapsed(s.Elapsed))
}
