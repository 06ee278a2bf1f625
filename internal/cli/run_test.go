package cli_test

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/cli"
	"github.com/idemgo/sqs-lambda-consumer/internal/lambdaenv"
)

// TestRun sends payments with duplicates, then consumes them with `idemctl run` and two
// consumers until idle: every balance equals the sum of the distinct payments.
func TestRun(t *testing.T) {
	e := upStack(t)
	record := filepath.Join(t.TempDir(), "sent.jsonl")
	if r := idemctl(t, e, "send", "--count", "40", "--accounts", "4", "--duplicates", "0.3", "--seed", "11", "--record", record); r.code != 0 {
		t.Fatalf("send: %d\n%s", r.code, r.stderr)
	}
	r := idemctl(t, e, "run", "--template", "../../template.yaml", "--consumers", "2", "--until-idle", "2s",
		"--wait", "1s", "--reaper-every", "1s", "--retry-after", "1s")
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "40 deleted") {
		t.Errorf("run summary: %s", lastLine(r.stderr))
	}
	var payments []ledger.Payment
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, record)), "\n") {
		p, err := ledger.Decode([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		payments = append(payments, p)
	}
	got, err := ledger.Balances(context.Background(), awstest.DynamoDB(t), e["LEDGER_TABLE"])
	if err != nil {
		t.Fatal(err)
	}
	if want := ledger.ExpectedBalances(payments); !maps.Equal(got, want) || len(payments) != 40 {
		t.Fatalf("balances %v, want %v (%d payments)", got, want, len(payments))
	}
	// idemctl check says the same; after one more payment than was consumed, it fails.
	if c := idemctl(t, e, "check", "--record", record); c.code != 0 || !strings.Contains(c.stdout, "every balance = sum of distinct payments OK") {
		t.Errorf("check: exit %d\n%s%s", c.code, c.stdout, c.stderr)
	}
	extra := filepath.Join(t.TempDir(), "more.jsonl")
	if s := idemctl(t, e, "send", "--count", "1", "--accounts", "1", "--seed", "99", "--record", extra); s.code != 0 {
		t.Fatalf("send: %s", s.stderr)
	}
	if err := os.WriteFile(record, []byte(readFile(t, record)+readFile(t, extra)), 0o600); err != nil {
		t.Fatal(err)
	}
	if c := idemctl(t, e, "check", "--record", record); c.code != 1 || !strings.Contains(c.stderr, "balances differ") {
		t.Errorf("check with an unconsumed payment: exit %d\n%s", c.code, c.stderr)
	}
	// stdout carries the consumer's JSON log lines and EMF metrics, as in Lambda.
	if !strings.Contains(r.stdout, `"outcome":"applied"`) || !strings.Contains(r.stdout, `"CloudWatchMetrics"`) {
		t.Errorf("run stdout lacks logs or metrics: %.300s", r.stdout)
	}
}

func TestRunNeedsEnvironment(t *testing.T) {
	r := idemctl(t, localEnv(t), "run", "--template", "../../template.yaml")
	if r.code != 1 || !strings.Contains(r.stderr, "QUEUE_URL is not set") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	r = idemctl(t, env{"QUEUE_URL": "http://127.0.0.1:1/q"}, "run", "--template", "../../template.yaml")
	if r.code != 1 || !strings.Contains(r.stderr, "IDEMPOTENCY_TABLE is not set") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
}

// TestDemo runs a small `idemctl demo`, with a real idemctl child process killed with
// SIGKILL mid-batch and four more killed at random moments: the summary says OK and
// stale locks were reaped.
func TestDemo(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "idemctl")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/idemctl").CombinedOutput(); err != nil {
		t.Fatalf("build idemctl: %v\n%s", err, out)
	}
	r := idemctl(t, localEnv(t), "demo", "--template", "../../template.yaml", "--payments", "60", "--accounts", "6",
		"--consumers", "2", "--seed", "5", "--idemctl", bin, "--kills", "4", "--kill-within", "2s", "--logs", filepath.Join(t.TempDir(), "demo.log"))
	if r.code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"business effects applied (ledger credits)            60 (distinct valid payments: 60)",
		"consumers killed (SIGKILL)                           5", "ledger check: every balance = sum of distinct payments OK", "demo: OK"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "stale locks reaped                                   0\n") {
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
	e := upStack(t)
	if r := idemctl(t, e, "send", "--count", "10", "--accounts", "2", "--seed", "3"); r.code != 0 {
		t.Fatalf("send: %s", r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := cli.Main(ctx, []string{"run", "--template", "../../template.yaml", "--wait", "1s"}, &stdout, &stderr, e.lookup)
	if code != 0 || time.Since(start) > 15*time.Second || !strings.Contains(stderr.String(), "10 deleted") {
		t.Fatalf("exit %d after %s:\n%s", code, time.Since(start), stderr.String())
	}
}

// TestRedriveAfterAFix plays the operator's path for a business rule's refusal: a
// payment to an account opened in the wrong currency is dead-lettered with the ledger's
// reason and gets no receipt; once the account is corrected, `idemctl redrive` and the
// next `idemctl run` apply it once, with one receipt, and nothing else is needed.
func TestRedriveAfterAFix(t *testing.T) {
	ctx := context.Background()
	e := upStack(t)
	ddb := awstest.DynamoDB(t)
	account := func(currency string) {
		t.Helper()
		if _, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e["LEDGER_TABLE"]), Item: map[string]types.AttributeValue{
			"account_id": &types.AttributeValueMemberS{Value: "acct-fix"}, "currency": &types.AttributeValueMemberS{Value: currency},
			"balance_cents": &types.AttributeValueMemberN{Value: "0"}, "payment_count": &types.AttributeValueMemberN{Value: "0"},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	account("EUR") // opened in the wrong currency
	file := filepath.Join(t.TempDir(), "payments.jsonl")
	if err := os.WriteFile(file, []byte(`{"payment_id":"fix-1","account_id":"acct-fix","amount_cents":700,"currency":"USD"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := idemctl(t, e, "send", "--from-file", file); r.code != 0 {
		t.Fatalf("send: %d\n%s", r.code, r.stderr)
	}
	run := func() {
		t.Helper()
		if r := idemctl(t, e, "run", "--template", "../../template.yaml", "--consumers", "1", "--until-idle", "2s", "--wait", "1s"); r.code != 0 {
			t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
		}
	}
	run()
	dry := idemctl(t, e, "redrive", "--dry-run")
	if !strings.Contains(dry.stdout, "currency USD does not match the account's EUR") {
		t.Fatalf("the DLQ message does not carry the ledger's reason:\n%s%s", dry.stdout, dry.stderr)
	}
	if n := len(receiveAll(t, e["RECEIPTS_QUEUE_URL"])); n != 0 {
		t.Fatalf("%d receipts for a refused payment", n)
	}
	account("USD") // the fix
	if r := idemctl(t, e, "redrive"); r.code != 0 || !strings.Contains(r.stdout, "moved 1 messages") {
		t.Fatalf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	run()
	accts, err := ledger.Accounts(ctx, ddb, e["LEDGER_TABLE"])
	if err != nil {
		t.Fatal(err)
	}
	if a := accts["acct-fix"]; a.BalanceCents != 700 || a.Payments != 1 {
		t.Fatalf("account after the redrive: %+v, want 700 from one payment", a)
	}
	if n := len(receiveAll(t, e["RECEIPTS_QUEUE_URL"])); n != 1 {
		t.Fatalf("%d receipts after the redrive, want 1", n)
	}
	if r := idemctl(t, e, "redrive", "--dry-run"); !strings.Contains(r.stdout, "0 messages would move") {
		t.Fatalf("DLQ after the redrive:\n%s", r.stdout)
	}
}

// TestConsumerInitErrorReported: the consumer's bootstrap, given a function timeout that
// leaves no time for a record, fails its init as Lambda has runtimes report it (a post
// to /runtime/init/error), and the invocation fails with that error.
func TestConsumerInitErrorReported(t *testing.T) {
	e, err := lambdaenv.New(lambdaenv.Function{
		Name: "ConsumerFunction", Bin: filepath.Join(bootstrapsDir, "consumer", "bootstrap"), Timeout: 10 * time.Second,
		Env: []string{"IDEMPOTENCY_TABLE=t", "LEDGER_TABLE=l", "DLQ_URL=d", "RECEIPTS_QUEUE_URL=r", "FUNCTION_TIMEOUT=2s"},
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
