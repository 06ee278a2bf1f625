package cli_test

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/gateway"
	"github.com/idemgo/sqs-lambda-consumer/internal/lambdaenv"
)

// idemctlBinary builds cmd/idemctl once per test binary (with the bootstraps' flags): the
// processes that kill themselves (run --crash-at) and the demo's children.
// TestMain removes its directory (idemctlDir).
var idemctlBinary = sync.OnceValues(func() (string, error) {
	dir, bins, err := lambdaenv.BuildTemp(context.Background(), "../..", "./cmd/idemctl")
	if err != nil {
		return "", err
	}
	idemctlDir = dir
	return bins[0], nil
})

var idemctlDir string

func buildIdemctl(t *testing.T) string {
	t.Helper()
	bin, err := idemctlBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// callerExample is the build's first example that calls an outside service in a step
// (example.Caller), or skips the test.
func callerExample(t *testing.T) example.Example {
	t.Helper()
	for _, ex := range wiring.Examples {
		if len(example.ServicesOf(ex)) > 0 {
			return ex
		}
	}
	t.Skip("the build has no example that calls an outside service (example.Caller)")
	return nil
}

// TestCrashAtEveryPhaseCallsOnce: for each phase of `idemctl run --crash-at`, a consumer
// process of an example that calls an outside service in a step kills itself (SIGKILL) at
// the phase, and `idemctl run` then consumes what it left. The services' stand-ins
// (internal/gateway) see no more calls than the steps the records hold, but at
// step-called, where the process dies after a call and before its step is recorded, and
// the takeover calls again with the same key, which the service answers from its first
// call: one more. Every message is applied once, with one outbound message by key. The
// records are handled one at a time
// (MAX_CONCURRENCY=1), so a kill catches no other record between its call and its
// recording.
func TestCrashAtEveryPhaseCallsOnce(t *testing.T) {
	t.Parallel()
	ex := callerExample(t)
	bin := buildIdemctl(t)
	for _, phases := range [][]string{
		{demo.PhaseAcquire, demo.PhaseReap}, // the reap needs the lock an acquire crash leaves
		{demo.PhaseStepCalled}, {demo.PhaseStepRecorded}, {demo.PhaseCommit}, {demo.PhaseSent},
	} {
		t.Run(strings.Join(phases, "+"), func(t *testing.T) {
			t.Parallel()
			crashAtPhases(t, ex, bin, phases)
		})
	}
	// Every phase is tried, in a lease mode with steps.
	if got, want := len(demo.PhasesOf(idem.ModeLease.String(), true)), 6; got != want {
		t.Errorf("%d crash phases, the test covers %d", got, want)
	}
}

func crashAtPhases(t *testing.T, ex example.Example, bin string, phases []string) {
	gen, checker := exampletest.Traffic(t, ex), exampletest.Checker(t, ex)
	services := example.ServicesOf(ex)
	e := localEnv(t)
	r := idemctl(t, e, "up", "--template", templatePath, "--example", ex.Name(), "--stack", stackName(t))
	if r.code != 0 {
		t.Fatalf("up: exit %d\n%s", r.code, r.stderr)
	}
	maps.Copy(e, parseExports(t, r.stdout))
	gws := map[string]*gateway.Server{}
	for _, name := range services {
		g, err := gateway.Start("", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		gws[name], e[name] = g, g.URL()
	}
	e["MAX_CONCURRENCY"], e["LEASE_GRACE"] = "1", "1s"
	msgs := gen.Traffic(rand.New(rand.NewPCG(5, uint64(len(phases[0])))), "c"+phases[0][:2], 3, 3)
	file := filepath.Join(t.TempDir(), "sent.jsonl")
	var lines []string
	for _, m := range msgs {
		lines = append(lines, m.Body)
	}
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := idemctl(t, e, "send", "--from-file", file, "--prepare"); r.code != 0 {
		t.Fatalf("send: exit %d\n%s", r.code, r.stderr)
	}
	for _, phase := range phases {
		// The reap needs the reaper to list the lease an acquire crash left before a
		// redelivery takes it over: a redelivery may take a lease at its end, the reaper
		// only Grace (LEASE_GRACE, 1s) after it. So the records this run answers in
		// progress come back after the visibility timeout (10s), not 2s later (CI at
		// e340e19: the redelivery took the lease 0.8s before the reaper's next sweep).
		retryAfter := "1s"
		if phase == demo.PhaseReap {
			retryAfter = "10s"
		}
		cmd := exec.Command(bin, "run", "--template", templatePath, "--consumers", "1", "--wait", "1s", "--function-timeout", "3s",
			"--visibility-timeout", "10s", "--reaper-every", "1s", "--retry-after", retryAfter, "--until-idle", "20s", "--crash-at", phase)
		cmd.Env = os.Environ()
		for k, v := range e {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || !strings.Contains(string(out), demo.CrashMarker+" "+phase) {
			t.Fatalf("run --crash-at %s: %v, want it killed at the phase\n%s", phase, err, out)
		}
	}
	if r := idemctl(t, e, "run", "--template", templatePath, "--consumers", "1", "--wait", "1s", "--function-timeout", "3s",
		"--reaper-every", "1s", "--retry-after", "1s", "--until-idle", "3s"); r.code != 0 {
		t.Fatalf("run after the crash: exit %d\n%s", r.code, r.stderr)
	}

	// The services: what the contract promises any type. A step's call is made again
	// only when a consumer died between the call and the step's record, which a crash at
	// step-called does once: at most one call more than the steps the records hold, and
	// at most one key called again (with its key, answered from its first call). Each
	// key called is applied once.
	again := 0
	if phases[0] == demo.PhaseStepCalled {
		again = 1
	}
	calls, repeated := 0, 0
	for name, g := range gws {
		tally := gateway.Count(g.Calls())
		calls, repeated = calls+tally.Calls, repeated+len(tally.Repeated)
		if tally.Applied != tally.Keys || tally.Conflicts != 0 {
			t.Errorf("%s after a crash at %v: %d keys called, %d applied, %d conflicts; want each applied once", name, phases, tally.Keys, tally.Applied, tally.Conflicts)
		}
		for _, c := range g.Calls() {
			if c.Outcome != gateway.Applied && c.Outcome != gateway.Replayed {
				t.Errorf("%s: call %+v", name, c)
			}
		}
	}
	if steps := recordedSteps(t, e, msgs); calls < 1 || calls > steps+again || repeated > again {
		t.Errorf("after a crash at %v: %d calls to the services, %d keys called again; want 1 to the %d steps the records hold + %d, and at most %d called again",
			phases, calls, repeated, steps, again, again)
	}
	checkState(t, checker, e, msgs)
	// One outbound message per payout, by its idempotency-key: a standard queue delivers
	// a resend (a crash between the send and its mark), which receivers drop by that key;
	// a FIFO queue drops it itself.
	if confirms, name := exampletest.Confirms(ex); confirms != nil {
		seen, keys := map[string]int{}, map[string]map[string]bool{}
		for _, m := range receiveAll(t, e[name]) {
			id, _ := confirms(aws.ToString(m.Body))
			seen[id]++
			if keys[id] == nil {
				keys[id] = map[string]bool{}
			}
			keys[id][aws.ToString(m.MessageAttributes[idem.KeyAttribute].StringValue)] = true
		}
		fifo := strings.HasSuffix(e[name], ".fifo")
		for _, m := range msgs {
			if len(keys[m.ID]) != 1 || (fifo && seen[m.ID] != 1) {
				t.Errorf("after a crash at %v: %d outbound messages for %s under keys %v, want one key (and one message on a FIFO queue)", phases, seen[m.ID], m.ID, keys[m.ID])
			}
		}
	}
}

// recordedSteps is the number of steps the records of msgs hold.
func recordedSteps(t *testing.T, e env, msgs []example.Message) int {
	t.Helper()
	c, store := client(t, e)
	n := 0
	for _, m := range msgs {
		pk, err := c.RecordKey(m.Key)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := store.Get(context.Background(), pk, time.Now())
		if err != nil || rec == nil {
			t.Fatalf("the record of %s: %v, %v", m.ID, rec, err)
		}
		n += len(rec.Steps)
	}
	return n
}

// TestLeaseOnlyExampleRefusesTheSingleTransactionMode: the demo of an example whose
// handler cannot run in the single-transaction mode (example.LeaseOnly) refuses
// --mode single-transaction in one line with the example's reason, before it creates
// anything.
func TestLeaseOnlyExampleRefusesTheSingleTransactionMode(t *testing.T) {
	t.Parallel()
	for _, ex := range wiring.Examples {
		lo, ok := ex.(example.LeaseOnly)
		if !ok {
			continue
		}
		r := idemctl(t, env{}, "demo", "--example", ex.Name(), "--mode", "single-transaction")
		if r.code != 1 || !strings.Contains(r.stderr, "cannot run in the single-transaction mode: "+lo.LeaseOnly()) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("demo --example %s --mode single-transaction: exit %d, want 1 and one line with %q:\n%s", ex.Name(), r.code, lo.LeaseOnly(), r.stderr)
		}
		return
	}
	t.Skip("the build has no lease-only example (example.LeaseOnly)")
}
