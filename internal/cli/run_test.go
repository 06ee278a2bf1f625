package cli_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/cli"
	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/lambdaenv"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// TestRun sends the example's messages with duplicates, then consumes them with
// `idemctl run` and two consumers until idle: the example's tables hold what the
// distinct messages leave (its Expect against its Read), and `idemctl check` says so.
func TestRun(t *testing.T) {
	t.Parallel()
	ex := exampletest.Example(t)
	exampletest.Traffic(t, ex) // send generates its messages
	checker := exampletest.Checker(t, ex)
	e := upStack(t)
	record := filepath.Join(t.TempDir(), "sent.jsonl")
	if r := idemctl(t, e, "send", "--count", "40", "--groups", "4", "--duplicates", "0.3", "--seed", "11", "--record", record); r.code != 0 {
		t.Fatalf("send: %d\n%s", r.code, r.stderr)
	}
	r := idemctl(t, e, "run", "--template", templatePath, "--consumers", "2", "--until-idle", "2s",
		"--wait", "1s", "--reaper-every", "1s", "--retry-after", "1s")
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "40 deleted") {
		t.Errorf("run summary: %s", lastLine(r.stderr))
	}
	msgs := decodeAll(t, ex, recordLines(t, record))
	if len(msgs) != 40 {
		t.Fatalf("%d messages recorded, want 40", len(msgs))
	}
	checkState(t, checker, e, msgs)
	// stdout carries the consumer's JSON log lines and EMF metrics, as in Lambda.
	if !strings.Contains(r.stdout, `"outcome":"applied"`) || !strings.Contains(r.stdout, `"CloudWatchMetrics"`) {
		t.Errorf("run stdout lacks logs or metrics: %.300s", r.stdout)
	}
	checkCommand(t, ex, checker, e, record)
}

// checkCommand checks `idemctl check` on the stack e, whose tables hold what the
// messages of record leave: it passes; with one more message in the record, sent but
// not consumed, it fails with exit 1 naming what differs.
func checkCommand(t *testing.T, ex example.Example, checker example.Checker, e env, record string) {
	t.Helper()
	c := idemctl(t, e, "check", "--record", record)
	if want := ex.Name() + " check: tables = what the distinct messages sent leave OK"; c.code != 0 || !strings.Contains(c.stdout, want) {
		t.Errorf("check: exit %d, want 0 and %q\n%s%s", c.code, want, c.stdout, c.stderr)
	}
	// The same through $EXAMPLE, which up exported, and through --example.
	if c := idemctl(t, e, "check", "--record", record, "--example", ex.Name()); c.code != 0 {
		t.Errorf("check --example %s: exit %d\n%s", ex.Name(), c.code, c.stderr)
	}

	extra := filepath.Join(t.TempDir(), "more.jsonl")
	if s := idemctl(t, e, "send", "--count", "1", "--groups", "1", "--seed", "99", "--record", extra); s.code != 0 {
		t.Fatalf("send: %s", s.stderr)
	}
	tampered := filepath.Join(t.TempDir(), "tampered.jsonl")
	if err := os.WriteFile(tampered, []byte(readFile(t, record)+readFile(t, extra)), 0o600); err != nil {
		t.Fatal(err)
	}
	c = idemctl(t, e, "check", "--record", tampered)
	if c.code != 1 || !strings.Contains(c.stderr, "the tables differ from what the messages sent leave") {
		t.Fatalf("check with an unconsumed message: exit %d, want 1\n%s", c.code, c.stderr)
	}
	// It names what differs: a value the unconsumed message would have changed.
	sent := decodeAll(t, ex, recordLines(t, record))
	all := decodeAll(t, ex, recordLines(t, tampered))
	before, err := checker.Expect(sent, sent)
	if err != nil {
		t.Fatal(err)
	}
	after, err := checker.Expect(all, all)
	if err != nil {
		t.Fatal(err)
	}
	named := false
	for k, v := range after {
		if before[k] != v && strings.Contains(c.stderr, k+":") {
			named = true
		}
	}
	if !named {
		t.Errorf("check does not name a value the unconsumed message changes (%v):\n%s", demo.CompareState(before, after), c.stderr)
	}
}

func TestRunNeedsEnvironment(t *testing.T) {
	t.Parallel()
	r := idemctl(t, localEnv(t), "run", "--template", templatePath)
	if r.code != 1 || !strings.Contains(r.stderr, "QUEUE_URL is not set") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	r = idemctl(t, env{"QUEUE_URL": "http://127.0.0.1:1/q"}, "run", "--template", templatePath)
	if r.code != 1 || !strings.Contains(r.stderr, "IDEMPOTENCY_TABLE is not set") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
}

// TestDemo runs a small `idemctl demo`, with a real idemctl child process killed with
// SIGKILL mid-batch and four more killed at random moments, and its HTTP phase through
// the ingress: the summary says OK and stale locks were reaped.
func TestDemo(t *testing.T) {
	t.Parallel()
	ex := exampletest.Example(t)
	exampletest.Traffic(t, ex)
	exampletest.Checker(t, ex) // the summary's check
	bin := buildIdemctl(t)
	r := idemctl(t, localEnv(t), "demo", "--template", templatePath, "--example", ex.Name(), "--messages", "60", "--groups", "6",
		"--consumers", "2", "--seed", "5", "--idemctl", bin, "--kills", "4", "--kill-within", "2s", "--logs", filepath.Join(t.TempDir(), "demo.log"))
	if r.code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	line := func(label string, v any) string { return fmt.Sprintf("  %-52s %v\n", label, v) }
	for _, want := range []string{
		line("business effects applied (counted in its tables)", "60 (distinct valid messages: 60)"),
		line("consumers killed (SIGKILL)", 5),
		// The HTTP phase (--http's default: 10 of the 60 messages) through the ingress's
		// bootstrap: every request accepted once and completed.
		line("  accepted (202 or 200) / completed (GET)", "10 / 10"),
		line(ex.Name()+" check: tables = what the applied messages leave", "OK"),
		"demo: OK",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, line("stale locks reaped", 0)) {
		t.Errorf("no stale lock reaped:\n%s", r.stdout)
	}
	// The demo's own consumers and reaper ran as execution environments. (The children
	// run them too, by default; whether a child reaches its crash phase before it is
	// killed from outside depends on timing, so TestCrashInjection checks the phases.)
	if want := "demo: the consumers and the reaper run as Lambda execution environments"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr lacks %q", want)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRunStopsCleanly: cancelling the context (Ctrl-C in main) stops the pollers; the
// command exits 0 with its summary and leaves nothing half-done.
func TestRunStopsCleanly(t *testing.T) {
	t.Parallel()
	exampletest.Traffic(t, exampletest.Example(t)) // send generates its messages
	e := upStack(t)
	if r := idemctl(t, e, "send", "--count", "10", "--groups", "2", "--seed", "3"); r.code != 0 {
		t.Fatalf("send: %s", r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := cli.Main(ctx, []string{"run", "--template", templatePath, "--wait", "1s"}, &stdout, &stderr, e.lookup)
	if code != 0 || time.Since(start) > 15*time.Second || !strings.Contains(stderr.String(), "10 deleted") {
		t.Fatalf("exit %d after %s:\n%s", code, time.Since(start), stderr.String())
	}
}

// TestRedriveAfterAFix plays the operator's path for a message the example's business
// rule refuses (a bad message with a Fix): it is dead-lettered with the example's reason
// and gets no outbound message; `idemctl redrive` and the next `idemctl run` before the
// fix refuse it again the same way and apply nothing; after the fix (the ledger's account
// currency corrected, the inventory's sku restocked) the redriven message is applied
// once, with one outbound message, and the DLQ is empty.
func TestRedriveAfterAFix(t *testing.T) {
	t.Parallel()
	ex := exampletest.Example(t)
	gen := exampletest.Traffic(t, ex)
	checker := exampletest.Checker(t, ex)
	confirms, outboundVar := exampletest.Confirms(ex)
	valid := gen.Traffic(rand.New(rand.NewPCG(3, 3)), "fix", 1, 1)
	var refused example.Bad
	for _, b := range gen.Bad("fix", valid) {
		if _, err := ex.Decode([]byte(b.Body)); err == nil && b.Key != "" && b.Fix != nil {
			refused = b
			break
		}
	}
	if refused.Body == "" {
		t.Skipf("example %s has no bad message a fix can cure", ex.Name())
	}
	e := upStack(t)
	dir := t.TempDir()
	send := func(file, body string, flags ...string) {
		t.Helper()
		path := filepath.Join(dir, file)
		if err := os.WriteFile(path, []byte(body+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if r := idemctl(t, e, append([]string{"send", "--from-file", path}, flags...)...); r.code != 0 {
			t.Fatalf("send: %d\n%s", r.code, r.stderr)
		}
	}
	run := func() {
		t.Helper()
		if r := idemctl(t, e, "run", "--template", templatePath, "--consumers", "1", "--until-idle", "2s", "--wait", "1s"); r.code != 0 {
			t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
		}
	}
	outbound := func() int {
		t.Helper()
		if confirms == nil {
			return -1
		}
		return len(receiveAll(t, e[outboundVar]))
	}
	parked := func(when string) {
		t.Helper()
		dry := idemctl(t, e, "redrive", "--dry-run")
		if !strings.Contains(dry.stdout, "1 messages would move") || !strings.Contains(dry.stdout, refused.Reason) {
			t.Fatalf("%s: the DLQ does not hold the refused message with the example's reason %q:\n%s%s", when, refused.Reason, dry.stdout, dry.stderr)
		}
	}
	send("valid.jsonl", valid[0].Body, "--prepare") // what it needs (the inventory's stock); the refused one gets nothing
	run()
	if n := outbound(); n != 1 && n != -1 {
		t.Fatalf("%d outbound messages for one valid message, want 1", n)
	}
	send("refused.jsonl", refused.Body)
	run()
	parked("after the first run")
	if n := outbound(); n > 0 {
		t.Fatalf("%d outbound messages for a refused message", n)
	}
	if r := idemctl(t, e, "redrive"); r.code != 0 || !strings.Contains(r.stdout, "moved 1 messages") {
		t.Fatalf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	run()
	parked("after the redrive")
	if n := outbound(); n > 0 {
		t.Fatalf("%d outbound messages after the redrive of a refused message", n)
	}
	checkState(t, checker, e, valid)

	// The operator removes the cause, then redrives: applied once, one outbound message,
	// nothing left in the DLQ.
	if err := refused.Fix(context.Background(), awstest.DynamoDB(t), e.lookup); err != nil {
		t.Fatal(err)
	}
	if r := idemctl(t, e, "redrive"); r.code != 0 || !strings.Contains(r.stdout, "moved 1 messages") {
		t.Fatalf("redrive after the fix: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	run()
	if n := outbound(); n != 1 && n != -1 {
		t.Fatalf("%d outbound messages after the fix and the redrive, want 1", n)
	}
	if r := idemctl(t, e, "redrive", "--dry-run"); !strings.Contains(r.stdout, "0 messages would move") {
		t.Fatalf("DLQ after the fix and the redrive:\n%s%s", r.stdout, r.stderr)
	}
	got, err := checker.Read(context.Background(), awstest.DynamoDB(t), e.lookup)
	if err != nil {
		t.Fatal(err)
	}
	if got.Applied != len(valid)+1 {
		t.Fatalf("%d effects in the tables after the fix and the redrive, want %d: the refused message applied once", got.Applied, len(valid)+1)
	}
}

// checkState checks that the example's tables hold what applied leave, each applied
// once.
func checkState(t *testing.T, checker example.Checker, e env, applied []example.Message) {
	t.Helper()
	want, err := checker.Expect(applied, applied)
	if err != nil {
		t.Fatal(err)
	}
	got, err := checker.Read(context.Background(), awstest.DynamoDB(t), e.lookup)
	if err != nil {
		t.Fatal(err)
	}
	if diffs := demo.CompareState(want, got.State); len(diffs) > 0 || got.Applied != len(applied) {
		t.Fatalf("tables: %d effects counted, want %d; differences:\n%s", got.Applied, len(applied), strings.Join(diffs, "\n"))
	}
}

// TestConsumerInitErrorReported: the consumer's bootstrap, given a function timeout that
// leaves no time for a record, fails its init as Lambda has runtimes report it (a post
// to /runtime/init/error), and the invocation fails with that error.
func TestConsumerInitErrorReported(t *testing.T) {
	t.Parallel()
	e, err := lambdaenv.New(lambdaenv.Function{
		Name: "ConsumerFunction", Bin: filepath.Join(bootstrapsDir, "consumer", "bootstrap"), Timeout: 10 * time.Second,
		Env: initEnv(t, "FUNCTION_TIMEOUT=2s"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }()
	_, err = e.Invoke(context.Background(), []byte(`{"Records":[]}`))
	var ie *lambdaenv.InitError
	if !errors.As(err, &ie) || ie.Type != "ConfigError" || !strings.Contains(ie.Message, "FUNCTION_TIMEOUT 2s is not more than DEADLINE_MARGIN 2s") {
		t.Fatalf("invoke: %v, want the consumer's init error", err)
	}
}

// initEnv is the consumer's environment as the template gives it, with the example
// under test wired: its parameters' defaults, a queue URL for each queue and a name
// for each table, then extra.
func initEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	tpl := templateFor(t, exampletest.Example(t))
	var out []string
	for _, v := range tpl.Env("ConsumerFunction") {
		value, ok := tpl.Static(v.Value)
		if r, isRes := tpl.Resource(v.Value.Value); !ok && isRes && r.Type == stack.TypeQueue {
			value, ok = "https://sqs.us-east-1.amazonaws.com/123456789012/"+r.ID+".fifo", true
		}
		if !ok {
			value = "t-" + v.Name
		}
		out = append(out, v.Name+"="+value)
	}
	return append(out, extra...)
}
