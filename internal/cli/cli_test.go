package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/cli"
	"github.com/idemgo/sqs-lambda-consumer/internal/lambdaenv"
)

// bootstrapsDir holds the consumer's and the reaper's bootstrap for this host, built once
// for the test binary: `idemctl run` and the demo run them as Lambda execution
// environments (IDEMCTL_BOOTSTRAPS in localEnv).
var bootstrapsDir string

// TestMain builds the bootstraps and points the integration tests at a local endpoint,
// starting moto_server when AWS_ENDPOINT_URL is unset.
func TestMain(m *testing.M) {
	dir, _, err := lambdaenv.BuildTemp(context.Background(), "../..", "./functions/consumer", "./functions/reaper")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bootstrapsDir = dir
	code := awstest.Main(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// env is a command's environment; tests never touch the process's.
type env map[string]string

func (e env) lookup(name string) (string, bool) {
	v, ok := e[name]
	return v, ok
}

// localEnv is the environment of a shell pointed at the test endpoint.
func localEnv(t *testing.T) env {
	return env{"AWS_ENDPOINT_URL": awstest.Endpoint(t), "AWS_REGION": awstest.Region, "IDEMCTL_BOOTSTRAPS": bootstrapsDir}
}

type result struct {
	stdout, stderr string
	code           int
}

// idemctl runs a command line in-process.
func idemctl(t *testing.T, e env, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Main(context.Background(), args, &stdout, &stderr, e.lookup)
	return result{stdout.String(), stderr.String(), code}
}

// upStack runs `idemctl up` for a stack of the test's own and returns the environment
// with the exported variables added, like eval "$(idemctl up)" does. The queues and
// tables are deleted after the test.
func upStack(t *testing.T) env {
	t.Helper()
	e := localEnv(t)
	name := awstest.Name(t, "c")
	if len(name)+len("-DeadLetterQueue.fifo") > 80 {
		t.Fatalf("stack name %s too long for the queue names", name)
	}
	r := idemctl(t, e, "up", "--template", "../../template.yaml", "--stack", name)
	if r.code != 0 {
		t.Fatalf("up: exit %d\n%s", r.code, r.stderr)
	}
	vars := parseExports(t, r.stdout)
	t.Cleanup(func() {
		ctx := context.Background()
		for _, q := range []string{"QUEUE_URL", "DLQ_URL", "RECEIPTS_QUEUE_URL"} {
			_, _ = awstest.SQS(t).DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(vars[q])})
		}
		for _, tb := range []string{"IDEMPOTENCY_TABLE", "LEDGER_TABLE"} {
			_, _ = awstest.DynamoDB(t).DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(vars[tb])})
		}
	})
	maps.Copy(e, vars)
	return e
}

// parseExports reads export NAME='value' lines (values without quotes inside).
func parseExports(t *testing.T, out string) map[string]string {
	t.Helper()
	vars := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		rest, ok := strings.CutPrefix(line, "export ")
		name, quoted, ok2 := strings.Cut(rest, "=")
		if !ok || !ok2 || len(quoted) < 2 || quoted[0] != '\'' || quoted[len(quoted)-1] != '\'' {
			t.Fatalf("not an export line: %q", line)
		}
		vars[name] = quoted[1 : len(quoted)-1]
	}
	return vars
}

func TestUp(t *testing.T) {
	t.Parallel()
	e := localEnv(t)
	name := awstest.Name(t, "c")
	r := idemctl(t, e, "up", "--template", "../../template.yaml", "--stack", name, "--param", "RetentionHours=24")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	vars := parseExports(t, r.stdout)
	t.Cleanup(func() {
		for _, q := range []string{"QUEUE_URL", "DLQ_URL", "RECEIPTS_QUEUE_URL"} {
			_, _ = awstest.SQS(t).DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(vars[q])})
		}
		for _, tb := range []string{"IDEMPOTENCY_TABLE", "LEDGER_TABLE"} {
			_, _ = awstest.DynamoDB(t).DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(vars[tb])})
		}
	})
	names := slices.Sorted(maps.Keys(vars))
	want := []string{"DLQ_URL", "FUNCTION_TIMEOUT", "IDEMPOTENCY_MODE", "IDEMPOTENCY_SCOPE", "IDEMPOTENCY_TABLE", "IDEMPOTENCY_TTL", "INFLIGHT_SHARDS",
		"LEASE_GRACE", "LEDGER_TABLE", "METRICS_NAMESPACE", "QUEUE_URL", "RECEIPTS_QUEUE_URL", "VISIBILITY_TIMEOUT"}
	if !slices.Equal(names, want) {
		t.Errorf("exported %v, want %v", names, want)
	}
	if vars["IDEMPOTENCY_TTL"] != "24h" || !strings.HasSuffix(vars["QUEUE_URL"], name+"-InputQueue.fifo") {
		t.Errorf("values %v", vars)
	}
	for _, want := range []string{"created", "InputQueue", "skipped", "ConsumerFunction"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("progress does not mention %q:\n%s", want, r.stderr)
		}
	}

	// What a shell makes of the output: eval "$(idemctl up)".
	if sh, err := exec.LookPath("sh"); err == nil {
		out, err := exec.Command(sh, "-c", r.stdout+`printf '%s|%s' "$QUEUE_URL" "$LEASE_GRACE"`).Output()
		if err != nil {
			t.Fatalf("sh: %v", err)
		}
		if got := string(out); got != vars["QUEUE_URL"]+"|30s" {
			t.Errorf("after eval: %q", got)
		}
	}

	again := idemctl(t, e, "up", "--template", "../../template.yaml", "--stack", name, "--param", "RetentionHours=24")
	if again.code != 0 || again.stdout != r.stdout || strings.Contains("\n"+again.stderr, "\ncreated") || !strings.Contains(again.stderr, "\nexists") {
		t.Errorf("second up: exit %d, same exports %v\n%s", again.code, again.stdout == r.stdout, again.stderr)
	}
}

func TestUpRefusesWithoutEndpoint(t *testing.T) {
	t.Parallel()
	r := idemctl(t, env{}, "up", "--template", "../../template.yaml")
	if r.code != 1 || !strings.Contains(r.stderr, "AWS_ENDPOINT_URL is not set") {
		t.Errorf("exit %d: %s", r.code, r.stderr)
	}
	r = idemctl(t, localEnv(t), "up", "--template", "nope.yaml")
	if r.code != 1 || !strings.Contains(r.stderr, "nope.yaml") || !strings.Contains(r.stderr, "--template") {
		t.Errorf("missing template: exit %d: %s", r.code, r.stderr)
	}
	r = idemctl(t, localEnv(t), "up", "--template", "../../template.yaml", "--param", "Nope=1")
	if r.code != 1 || !strings.Contains(r.stderr, "no parameter Nope") {
		t.Errorf("unknown parameter: exit %d: %s", r.code, r.stderr)
	}
}

// receiveAll receives and deletes messages until the queue has been empty for a
// while: FIFO queues hand out a group's next messages only after the first are deleted.
func receiveAll(t *testing.T, queueURL string) []sqstypes.Message {
	t.Helper()
	ctx := context.Background()
	api := awstest.SQS(t)
	var msgs []sqstypes.Message
	for empty := 0; empty < 2; {
		out, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			empty++
			continue
		}
		empty = 0
		for _, m := range out.Messages {
			if _, err := api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(queueURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
		msgs = append(msgs, out.Messages...)
	}
	return msgs
}

func attr(m sqstypes.Message, name string) string {
	if v, ok := m.MessageAttributes[name]; ok {
		return aws.ToString(v.StringValue)
	}
	return ""
}

func TestSend(t *testing.T) {
	t.Parallel()
	e := upStack(t)
	record := filepath.Join(t.TempDir(), "sent.jsonl")
	r := idemctl(t, e, "send", "--count", "25", "--accounts", "3", "--duplicates", "0.2", "--seed", "42", "--record", record)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "sent 30 of 30 messages (25 payments, 5 duplicates)") || !strings.Contains(r.stdout, "0 failed") {
		t.Errorf("summary: %s", r.stdout)
	}

	// SQS dropped the 5 duplicates by their deduplication id: 25 distinct payments.
	msgs := receiveAll(t, e["QUEUE_URL"])
	seen := map[string]ledger.Payment{}
	for _, m := range msgs {
		p, err := ledger.Decode([]byte(aws.ToString(m.Body)))
		if err != nil {
			t.Fatalf("body %s: %v", aws.ToString(m.Body), err)
		}
		if _, dup := seen[p.PaymentID]; dup {
			t.Errorf("payment %s delivered twice", p.PaymentID)
		}
		seen[p.PaymentID] = p
		key := "payment:" + p.PaymentID
		if got := attr(m, idem.KeyAttribute); got != key {
			t.Errorf("%s: key attribute %q, want %q", p.PaymentID, got, key)
		}
		if got := m.Attributes["MessageDeduplicationId"]; got != key {
			t.Errorf("%s: deduplication id %q, want %q", p.PaymentID, got, key)
		}
		if got := m.Attributes["MessageGroupId"]; got != p.AccountID {
			t.Errorf("%s: group %q, want the account %q", p.PaymentID, got, p.AccountID)
		}
		if !slices.Contains([]string{"acct-1", "acct-2", "acct-3"}, p.AccountID) || p.Currency != "EUR" || p.AmountCents < 1 {
			t.Errorf("payment %+v", p)
		}
	}
	if len(msgs) != 25 || len(seen) != 25 {
		t.Fatalf("received %d messages, %d distinct payments; want 25", len(msgs), len(seen))
	}
	for i := 1; i <= 25; i++ {
		if _, ok := seen[fmt.Sprintf("pay-42-%d", i)]; !ok {
			t.Errorf("pay-42-%d missing", i)
		}
	}

	// The record lists each payment sent once: what ExpectedBalances needs.
	data, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	var recorded []ledger.Payment
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var p ledger.Payment
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatal(err)
		}
		if seen[p.PaymentID] != p {
			t.Errorf("recorded %+v, received %+v", p, seen[p.PaymentID])
		}
		recorded = append(recorded, p)
	}
	if len(recorded) != 25 {
		t.Errorf("recorded %d payments, want 25", len(recorded))
	}

	// The same seed gives the same payments.
	again := idemctl(t, e, "send", "--count", "25", "--accounts", "3", "--seed", "42", "--record", record+"2")
	data2, _ := os.ReadFile(record + "2")
	if again.code != 0 || string(data2) != string(data) {
		t.Errorf("send with the same seed: exit %d, same payments %v", again.code, string(data2) == string(data))
	}
}

func TestSendFromFile(t *testing.T) {
	t.Parallel()
	e := upStack(t)
	file := filepath.Join(t.TempDir(), "payments.jsonl")
	lines := `{"payment_id":"f-1","account_id":"a","amount_cents":100,"currency":"EUR"}

{"payment_id":"f-2","account_id":"b","amount_cents":250,"currency":"USD"}
{"payment_id":"f-3","account_id":"a","amount_cents":12.5,"currency":"EUR"}
{"payment_id":"f-4","account_id":"a","amount_cents":7,"currency":"EUR"}
`
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	r := idemctl(t, e, "send", "--from-file", file)
	if r.code != 1 || !strings.Contains(r.stderr, file+":4:") || !strings.Contains(r.stderr, "amount_cents") || !strings.Contains(r.stderr, "nothing sent") {
		t.Fatalf("exit %d, want 1 naming line 4:\n%s", r.code, r.stderr)
	}
	if msgs := receiveAll(t, e["QUEUE_URL"]); len(msgs) != 0 {
		t.Fatalf("%d messages sent from a file with an invalid line", len(msgs))
	}

	r = idemctl(t, e, "send", "--from-file", file, "--skip-invalid")
	if r.code != 0 || !strings.Contains(r.stderr, "skipping 1 invalid lines") {
		t.Fatalf("--skip-invalid: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var ids []string
	for _, m := range receiveAll(t, e["QUEUE_URL"]) {
		p, err := ledger.Decode([]byte(aws.ToString(m.Body)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.PaymentID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"f-1", "f-2", "f-4"}) {
		t.Errorf("sent %v", ids)
	}

	if r := idemctl(t, e, "send", "--from-file", file, "--count", "3"); r.code != 2 {
		t.Errorf("--from-file with --count: exit %d", r.code)
	}
}

func TestSendNeedsQueue(t *testing.T) {
	t.Parallel()
	r := idemctl(t, localEnv(t), "send", "--count", "1")
	if r.code != 1 || !strings.Contains(r.stderr, `QUEUE_URL is not set: run eval "$(idemctl up)"`) {
		t.Errorf("exit %d: %s", r.code, r.stderr)
	}
	e := localEnv(t)
	e["QUEUE_URL"] = awstest.Endpoint(t) + "/123456789012/" + awstest.Name(t, "missing") + ".fifo"
	r = idemctl(t, e, "send", "--count", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "not found: run idemctl up") {
		t.Errorf("missing queue: exit %d: %s", r.code, r.stderr)
	}
}

// client returns an idem client on the stack's idempotency table, as the consumer has.
func client(t *testing.T, e env) (*idem.Client, *idem.DynamoStore) {
	t.Helper()
	store, err := idem.NewDynamoStore(awstest.DynamoDB(t), e["IDEMPOTENCY_TABLE"])
	if err != nil {
		t.Fatal(err)
	}
	c, err := idem.New(idem.Config{Store: store, Scope: "payments", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return c, store
}

func TestInspect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := upStack(t)
	c, _ := client(t, e)
	key := "payment:pay-i-1"
	if _, err := c.Do(ctx, &idem.Request{Key: key, Payload: []byte(`{"a":1}`)}, func(ctx context.Context, req *idem.Request) (idem.Result, error) {
		if err := req.Attempt.Step(ctx, "receipt", func(context.Context) error { return nil }); err != nil {
			return idem.Result{}, err
		}
		return idem.Result{Response: []byte(`{"ok":true}`)}, nil
	}); err != nil {
		t.Fatal(err)
	}

	r := idemctl(t, e, "inspect", key)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"payments#" + key, "COMPLETED", "attempt", "receipt", "11 bytes", "left)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect output does not show %q:\n%s", want, r.stdout)
		}
	}

	r = idemctl(t, e, "inspect", key, "--json") // flags after the key work too
	if r.code != 0 {
		t.Fatalf("--json: exit %d: %s", r.code, r.stderr)
	}
	var v struct {
		Record        string    `json:"record"`
		Status        string    `json:"status"`
		Attempt       int       `json:"attempt"`
		LeaseToken    string    `json:"lease_token"`
		Steps         []string  `json:"steps"`
		ExpiresAt     time.Time `json:"expires_at"`
		Expired       bool      `json:"expired"`
		ResponseBytes int       `json:"response_bytes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if v.Record != "payments#"+key || v.Status != "COMPLETED" || v.Attempt != 1 || v.Expired || v.ResponseBytes != 11 ||
		!slices.Equal(v.Steps, []string{"receipt"}) || time.Until(v.ExpiresAt) < 50*time.Minute || !strings.HasSuffix(v.LeaseToken, "…") {
		t.Errorf("inspect --json: %+v", v)
	}

	// A commit whose receipt could not be sent shows it pending, then sent.
	store, err := idem.NewDynamoStore(awstest.DynamoDB(t), e["IDEMPOTENCY_TABLE"])
	if err != nil {
		t.Fatal(err)
	}
	for i, sender := range []idem.SQSBatchSender{refusingSender{}, awstest.SQS(t)} {
		c, err := idem.New(idem.Config{Store: store, Scope: "payments", TTL: time.Hour, Sender: sender, Clock: func() time.Time { return time.Now().Add(time.Duration(i) * time.Hour) }})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Do(ctx, &idem.Request{Key: "payment:pay-i-2", Payload: []byte(`{}`)}, func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Messages: []idem.Message{{QueueURL: e["RECEIPTS_QUEUE_URL"], Body: "receipt", GroupID: "g"}}}, nil
		})
		if (i == 0) == (err == nil) {
			t.Fatalf("delivery %d: %v", i, err)
		}
		want := map[int]string{0: "1 committed, not sent yet (to " + e["RECEIPTS_QUEUE_URL"], 1: "1 sent"}[i]
		if r := idemctl(t, e, "inspect", "payment:pay-i-2"); !strings.Contains(r.stdout, want) {
			t.Errorf("inspect after delivery %d does not say %q:\n%s", i, want, r.stdout)
		}
	}

	r = idemctl(t, e, "inspect", "payment:never-sent")
	if r.code != 1 || !strings.Contains(r.stderr, `no record for key "payment:never-sent" (scope payments)`) {
		t.Errorf("missing key: exit %d: %s", r.code, r.stderr)
	}
	r = idemctl(t, e, "inspect", key, "--scope", "other")
	if r.code != 1 || !strings.Contains(r.stderr, "(scope other)") {
		t.Errorf("other scope: exit %d: %s", r.code, r.stderr)
	}
	e2 := localEnv(t)
	e2["IDEMPOTENCY_TABLE"] = awstest.Name(t, "missing")
	r = idemctl(t, e2, "inspect", key)
	if r.code != 1 || !strings.Contains(r.stderr, "table "+e2["IDEMPOTENCY_TABLE"]+" not found: run idemctl up") {
		t.Errorf("missing table: exit %d: %s", r.code, r.stderr)
	}
	if r := idemctl(t, localEnv(t), "inspect", key); r.code != 1 || !strings.Contains(r.stderr, "IDEMPOTENCY_TABLE is not set") {
		t.Errorf("no table set: exit %d: %s", r.code, r.stderr)
	}
	if r := idemctl(t, e, "inspect"); r.code != 2 {
		t.Errorf("no key: exit %d", r.code)
	}
}

func TestUnlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := upStack(t)
	c, store := client(t, e)
	key := "payment:pay-u-1"
	pk, err := idem.RecordKey("payments", key, false)
	if err != nil {
		t.Fatal(err)
	}
	// A holder that took the lease a moment ago and is still (or was) working.
	now := time.Now()
	if _, created, err := store.Create(ctx, &idem.Record{
		Key: pk, Status: idem.StatusInProgress, LeaseToken: "0123456789abcdef", LeaseUntil: now.Add(time.Minute),
		Inflight: "1", ExpiresAt: now.Add(time.Hour), Attempt: 1, Owner: "stuck-worker", Steps: []string{"receipt"},
		CreatedAt: now, UpdatedAt: now,
	}, now); err != nil || !created {
		t.Fatalf("create: %v, %v", created, err)
	}

	r := idemctl(t, e, "unlock", key, "--reason", "worker stuck")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"unlocked payments#" + key, "was IN_PROGRESS", "stuck-worker", "FAILED, retryable", "attempt 2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("unlock output does not say %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "lease was still live") {
		t.Errorf("no warning about the live lease: %s", r.stderr)
	}
	rec, err := store.Get(ctx, pk, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != idem.StatusFailed || !rec.Retryable || rec.Error != "worker stuck" || rec.Inflight != "" {
		t.Errorf("record after unlock: %+v", rec)
	}

	// Not IN_PROGRESS any more: refused, nothing changed.
	r = idemctl(t, e, "unlock", key)
	if r.code != 1 || !strings.Contains(r.stderr, "refusing to unlock") || !strings.Contains(r.stderr, "FAILED") {
		t.Errorf("second unlock: exit %d: %s", r.code, r.stderr)
	}

	// The next delivery takes the key over and resumes after the recorded step.
	ran := 0
	res, err := c.Do(ctx, &idem.Request{Key: key, Payload: []byte(`{}`)}, func(ctx context.Context, req *idem.Request) (idem.Result, error) {
		ran++
		return idem.Result{}, req.Attempt.Step(ctx, "receipt", func(context.Context) error {
			return errors.New("the receipt step ran again")
		})
	})
	if err != nil || ran != 1 || res.Attempt != 2 {
		t.Errorf("delivery after unlock: ran %d, attempt %d, err %v", ran, res.Attempt, err)
	}

	if r := idemctl(t, e, "unlock", "payment:never-sent"); r.code != 1 || !strings.Contains(r.stderr, "no record for key") {
		t.Errorf("missing key: exit %d: %s", r.code, r.stderr)
	}

	// A permanent failure replays its stored error until the operator clears it.
	bad := "payment:pay-u-2"
	fails := func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{}, idem.Permanent(errors.New("currency XAU not accepted"))
	}
	if _, err := c.Do(ctx, &idem.Request{Key: bad, Payload: []byte(`{}`)}, fails); !idem.IsPermanent(err) {
		t.Fatalf("permanent failure: %v", err)
	}
	r = idemctl(t, e, "unlock", bad, "--reason", "XAU accepted since v2")
	if r.code != 0 || !strings.Contains(r.stdout, "cleared payments#"+bad) || !strings.Contains(r.stdout, "currency XAU not accepted") {
		t.Fatalf("clear: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	ran = 0
	if _, err := c.Do(ctx, &idem.Request{Key: bad, Payload: []byte(`{}`)}, func(context.Context, *idem.Request) (idem.Result, error) {
		ran++
		return idem.Result{}, nil
	}); err != nil || ran != 1 {
		t.Errorf("delivery after the clear: ran %d, err %v", ran, err)
	}
}

func TestRedrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := upStack(t)
	api := awstest.SQS(t)
	// Three messages the consumer dead-lettered: keys, groups and an extra attribute.
	dl := &idem.SQSDeadLetter{API: api, QueueURL: e["DLQ_URL"], Source: "test-consumer"}
	type original struct{ id, key, group string }
	originals := []original{{"m-1", "payment:r-1", "acct-1"}, {"m-2", "payment:r-2", "acct-2"}, {"m-3", "payment:r-3", "acct-1"}}
	for _, o := range originals {
		err := dl.DeadLetter(ctx, events.SQSMessage{
			MessageId: o.id, Body: `{"payment_id":"` + o.key + `"}`, EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:input.fifo",
			Attributes: map[string]string{"MessageGroupId": o.group, "MessageDeduplicationId": o.key},
			MessageAttributes: map[string]events.SQSMessageAttribute{
				idem.KeyAttribute: {DataType: "String", StringValue: aws.String(o.key)},
				"trace-id":        {DataType: "String", StringValue: aws.String("trace-" + o.id)},
			},
		}, errors.New("ledger: invalid payment: amount_cents: missing"))
		if err != nil {
			t.Fatal(err)
		}
	}

	dry := idemctl(t, e, "redrive", "--dry-run")
	if dry.code != 0 || !strings.Contains(dry.stdout, "3 messages would move") || strings.Count(dry.stdout, "amount_cents: missing") != 3 ||
		!strings.Contains(dry.stdout, idem.HashKey("payment:r-2")) || strings.Contains(dry.stdout, "payment:r-2") {
		t.Fatalf("dry run: exit %d\n%s%s", dry.code, dry.stdout, dry.stderr)
	}

	r := idemctl(t, e, "redrive")
	if r.code != 0 || !strings.Contains(r.stdout, "moved 3 messages") || !strings.Contains(r.stdout, "0 failed") {
		t.Fatalf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	msgs := receiveAll(t, e["QUEUE_URL"])
	if len(msgs) != 3 {
		t.Fatalf("%d messages in the input queue, want 3", len(msgs))
	}
	for _, m := range msgs {
		key := attr(m, idem.KeyAttribute)
		i := slices.IndexFunc(originals, func(o original) bool { return o.key == key })
		if i < 0 {
			t.Fatalf("message with key %q", key)
		}
		o := originals[i]
		if got := m.Attributes["MessageGroupId"]; got != o.group {
			t.Errorf("%s: group %q, want %q", key, got, o.group)
		}
		if got := m.Attributes["MessageDeduplicationId"]; !strings.HasPrefix(got, "redrive-") || len(got) > 128 {
			t.Errorf("%s: deduplication id %q", key, got)
		}
		if aws.ToString(m.Body) != `{"payment_id":"`+o.key+`"}` || attr(m, "trace-id") != "trace-"+o.id {
			t.Errorf("%s: body %s, trace-id %q", key, aws.ToString(m.Body), attr(m, "trace-id"))
		}
		for name := range m.MessageAttributes {
			if strings.HasPrefix(name, "dlq-") {
				t.Errorf("%s: attribute %s kept", key, name)
			}
		}
	}

	if r := idemctl(t, e, "redrive"); r.code != 0 || !strings.Contains(r.stdout, "moved 0 messages") {
		t.Errorf("second redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := idemctl(t, localEnv(t), "redrive"); r.code != 1 || !strings.Contains(r.stderr, "DLQ_URL is not set") {
		t.Errorf("no DLQ: exit %d: %s", r.code, r.stderr)
	}
}

func TestUnreachableEndpoint(t *testing.T) {
	t.Parallel()
	port, err := awstest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ep := fmt.Sprintf("http://127.0.0.1:%d", port)
	e := env{
		"AWS_ENDPOINT_URL": ep, "QUEUE_URL": ep + "/123456789012/q.fifo", "DLQ_URL": ep + "/123456789012/d.fifo",
		"IDEMPOTENCY_TABLE": "t",
	}
	for _, args := range [][]string{
		{"up", "--template", "../../template.yaml"},
		{"send", "--count", "1"},
		{"inspect", "k"},
		{"unlock", "k"},
		{"redrive"},
	} {
		r := idemctl(t, e, args...)
		if r.code == 0 || !strings.Contains(r.stderr, "cannot reach the AWS endpoint "+ep) {
			t.Errorf("%v: exit %d: %s", args, r.code, r.stderr)
		}
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		code int
		out  string // in stdout or stderr
	}{
		{nil, 2, "commands:"},
		{[]string{"help"}, 0, "redrive"},
		{[]string{"--help"}, 0, "inspect"},
		{[]string{"help", "send"}, 0, "-duplicates"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"send", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"send", "--duplicates", "1.5"}, 2, "--duplicates must be from 0 to 1"},
		{[]string{"inspect", "-h"}, 0, "usage: idemctl inspect KEY"},
		{[]string{"up", "extra"}, 2, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		r := idemctl(t, env{}, tt.args...)
		if r.code != tt.code || !strings.Contains(r.stdout+r.stderr, tt.out) {
			t.Errorf("idemctl %v: exit %d, want %d and %q in\n%s%s", tt.args, r.code, tt.code, tt.out, r.stdout, r.stderr)
		}
	}
}

// refusingSender refuses every SendMessageBatch, as SQS out of reach would.
type refusingSender struct{}

func (refusingSender) SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	return nil, errors.New("connection refused")
}
