package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/cli"
	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// asIdemctl makes this test binary idemctl itself when it runs as a child (the consumer
// that the crash test kills): no build of cmd/idemctl needed.
const asIdemctl = "IDEMCTL_TEST_AS_MAIN"

func init() {
	if os.Getenv(asIdemctl) == "1" {
		os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv))
	}
}

// TestTraceOfATakeover plays `make demo`'s crash phase with tracing on: a consumer child
// (`idemctl run --stall-commit --trace-file`, its consumer an execution environment of the
// bootstrap) acquires a key's lease and is killed with SIGKILL before its commit
// (demo.ChildCrasher, as the demo kills it); then `idemctl run --trace-file` runs the
// reaper, which fails the dead holder's lease, and a consumer that takes the key over
// and applies it. `idemctl trace KEY` draws both holders: the first, whose delivery
// never ended, reaped (or found taken over by the reaper's sweep); the second, which took it over from the first and committed;
// and says the key was applied once, by attempt 2. The trace file holds neither the key
// nor the body.
func TestTraceOfATakeover(t *testing.T) {
	t.Parallel()
	ex := exampletest.Example(t)
	exampletest.Traffic(t, ex)
	e := upStack(t)
	e["LEASE_GRACE"] = "1s"
	record := filepath.Join(t.TempDir(), "sent.jsonl")
	if r := idemctl(t, e, "send", "--count", "1", "--groups", "1", "--seed", "7", "--record", record); r.code != 0 {
		t.Fatalf("send: %s", r.stderr)
	}
	sent := decodeAll(t, ex, recordLines(t, record))
	if len(sent) != 1 {
		t.Fatalf("sent %d", len(sent))
	}
	m := sent[0]
	traceFile := filepath.Join(t.TempDir(), "spans.jsonl")
	tpl, err := filepath.Abs(templatePath)
	if err != nil {
		t.Fatal(err)
	}

	childEnv := []string{asIdemctl + "=1"}
	for k, v := range e {
		childEnv = append(childEnv, k+"="+v)
	}
	crash := demo.ChildCrasher(os.Args[0], []string{
		"run", "--template", tpl, "--consumers", "1", "--no-reaper", "--wait", "1s", "--function-timeout", "3s",
		"--visibility-timeout", "6s", "--stall-commit", "2m", "--bootstraps", bootstrapsDir, "--trace-file", traceFile,
	}, childEnv, io.Discard)
	if killed, err := crash(context.Background()); err != nil || killed != 1 {
		t.Fatalf("crash: killed %d, %v", killed, err)
	}
	// The takeover's function timeout is long: on a machine loaded by other tests, a 3 s
	// timeout killed the second holder after its commit and before its spans ended.
	r := idemctl(t, e, "run", "--template", templatePath, "--wait", "1s", "--until-idle", "2s", "--function-timeout", "15s",
		"--reaper-every", "1s", "--trace-file", traceFile)
	if r.code != 0 || !strings.Contains(r.stderr, "1 deleted") {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}

	r = idemctl(t, e, "trace", m.Key, "--trace-file", traceFile)
	if r.code != 0 {
		t.Fatalf("trace: exit %d\n%s", r.code, r.stderr)
	}
	out := r.stdout
	t.Logf("idemctl trace:\n%s", out)
	holders := regexp.MustCompile(`(?m)^  attempt (\d)  (\S+) .*$`).FindAllStringSubmatch(out, -1)
	if len(holders) != 2 || holders[0][1] != "1" || holders[1][1] != "2" || holders[0][2] == holders[1][2] {
		t.Fatalf("lease holders %q, want attempt 1 and attempt 2, two holders", holders)
	}
	first, second := holders[0][0], holders[1][0]
	for what, c := range map[string]struct{ line, want string }{
		"the first holder died holding the lease":      {first, "its process died holding it"},
		"the second took it over from the first":       {first, "taken over at "},
		"the second holder was seen acquiring":         {second, "from "},
		"the second holder committed":                  {second, "committed at "},
		"the delivery of the first never ended":        {out, "a delivery whose record span never ended"},
		"the takeover names the first holder":          {out, "taken over from " + holders[0][2]},
		"the record says attempt 2 applied it":         {out, "what happened: applied once, by attempt 2 (" + holders[1][2] + ") at "},
		"the first delivery's acquire is in the trace": {out, "acquired: attempt 1, holder " + holders[0][2]},
	} {
		if !strings.Contains(c.line, c.want) {
			t.Errorf("%s: %q lacks %q", what, c.line, c.want)
		}
	}
	// The reaper (every second) and the redelivery race for the dead lease: the reaper
	// fails it first and the trace says so on the first holder's line, or the redelivery
	// takes it over first and a sweep may still find it moved on. On a loaded machine the
	// redelivery can take it over and commit before any sweep lists it (the reaper lists
	// a lease only past its grace), and then no sweep is in the trace: logged, not failed.
	// A sweep that is in the trace names the first holder.
	reaped := strings.Contains(first, "reaped at ") && strings.Contains(out, "failed the lease of "+holders[0][2])
	movedOn := strings.Contains(out, "the lease of "+holders[0][2]+" had moved on")
	switch {
	case reaped || movedOn:
	case strings.Contains(out, "idem.sweep") || strings.Contains(out, "reaper"):
		t.Errorf("the trace shows the reaper, but neither its reap of the first holder's lease nor finding it moved on")
	default:
		t.Logf("no sweep met the first holder's lease: the redelivery took it over and committed first")
	}
	data := readFile(t, traceFile)
	for _, secret := range []string{m.Key, m.Body} {
		if strings.Contains(data, secret) {
			t.Errorf("the trace file holds %q", secret)
		}
	}
}

// TestInspectShowsTheIngressRecord: a request through the ingress leaves a record of
// its own in INGRESS_TABLE; `idemctl inspect KEY` shows it beside the consumer's (QUEUED,
// its message id), in text and in --json, and `idemctl trace KEY` too; the consumer run
// in this process (run --in-process --trace-file) wrote its spans to the file.
func TestInspectShowsTheIngressRecord(t *testing.T) {
	t.Parallel()
	ex := exampletest.Example(t)
	gen := exampletest.Traffic(t, ex)
	e := upStack(t)
	msgs := gen.Traffic(rand.New(rand.NewPCG(9, 9)), "ir"+awstest.RunID(), 1, 1)
	if err := example.Prepare(context.Background(), ex, awstest.DynamoDB(t), e.lookup, msgs); err != nil {
		t.Fatal(err)
	}
	m := msgs[0]
	cfg, err := ingressapp.FromEnvOf([]example.Example{ex}, e.lookup)
	if err != nil {
		t.Fatal(err)
	}
	app, err := ingressapp.New(cfg, ingressapp.Deps{DynamoDB: awstest.DynamoDB(t), SQS: awstest.SQS(t), Logs: io.Discard, Metrics: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	key := "order-" + awstest.RunID()
	req := ingressapp.LambdaFunctionURLRequest{RawPath: ingressapp.RequestsPath, Body: m.Body, Headers: map[string]string{"idempotency-key": key}}
	req.RequestContext.HTTP.Method = "POST"
	const caller = "arn:aws:iam::000000000000:user/test"
	iam := &events.LambdaFunctionURLRequestContextAuthorizerIAMDescription{UserARN: caller, AccountID: "000000000000"}
	req.RequestContext.Authorizer = &events.LambdaFunctionURLRequestContextAuthorizerDescription{IAM: iam}
	if resp := app.Handle(context.Background(), req); resp.StatusCode != 202 {
		t.Fatalf("POST: %d %s", resp.StatusCode, resp.Body)
	}
	traceFile := filepath.Join(t.TempDir(), "spans.jsonl")
	if r := idemctl(t, e, "run", "--template", templatePath, "--in-process", "--wait", "1s", "--until-idle", "1s", "--no-reaper", "--trace-file", traceFile); r.code != 0 {
		t.Fatalf("run: %s", r.stderr)
	}
	// The ingress keeps and sends the request under its caller's key: the operator names
	// the caller (--http-caller) to find its records.
	ns, ok := ingressapp.Namespace(cfg.KeyScope, iam)
	if !ok {
		t.Fatalf("no namespace for %s in key scope %q", caller, cfg.KeyScope)
	}
	pk, err := idem.RecordKey(e["IDEMPOTENCY_SCOPE"], idem.CallerKey(ns, key), false)
	if err != nil {
		t.Fatal(err)
	}
	r := idemctl(t, e, "inspect", key, "--http-caller", caller)
	if r.code != 0 || !strings.Contains(r.stdout, "the ingress's record") || !regexp.MustCompile(`state\s+QUEUED`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, telemetry.RecordTraceID(pk)) {
		t.Errorf("inspect: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = idemctl(t, e, "inspect", key, "--http-caller", caller, "--json")
	var view struct {
		Status  string `json:"status"`
		Ingress *struct {
			State     string `json:"state"`
			MessageID string `json:"message_id"`
			Attempt   int    `json:"attempt"`
		} `json:"ingress"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &view); err != nil || view.Status != string(persistence.StatusCompleted) || view.Ingress == nil ||
		view.Ingress.State != "QUEUED" || view.Ingress.MessageID == "" || view.Ingress.Attempt != 1 {
		t.Errorf("inspect --json: %v\n%s", err, r.stdout)
	}
	r = idemctl(t, e, "trace", key, "--http-caller", caller)
	if r.code != 0 || !strings.Contains(r.stdout, "no trace file") || !strings.Contains(r.stdout, "what happened: applied once, by attempt 1") ||
		!regexp.MustCompile(`state\s+QUEUED`).MatchString(r.stdout) {
		t.Errorf("trace without a file: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The consumer ran in this process (--in-process): its spans are in the file too.
	r = idemctl(t, e, "trace", key, "--http-caller", caller, "--trace-file", traceFile)
	if r.code != 0 || !strings.Contains(r.stdout, "delivery of message") || !strings.Contains(r.stdout, "acquired: attempt 1, holder ") ||
		!strings.Contains(r.stdout, "DynamoDB.PutItem") {
		t.Errorf("trace of an in-process run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Without INGRESS_TABLE, inspect shows the consumer's record alone.
	delete(e, "INGRESS_TABLE")
	if r := idemctl(t, e, "inspect", key, "--http-caller", caller); r.code != 0 || strings.Contains(r.stdout, "the ingress's record") {
		t.Errorf("inspect without INGRESS_TABLE: exit %d\n%s", r.code, r.stdout)
	}
}

// TestTraceUsage: trace wants one KEY or a well-formed --record, and reads files that
// exist.
func TestTraceUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"trace"}, 2, "want one KEY"},
		{[]string{"trace", "k1", "k2"}, 2, "want one KEY"},
		{[]string{"trace", "k1", "--record", "payments#h:0123456789abcdef"}, 2, "want one KEY"},
		{[]string{"trace", "--record", "payments#k1"}, 2, "is not a record id"},
		{[]string{"trace", "k1"}, 1, "IDEMPOTENCY_SCOPE is not set"},
		{[]string{"trace", "k1", "--scope", "payments", "--trace-file", filepath.Join(t.TempDir(), "none.jsonl")}, 1, "no such file"},
		{[]string{"help", "trace"}, 0, "-trace-file"},
	} {
		r := idemctl(t, env{}, c.args...)
		if r.code != c.code || !strings.Contains(r.stdout+r.stderr, c.out) {
			t.Errorf("idemctl %v: exit %d, want %d and %q in\n%s%s", c.args, r.code, c.code, c.out, r.stdout, r.stderr)
		}
	}
}
