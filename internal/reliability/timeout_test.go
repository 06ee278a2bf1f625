package reliability_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
	"github.com/idemgo/sqs-lambda-consumer/internal/localfn"
)

// TestTimeoutRedelivery stalls the first commits of the consumers, which run as Lambda
// execution environments, past their function timeout: each stalled invocation's
// environment is killed (SIGKILL), its whole batch is failed and nothing deleted, the
// next invocation starts a fresh environment, and the batch, redelivered, is applied
// once: the ledger is exact.
func TestTimeoutRedelivery(t *testing.T) {
	parallel(t, 1)
	payments, accounts, stalls := size(100, 1000), size(5, 20), size(2, 6)
	w := newWorld(t)
	proxy, err := demo.NewFaultProxy(awsEndpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Stall, proxy.StallCount, proxy.Out = 3*demo.FunctionTimeout, stalls, &progress{t: t}
	url, stop, err := localfn.ServeLoopback(proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	fns, _ := functions(t, w, url)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(size(5, 20))*time.Minute)
	defer cancel()
	start := time.Now()
	s, err := demo.Run(ctx, demo.Options{
		Env: w.vars, SQS: w.sqs, DynamoDB: w.ddb, Messages: payments, Groups: accounts, Consumers: 2, Seed: 13,
		Out: &progress{t: t}, Logs: consumerLog(t), Functions: fns, RedriveParked: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkSummary(t, s)
	// One invocation may hold several stalled commits (its FIFO groups run at once).
	if proxy.Stalled() != stalls || s.Timeouts < 1 || s.Timeouts > stalls {
		t.Errorf("%d commits stalled, %d invocations timed out: want %d stalled, in 1 to %d timed-out invocations", proxy.Stalled(), s.Timeouts, stalls, stalls)
	}
	report(t, "Timeout: commits stalled past the function timeout", "messages / groups", fmtInts(payments, accounts),
		"stalled commits / invocations timed out", fmtInts(stalls, s.Timeouts), "function timeout", demo.FunctionTimeout,
		"elapsed", elapsed(time.Since(start)))
}
