package reliability_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/lambdaenv"
	"github.com/idemgo/sqs-lambda-consumer/internal/localfn"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// TestMain: a moto of the suite's own under make test (awstest.MainOwn): the scenarios
// run side by side and load moto, and their checks hold real timing (reaps, fences,
// timeouts) that other packages' load on a shared moto would stretch.
func TestMain(m *testing.M) { os.Exit(awstest.MainOwn(m)) }

// full reports whether the full sizes were asked for (make reliability).
func full() bool { return os.Getenv("RELIABILITY") == "full" }

// parallel lets a scenario run beside the others at the fast sizes (make test): each has
// its own stack, its own consumers and its own clock, and they mostly wait (idle queues,
// visibility timeouts, stalled commits, killed processes), which is time the others can
// use. At the full sizes (make reliability) they run one at a time, as RELIABILITY.md
// measured them: each of them alone loads moto.
//
// Side by side they share one moto, which applies requests one at a time on one core
// (about 100 to 140 a second here), and the checks of real timing (reaps, fences,
// timeouts) need it unsaturated. So a scenario takes load units while it runs, at most
// loadCapacity at once: the duplicate storms and the store faults, at 40-50 requests a
// second, take 2; the others, at about 20, take 1. All seven at once asked moto for about
// 220 a second, and stalled commits, reaps and invocations ran past their deadlines.
func parallel(t *testing.T, load int) {
	if full() {
		return
	}
	t.Parallel()
	running.L.Lock()
	for runningLoad+load > loadCapacity {
		running.Wait()
	}
	runningLoad += load
	running.L.Unlock()
	t.Cleanup(func() {
		running.L.Lock()
		runningLoad -= load
		running.L.Unlock()
		running.Broadcast()
	})
}

const loadCapacity = 4

var (
	running     = sync.NewCond(&sync.Mutex{})
	runningLoad int
)

// size picks the fast or the full size of a scenario.
func size(fast, big int) int {
	if full() {
		return big
	}
	return fast
}

// world is one scenario's own stack (queues and tables from template.yaml, with the
// example under test: EXAMPLE, else the wired one) on moto, and the example's traffic
// and check of its tables: every scenario sends the one and ends with the other, so an
// example without them (example.Traffic, example.Checker) skips the suite.
type world struct {
	ex      example.Example
	env     *stack.Env
	vars    map[string]string
	sqs     *sqs.Client
	ddb     *dynamodb.Client
	gen     example.Traffic
	checker example.Checker
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ex := exampletest.Example(t)
	gen, checker := exampletest.Traffic(t, ex), exampletest.Checker(t, ex)
	st := exampletest.Up(t, ex)
	w := &world{ex: ex, sqs: st.SQS, ddb: st.DynamoDB, env: st.Env, vars: map[string]string{}, gen: gen, checker: checker}
	for _, v := range w.env.Vars {
		w.vars[v.Name] = v.Value
	}
	return w
}

// skipMode skips a scenario whose mode the example under test cannot run in, with the
// example's reason (example.LeaseOnly): before the scenario creates anything.
func skipMode(t *testing.T, mode idem.Mode) {
	t.Helper()
	if err := example.CheckMode(exampletest.Example(t), mode); err != nil {
		t.Skip(err)
	}
}

// progress is where a scenario's progress lines go: the test log.
type progress struct {
	t  *testing.T
	mu sync.Mutex
}

func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		p.t.Log(l)
	}
	return len(b), nil
}

// idemctlBinary builds cmd/idemctl once per test binary (with the bootstraps' flags): the
// consumer processes that the crash scenario kills.
var idemctlBinary = sync.OnceValues(func() (string, error) {
	_, bins, err := lambdaenv.BuildTemp(context.Background(), "../..", "./cmd/idemctl")
	if err != nil {
		return "", err
	}
	return bins[0], nil
})

// bootstraps builds the consumer's and the reaper's bootstrap for this host once per test
// binary: the scenarios run them as Lambda execution environments.
var bootstraps = sync.OnceValues(func() ([2]string, error) {
	dir, err := os.MkdirTemp("", "reliability-bootstraps")
	if err != nil {
		return [2]string{}, err
	}
	c, r, err := localfn.Bootstraps(context.Background(), "../..", dir, io.Discard)
	return [2]string{c, r}, err
})

// functions runs a scenario's local consumers and reaper as Lambda execution
// environments of the bootstraps (demo.Options.Functions), reaching AWS at endpoint.
// It also returns the directory of the bootstraps, for the idemctl children
// (IDEMCTL_BOOTSTRAPS).
func functions(t *testing.T, w *world, endpoint string) (func(int, io.Writer) (demo.Functions, error), string) {
	t.Helper()
	bins, err := bootstraps()
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := stack.LoadFor(exampletest.TemplatePath(), exampletest.Example(t))
	if err != nil {
		t.Fatal(err)
	}
	env := func(k string) (string, bool) {
		if k == "AWS_ENDPOINT_URL" {
			return endpoint, true
		}
		return "", false
	}
	return localfn.DemoFunctions(context.Background(), tpl, bins[0], bins[1], w.vars, env, awstest.Config(t)),
		filepath.Dir(filepath.Dir(bins[0]))
}

// report logs a scenario's figures as a two-column table, for RELIABILITY.md.
func report(t *testing.T, title string, rows ...any) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "\n| %s | |\n|---|---|\n", title)
	for i := 0; i+1 < len(rows); i += 2 {
		fmt.Fprintf(&b, "| %v | %v |\n", rows[i], rows[i+1])
	}
	t.Log(b.String())
}

// checkSummary fails the test unless the outside check passed: the example's tables hold
// what the distinct messages leave, every message applied once, every bad message in the
// DLQ with its reason, every message not applied parked in the DLQ.
func checkSummary(t *testing.T, s demo.Summary) {
	t.Helper()
	var out strings.Builder
	s.Print(&out)
	t.Log(out.String())
	if !s.OK {
		t.Fatalf("the %s check or the DLQ check failed (see the summary above)", s.Example)
	}
	if len(s.Parked) > 0 {
		t.Errorf("%d messages ended in the DLQ unapplied: %v", len(s.Parked), s.Parked)
		showLogs(t, s.ParkedKeys)
	}
}

// consumerLog is a file for the consumers' JSON lines; checkSummary shows the lines of
// any message that did not end as expected.
func consumerLog(t *testing.T) io.Writer {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "consumers.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	logFiles.Store(t.Name(), f.Name())
	return f
}

var logFiles sync.Map // test name → consumer log path

// showLogs logs the consumer lines about the keys (a line names a key by its hash).
func showLogs(t *testing.T, keys []string) {
	path, ok := logFiles.Load(t.Name())
	if !ok {
		return
	}
	b, err := os.ReadFile(path.(string))
	if err != nil {
		return
	}
	for _, key := range keys {
		h := idem.HashKey(key)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, h) {
				t.Logf("%s: %s", key, l)
			}
		}
	}
}

func elapsed(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }

// awsEndpoint is the local endpoint the consumer processes must use too.
func awsEndpoint(t *testing.T) string { return awstest.Endpoint(t) }
