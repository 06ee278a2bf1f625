package reliability_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
)

// TestCrashInjection kills consumer processes (idemctl run) with SIGKILL, again and
// again, restarting one each time: one is stalled before its commits with leases held,
// then they take turns dying at a random moment and killing themselves at a chosen
// phase (right after an acquire, after the business commit and before its receipt is
// sent, after the receipt is sent and before the SQS delete, in a reaper sweep).
// Expected: the ledger exact, exactly one receipt per applied payment, every message
// applied or in the DLQ, every stale lock reaped within two reaper periods of becoming
// reapable.
func TestCrashInjection(t *testing.T) { crashInjection(t, idem.ModeLease, size(10, 60)) }

// TestCrashInjectionSingleTransaction kills consumers that commit in one request per
// first delivery: they take no lease, so they die at their commit, after a send, or at a
// random moment, and there is nothing to reap.
func TestCrashInjectionSingleTransaction(t *testing.T) {
	crashInjection(t, idem.ModeSingleTransaction, size(6, 30))
}

func crashInjection(t *testing.T, mode idem.Mode, kills int) {
	skipMode(t, mode)
	parallel(t, 1)
	payments, accounts := size(200, 2000), size(10, 50)
	w := newWorld(t) // first: it skips an example the suite cannot run
	bin, err := idemctlBinary()
	if err != nil {
		t.Fatal(err)
	}
	w.vars["IDEMPOTENCY_MODE"] = mode.String()
	phaseList := demo.PhasesOf(mode.String(), len(example.ServicesOf(w.ex)) > 0)
	fns, bootDir := functions(t, w, awsEndpoint(t))
	// The children (idemctl run) run the same bootstraps as execution environments.
	childEnv := append(w.env.Environ(), "AWS_ENDPOINT_URL="+awsEndpoint(t), "AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "IDEMCTL_BOOTSTRAPS="+bootDir, "IDEMPOTENCY_MODE="+mode.String())
	const childReapEvery, childGrace = time.Second, time.Second
	args := []string{"run", "--template", "../../template.yaml", "--consumers", "2", "--wait", "1s", "--function-timeout", "3s",
		"--visibility-timeout", "8s", "--reaper-every", childReapEvery.String(), "--retry-after", "1s"}
	rng := rand.New(rand.NewPCG(11, 12))
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(size(5, 30))*time.Minute)
	defer cancel()
	out := &progress{t: t}
	s, err := demo.Run(ctx, demo.Options{
		Env: w.vars, SQS: w.sqs, DynamoDB: w.ddb, Messages: payments, Groups: accounts, Consumers: 1, Seed: 11, Out: out,
		RedriveParked: true, Logs: consumerLog(t), Functions: fns,
		Crash: demo.ChildCrasher(bin, []string{
			"run", "--template", "../../template.yaml", "--consumers", "1", "--no-reaper", "--wait", "1s",
			"--function-timeout", demo.FunctionTimeout.String(), "--visibility-timeout", demo.CrashVisibility.String(),
			"--stall-commit", "2m",
		}, append(childEnv, "LEASE_GRACE="+demo.LeaseGrace.String()), out),
		Chaos: func(ctx context.Context, logs demo.ChildLog) (demo.ChaosResult, error) {
			return demo.Chaos(ctx, demo.ChaosConfig{
				Exe: bin, Args: args, Env: append(childEnv, "LEASE_GRACE="+childGrace.String()), Kills: kills,
				MinUp: 200 * time.Millisecond, MaxUp: 4 * time.Second, Phases: phaseList, PhaseWait: 15 * time.Second,
				Out: out, Logs: logs, Rand: rng,
			})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkSummary(t, s)
	if s.Killed < kills {
		t.Errorf("%d kills, want at least %d", s.Killed, kills)
	}
	for _, p := range append(phaseList, demo.RandomKill) {
		if s.KilledByPhase[p] == 0 {
			t.Errorf("no consumer died at %q", p)
		}
	}
	if mode == idem.ModeLease && s.Reaped == 0 {
		t.Error("no stale lock was reaped")
	}
	// The in-process reaper (every ReapEvery, grace LeaseGrace) runs all along; the
	// processes' reapers (every second, grace 1s) come and go with the kills. A lock is
	// reapable by the in-process reaper at lease end + its grace; the first of its sweeps
	// to start after that (at most SweepGap later) fails it before it ends (at most
	// SweepTook after its start), unless a process's reaper did first. So no lock waits
	// longer than LeaseGrace + SweepGap + SweepTook past its lease end, whoever reaped
	// it. The gap is ReapEvery, or at most ReapEvery + SweepTook when a sweep outlasts
	// the period (the ticker then starts the next at its first tick after): checked too,
	// since the bound rests on it. (A sweep takes longer than the period when it starts
	// the reaper's execution environment cold, or when moto is slow: both seen here.)
	afterEnd := max(s.ReapLate+demo.LeaseGrace, s.ReapLateChildren+childGrace)
	limit := demo.LeaseGrace + s.SweepGap + s.SweepTook
	if afterEnd > limit {
		t.Errorf("a stale lock was reaped %s after its lease ended, more than grace %s + the longest gap between sweeps %s + the longest sweep %s",
			afterEnd, demo.LeaseGrace, s.SweepGap, s.SweepTook)
	}
	if slack := 250 * time.Millisecond; s.SweepGap > demo.ReapEvery+s.SweepTook+slack {
		t.Errorf("%s between two sweeps, more than the period %s + the longest sweep %s: the reaper's schedule slipped", s.SweepGap, demo.ReapEvery, s.SweepTook)
	}
	report(t, "crash injection ("+mode.String()+")",
		"messages / groups", fmtInts(payments, accounts),
		"messages accepted by SQS", s.Sent,
		"consumers killed with SIGKILL", s.Killed,
		"... by phase", phases(s.KilledByPhase),
		"stale locks reaped", s.Reaped,
		"latest reap after its lease ended (limit: grace + longest gap between sweeps + longest sweep)", elapsed(afterEnd)+" ("+elapsed(limit)+")",
		"the in-process reaper's longest gap between sweeps / longest sweep (period)", elapsed(s.SweepGap)+" / "+elapsed(s.SweepTook)+" ("+demo.ReapEvery.String()+")",
		"the processes' reapers' longest sweep", elapsed(s.SweepTookChildren),
		"effects in the tables / distinct messages", fmtInts(s.Applied, s.Distinct),
		"double effects / missing", fmtInts(s.Applied-s.Distinct+len(s.Parked), len(s.Parked)),
		"outbound: messages / for messages / for messages not applied", fmtInts(s.OutboundMessages, s.Outbound, s.OutboundNotApplied),
		"DLQ: bad (sent) / moved by SQS after 5 receives (applied through a copy)", fmtInts(dlq(s), s.BadSent, s.Redriven, s.RedrivenApplied),
		"parked messages redriven from the DLQ / then applied", fmtInts(s.RedriveSent, s.RedriveApplied),
		"time", elapsed(s.Elapsed))
}
