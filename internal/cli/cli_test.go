package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
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
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/cli"
	"github.com/idemgo/sqs-lambda-consumer/internal/envconf"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest/minimal"
	"github.com/idemgo/sqs-lambda-consumer/internal/lambdaenv"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

const templatePath = "../../template.yaml"

// bootstrapsDir holds the consumer's, the reaper's and the ingress's bootstrap for this
// host, built once for the test binary: `idemctl run`, `idemctl serve` and the demo run
// them as Lambda execution environments (IDEMCTL_BOOTSTRAPS in localEnv).
var bootstrapsDir string

// TestMain builds the bootstraps and points the integration tests at a local endpoint,
// starting moto_server when AWS_ENDPOINT_URL is unset.
func TestMain(m *testing.M) {
	dir, _, err := lambdaenv.BuildTemp(context.Background(), "../..", "./functions/consumer", "./functions/reaper", "./functions/ingress")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bootstrapsDir = dir
	code := awstest.Main(m)
	_ = os.RemoveAll(dir)
	if idemctlDir != "" {
		_ = os.RemoveAll(idemctlDir)
	}
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

// upStack runs `idemctl up` for the example under test (exampletest.Example) and a
// stack of the test's own, and returns the environment with the exported variables
// added, like eval "$(idemctl up)" does. The queues and tables are deleted after the
// test.
func upStack(t *testing.T, params ...string) env {
	t.Helper()
	e := localEnv(t)
	name := stackName(t)
	args := []string{"up", "--template", templatePath, "--example", exampletest.Example(t).Name(), "--stack", name}
	for _, p := range params {
		args = append(args, "--param", p)
	}
	r := idemctl(t, e, args...)
	if r.code != 0 {
		t.Fatalf("up: exit %d\n%s", r.code, r.stderr)
	}
	maps.Copy(e, parseExports(t, r.stdout))
	return e
}

// stackName returns a stack name unique to the test, short enough for SQS's 80
// characters with "-DeadLetterQueue.fifo" appended, and deletes the stack's queues and
// tables after the test.
func stackName(t *testing.T) string {
	t.Helper()
	name := awstest.Name(t, "c")
	if len(name)+len("-DeadLetterQueue.fifo") > 80 {
		t.Fatalf("stack name %s too long for the queue names", name)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		queues, tables := listStack(t, name)
		for _, q := range queues {
			_, _ = awstest.SQS(t).DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q)})
		}
		for _, tb := range tables {
			_, _ = awstest.DynamoDB(t).DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(tb)})
		}
	})
	return name
}

// listStack returns the URLs of the queues and the names of the tables of the stack
// name on the endpoint: those named <stack>-<LogicalId>.
func listStack(t *testing.T, name string) (queues, tables []string) {
	t.Helper()
	ctx := context.Background()
	qs, err := awstest.SQS(t).ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(name + "-")})
	if err != nil {
		t.Fatal(err)
	}
	queues = qs.QueueUrls
	var start *string
	for {
		out, err := awstest.DynamoDB(t).ListTables(ctx, &dynamodb.ListTablesInput{ExclusiveStartTableName: start})
		if err != nil {
			t.Fatal(err)
		}
		for _, tb := range out.TableNames {
			if strings.HasPrefix(tb, name+"-") {
				tables = append(tables, tb)
			}
		}
		if start = out.LastEvaluatedTableName; start == nil {
			return queues, tables
		}
	}
}

// stackIDs returns the logical ids of the stack's queues and tables, from their names.
func stackIDs(t *testing.T, name string) []string {
	t.Helper()
	queues, tables := listStack(t, name)
	var ids []string
	for _, q := range queues {
		ids = append(ids, strings.TrimSuffix(strings.TrimPrefix(q[strings.LastIndex(q, "/")+1:], name+"-"), ".fifo"))
	}
	for _, tb := range tables {
		ids = append(ids, strings.TrimPrefix(tb, name+"-"))
	}
	slices.Sort(ids)
	return ids
}

// templateFor reads template.yaml with ex's block in it (example.Wire).
func templateFor(t *testing.T, ex example.Example) *exampletest.Template {
	t.Helper()
	data, err := os.ReadFile(exampletest.TemplatePath())
	if err != nil {
		t.Fatal(err)
	}
	wired, err := example.Wire(data, ex)
	if err != nil {
		t.Fatal(err)
	}
	return exampletest.ReadTemplate(t, wired)
}

// storeIDs returns the logical ids of the template's queues and tables, sorted.
func storeIDs(tpl *exampletest.Template) []string {
	return slices.Sorted(slices.Values(tpl.OfType(stack.TypeQueue, stack.TypeTable)))
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
	ex := exampletest.Example(t)
	name := stackName(t)
	r := idemctl(t, e, "up", "--template", templatePath, "--example", ex.Name(), "--stack", name, "--param", "RetentionHours=24")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	vars := parseExports(t, r.stdout)
	// The functions' variables the template gives, QUEUE_URL and the local secret's value.
	tpl := templateFor(t, ex)
	names := slices.Sorted(maps.Keys(vars))
	want := slices.Sorted(slices.Values(append(tpl.VarNames(), stack.QueueURLVar, stack.SecretValueVar)))
	if !slices.Equal(names, want) {
		t.Errorf("exported %v, want the template's %v", names, want)
	}
	if vars["IDEMPOTENCY_TTL"] != "24h" || !strings.HasSuffix(vars["QUEUE_URL"], name+"-InputQueue.fifo") || vars[example.Var] != ex.Name() {
		t.Errorf("values %v", vars)
	}
	if scope := vars["IDEMPOTENCY_SCOPE"]; scope == "" || scope != tpl.Defaults["ScopeName"] {
		t.Errorf("IDEMPOTENCY_SCOPE %q, want the ScopeName default %q", scope, tpl.Defaults["ScopeName"])
	}
	// The template's queues and tables, and nothing else.
	if got, want := stackIDs(t, name), storeIDs(tpl); !slices.Equal(got, want) {
		t.Errorf("up created %v, want the template's queues and tables %v", got, want)
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

	again := idemctl(t, e, "up", "--template", templatePath, "--example", ex.Name(), "--stack", name, "--param", "RetentionHours=24")
	if again.code != 0 || again.stdout != r.stdout || strings.Contains("\n"+again.stderr, "\ncreated") || !strings.Contains(again.stderr, "\nexists") {
		t.Errorf("second up: exit %d, same exports %v\n%s", again.code, again.stdout == r.stdout, again.stderr)
	}
}

func TestUpRefusesWithoutEndpoint(t *testing.T) {
	t.Parallel()
	r := idemctl(t, env{}, "up", "--template", templatePath)
	if r.code != 1 || !strings.Contains(r.stderr, "AWS_ENDPOINT_URL is not set") {
		t.Errorf("exit %d: %s", r.code, r.stderr)
	}
	r = idemctl(t, localEnv(t), "up", "--template", "nope.yaml")
	if r.code != 1 || !strings.Contains(r.stderr, "nope.yaml") || !strings.Contains(r.stderr, "--template") {
		t.Errorf("missing template: exit %d: %s", r.code, r.stderr)
	}
	r = idemctl(t, localEnv(t), "up", "--template", templatePath, "--param", "Nope=1")
	if r.code != 1 || !strings.Contains(r.stderr, "no parameter Nope") {
		t.Errorf("unknown parameter: exit %d: %s", r.code, r.stderr)
	}
}

// TestUpExample: `idemctl up --example NAME` creates the queues and tables of the
// template with NAME's block (the machinery's and the block's), exports the
// consumer's variables for it and EXAMPLE=NAME; an unknown name is a usage error that
// lists the known ones.
func TestUpExample(t *testing.T) {
	t.Parallel()
	for _, ex := range wiring.Examples {
		t.Run(ex.Name(), func(t *testing.T) {
			t.Parallel()
			name := stackName(t)
			r := idemctl(t, localEnv(t), "up", "--template", templatePath, "--example", ex.Name(), "--stack", name)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			vars := parseExports(t, r.stdout)
			if vars[example.Var] != ex.Name() {
				t.Errorf("%s=%q, want %s", example.Var, vars[example.Var], ex.Name())
			}
			tm, err := stack.LoadFor(templatePath, ex)
			if err != nil {
				t.Fatal(err)
			}
			fn, err := tm.Function("ConsumerFunction")
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range fn.VarNames {
				if _, ok := vars[v]; !ok {
					t.Errorf("the consumer's %s is not exported", v)
				}
			}
			// What stack.LoadFor reads: template.yaml with the block swapped in.
			tpl := templateFor(t, ex)
			if got, want := stackIDs(t, name), storeIDs(tpl); !slices.Equal(got, want) {
				t.Errorf("up created %v, want %v", got, want)
			}
			for _, r := range exampletest.Block(t, ex).Resources {
				if (r.Type == stack.TypeQueue || r.Type == stack.TypeTable) && !slices.Contains(stackIDs(t, name), r.ID) {
					t.Errorf("the block's %s was not created", r.ID)
				}
			}
			if _, name := exampletest.Confirms(ex); name != "" && vars[name] == "" {
				t.Errorf("the outbound queue's %s is not exported", name)
			}
		})
	}
	r := idemctl(t, localEnv(t), "up", "--template", templatePath, "--example", "nope")
	if r.code != 2 || !strings.Contains(r.stderr, `unknown example "nope"`) {
		t.Errorf("--example nope: exit %d, want 2: %s", r.code, r.stderr)
	}
	for _, ex := range wiring.Examples {
		if !strings.Contains(r.stderr, ex.Name()) {
			t.Errorf("--example nope: the message does not list %s: %s", ex.Name(), r.stderr)
		}
	}
}

// receiveAll receives and deletes every message of the queue (awstest.Drain).
func receiveAll(t *testing.T, queueURL string) []sqstypes.Message {
	t.Helper()
	msgs, err := awstest.Drain(context.Background(), awstest.SQS(t), queueURL)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func attr(m sqstypes.Message, name string) string {
	if v, ok := m.MessageAttributes[name]; ok {
		return aws.ToString(v.StringValue)
	}
	return ""
}

// decodeAll decodes message bodies as the consumer does, failing the test on one it
// refuses.
func decodeAll(t *testing.T, ex example.Example, bodies []string) []example.Message {
	t.Helper()
	out := make([]example.Message, 0, len(bodies))
	for _, b := range bodies {
		m, err := ex.Decode([]byte(b))
		if err != nil {
			t.Fatalf("body %s: %v", b, err)
		}
		out = append(out, m)
	}
	return out
}

func recordLines(t *testing.T, path string) []string {
	t.Helper()
	return strings.Split(strings.TrimSpace(readFile(t, path)), "\n")
}

func TestSend(t *testing.T) {
	t.Parallel()
	ex := exampletest.Example(t)
	exampletest.Traffic(t, ex) // send generates the example's traffic
	e := upStack(t)
	record := filepath.Join(t.TempDir(), "sent.jsonl")
	r := idemctl(t, e, "send", "--count", "25", "--groups", "3", "--duplicates", "0.2", "--seed", "42", "--record", record)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if want := fmt.Sprintf("sent 30 of 30 messages (25 %s messages, 5 duplicates)", ex.Name()); !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "0 failed") {
		t.Errorf("summary lacks %q: %s", want, r.stdout)
	}

	// SQS dropped the 5 duplicates by their deduplication id: 25 distinct messages, each
	// with its key as attribute and (hashed if need be) as deduplication id, in its group.
	msgs := receiveAll(t, e["QUEUE_URL"])
	seen := map[string]example.Message{}
	groups := map[string]bool{}
	for _, sm := range msgs {
		m := decodeAll(t, ex, []string{aws.ToString(sm.Body)})[0]
		if _, dup := seen[m.ID]; dup {
			t.Errorf("message %s delivered twice", m.ID)
		}
		seen[m.ID] = m
		groups[m.Group] = true
		if got := attr(sm, idem.KeyAttribute); got != m.Key || m.Key == "" {
			t.Errorf("%s: key attribute %q, want %q", m.ID, got, m.Key)
		}
		if got, want := sm.Attributes["MessageDeduplicationId"], outbox.DeduplicationID(m.Key); got != want {
			t.Errorf("%s: deduplication id %q, want %q", m.ID, got, want)
		}
		if got, want := sm.Attributes["MessageGroupId"], outbox.DeduplicationID(m.Group); got != want {
			t.Errorf("%s: group %q, want %q", m.ID, got, want)
		}
	}
	if len(msgs) != 25 || len(seen) != 25 {
		t.Fatalf("received %d messages, %d distinct; want 25", len(msgs), len(seen))
	}
	if len(groups) > 3 {
		t.Errorf("%d groups, want at most --groups 3: %v", len(groups), groups)
	}

	// The record lists each message sent once, its body as sent: what check needs.
	recorded := recordLines(t, record)
	for i, m := range decodeAll(t, ex, recorded) {
		got, ok := seen[m.ID]
		if !ok || got.Key != m.Key || got.Group != m.Group || !sameJSON(got.Body, recorded[i]) {
			t.Errorf("recorded %+v, received %+v", m, got)
		}
	}
	if len(recorded) != 25 {
		t.Errorf("recorded %d messages, want 25", len(recorded))
	}

	// The same seed gives the same messages (--accounts is --groups).
	again := idemctl(t, e, "send", "--count", "25", "--accounts", "3", "--seed", "42", "--record", record+"2")
	if data2 := readFile(t, record+"2"); again.code != 0 || data2 != readFile(t, record) {
		t.Errorf("send with the same seed: exit %d, same messages %v", again.code, data2 == readFile(t, record))
	}

	// Copies past the window: a new deduplication id, so SQS delivers them, with the
	// same key and body. (The same seed's originals are dropped as duplicates.)
	past := idemctl(t, e, "send", "--count", "10", "--groups", "2", "--seed", "43", "--duplicates-past-window", "0.5")
	if want := fmt.Sprintf("sent 15 of 15 messages (10 %s messages, 5 duplicates)", ex.Name()); past.code != 0 || !strings.Contains(past.stdout, want) {
		t.Fatalf("send --duplicates-past-window: exit %d, want %q\n%s%s", past.code, want, past.stdout, past.stderr)
	}
	perKey := map[string]int{}
	for _, sm := range receiveAll(t, e["QUEUE_URL"]) {
		perKey[attr(sm, idem.KeyAttribute)]++
	}
	twice := 0
	for _, n := range perKey {
		if n == 2 {
			twice++
		}
	}
	if len(perKey) != 10 || twice != 5 {
		t.Errorf("received %d keys, %d of them twice; want 10 keys, 5 of them twice: %v", len(perKey), twice, perKey)
	}
}

// sameJSON says whether a and b are the same JSON value.
func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

// invalidBody returns the body of one of the example's bad messages that its Decode
// refuses, and Decode's error.
func invalidBody(t *testing.T, ex example.Example, valid []example.Message) (string, error) {
	t.Helper()
	for _, b := range exampletest.Traffic(t, ex).Bad("x", valid) {
		if _, err := ex.Decode([]byte(b.Body)); err != nil && !strings.Contains(b.Body, "\n") {
			return b.Body, err
		}
	}
	t.Fatalf("example %s has no bad message that Decode refuses", ex.Name())
	return "", nil
}

func TestSendFromFile(t *testing.T) {
	t.Parallel()
	ex := exampletest.Example(t)
	e := upStack(t)
	traffic := exampletest.Traffic(t, ex).Traffic(rand.New(rand.NewPCG(7, 7)), "f", 3, 2)
	bad, badErr := invalidBody(t, ex, traffic)
	file := filepath.Join(t.TempDir(), "messages.jsonl")
	// Line 4 is invalid; line 2 is blank.
	lines := traffic[0].Body + "\n\n" + traffic[1].Body + "\n" + bad + "\n" + traffic[2].Body + "\n"
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	r := idemctl(t, e, "send", "--from-file", file)
	if r.code != 1 || !strings.Contains(r.stderr, file+":4: "+badErr.Error()) || !strings.Contains(r.stderr, "nothing sent") {
		t.Fatalf("exit %d, want 1 naming line 4 (%v):\n%s", r.code, badErr, r.stderr)
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
		ids = append(ids, decodeAll(t, ex, []string{aws.ToString(m.Body)})[0].ID)
	}
	want := []string{traffic[0].ID, traffic[1].ID, traffic[2].ID}
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("sent %v, want %v", ids, want)
	}

	if r := idemctl(t, e, "send", "--from-file", file, "--count", "3"); r.code != 2 {
		t.Errorf("--from-file with --count: exit %d", r.code)
	}
}

func TestSendNeedsQueue(t *testing.T) {
	t.Parallel()
	exampletest.Traffic(t, exampletest.Example(t)) // send generates its message
	r := idemctl(t, localEnv(t), "send", "--count", "1")
	if r.code != 1 || !strings.Contains(r.stderr, `QUEUE_URL is not set: run eval "$(idemctl up)"`) {
		t.Errorf("exit %d: %s", r.code, r.stderr)
	}
	// A missing queue is found before anything is prepared: the example's variables are
	// not set here either, and the queue is what the error names.
	e := localEnv(t)
	e["QUEUE_URL"] = awstest.Endpoint(t) + "/123456789012/" + awstest.Name(t, "missing") + ".fifo"
	r = idemctl(t, e, "send", "--count", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "not found: run idemctl up") {
		t.Errorf("missing queue: exit %d: %s", r.code, r.stderr)
	}
}

// client returns an idem client on the stack's idempotency table, as the consumer has.
func client(t *testing.T, e env) (*idem.Client, *persistence.DynamoStore) {
	t.Helper()
	store, err := persistence.NewDynamoStore(awstest.DynamoDB(t), e["IDEMPOTENCY_TABLE"])
	if err != nil {
		t.Fatal(err)
	}
	c, err := idem.New(idem.Config{Store: store, Scope: e["IDEMPOTENCY_SCOPE"], TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return c, store
}

func TestInspect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := upStack(t)
	scope := e["IDEMPOTENCY_SCOPE"]
	c, _ := client(t, e)
	key := "key:i-1"
	if _, err := c.Do(ctx, &idem.Request{Key: key, Payload: []byte(`{"a":1}`)}, func(ctx context.Context, req *idem.Request) (idem.Result, error) {
		if err := req.Attempt.Step(ctx, "notify", func(context.Context) error { return nil }); err != nil {
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
	for _, want := range []string{scope + "#" + key, "COMPLETED", "attempt", "notify", "11 bytes", "left)"} {
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
	if v.Record != scope+"#"+key || v.Status != "COMPLETED" || v.Attempt != 1 || v.Expired || v.ResponseBytes != 11 ||
		!slices.Equal(v.Steps, []string{"notify"}) || time.Until(v.ExpiresAt) < 50*time.Minute || !strings.HasSuffix(v.LeaseToken, "…") {
		t.Errorf("inspect --json: %+v", v)
	}

	// A commit whose outbound message could not be sent shows it pending, then sent.
	outbound := e["DLQ_URL"] // any queue will do when the example sends nothing
	if _, v := exampletest.Confirms(exampletest.Example(t)); v != "" {
		outbound = e[v]
	}
	store, err := persistence.NewDynamoStore(awstest.DynamoDB(t), e["IDEMPOTENCY_TABLE"])
	if err != nil {
		t.Fatal(err)
	}
	for i, sender := range []outbox.SQSBatchSender{refusingSender{}, awstest.SQS(t)} {
		c, err := idem.New(idem.Config{Store: store, Scope: scope, TTL: time.Hour, Sender: sender, Clock: func() time.Time { return time.Now().Add(time.Duration(i) * time.Hour) }})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Do(ctx, &idem.Request{Key: "key:i-2", Payload: []byte(`{}`)}, func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Messages: []idem.Message{{QueueURL: outbound, Body: "outbound", GroupID: "g"}}}, nil
		})
		if (i == 0) == (err == nil) {
			t.Fatalf("delivery %d: %v", i, err)
		}
		want := map[int]string{0: "1 committed, not sent yet (to " + outbound, 1: "1 sent"}[i]
		if r := idemctl(t, e, "inspect", "key:i-2"); !strings.Contains(r.stdout, want) {
			t.Errorf("inspect after delivery %d does not say %q:\n%s", i, want, r.stdout)
		}
	}

	r = idemctl(t, e, "inspect", "key:never-sent")
	if r.code != 1 || !strings.Contains(r.stderr, `no record for key "key:never-sent" (scope `+scope+`)`) {
		t.Errorf("missing key: exit %d: %s", r.code, r.stderr)
	}
	r = idemctl(t, e, "inspect", key, "--scope", "other")
	if r.code != 1 || !strings.Contains(r.stderr, "(scope other)") {
		t.Errorf("other scope: exit %d: %s", r.code, r.stderr)
	}
	e2 := localEnv(t)
	e2["IDEMPOTENCY_TABLE"], e2["IDEMPOTENCY_SCOPE"] = awstest.Name(t, "missing"), scope
	r = idemctl(t, e2, "inspect", key)
	if r.code != 1 || !strings.Contains(r.stderr, "table "+e2["IDEMPOTENCY_TABLE"]+" not found: run idemctl up") {
		t.Errorf("missing table: exit %d: %s", r.code, r.stderr)
	}
	if r := idemctl(t, localEnv(t), "inspect", key); r.code != 1 || !strings.Contains(r.stderr, "IDEMPOTENCY_TABLE is not set") {
		t.Errorf("no table set: exit %d: %s", r.code, r.stderr)
	}
	// No scope: no default, the consumer's is needed.
	noScope := maps.Clone(e)
	delete(noScope, "IDEMPOTENCY_SCOPE")
	if r := idemctl(t, noScope, "inspect", key); r.code != 1 || !strings.Contains(r.stderr, "IDEMPOTENCY_SCOPE is not set") {
		t.Errorf("no scope set: exit %d: %s", r.code, r.stderr)
	}
	if r := idemctl(t, noScope, "inspect", key, "--scope", scope); r.code != 0 || !strings.Contains(r.stdout, "COMPLETED") {
		t.Errorf("--scope: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if r := idemctl(t, e, "inspect"); r.code != 2 {
		t.Errorf("no key: exit %d", r.code)
	}
}

func TestUnlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := upStack(t)
	scope := e["IDEMPOTENCY_SCOPE"]
	c, store := client(t, e)
	key := "key:u-1"
	pk, err := idem.RecordKey(scope, key, false)
	if err != nil {
		t.Fatal(err)
	}
	// A holder that took the lease a moment ago and is still (or was) working.
	now := time.Now()
	if _, created, err := store.Create(ctx, &persistence.Record{
		Key: pk, Status: persistence.StatusInProgress, LeaseToken: "0123456789abcdef", LeaseUntil: now.Add(time.Minute),
		Inflight: "1", ExpiresAt: now.Add(time.Hour), Attempt: 1, Owner: "stuck-worker", Steps: []string{"notify"},
		CreatedAt: now, UpdatedAt: now,
	}, now); err != nil || !created {
		t.Fatalf("create: %v, %v", created, err)
	}

	r := idemctl(t, e, "unlock", key, "--reason", "worker stuck")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"unlocked " + scope + "#" + key, "was IN_PROGRESS", "stuck-worker", "FAILED, retryable", "attempt 2"} {
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
	if rec.Status != persistence.StatusFailed || !rec.Retryable || rec.Error != "worker stuck" || rec.Inflight != "" {
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
		return idem.Result{}, req.Attempt.Step(ctx, "notify", func(context.Context) error {
			return errors.New("the notify step ran again")
		})
	})
	if err != nil || ran != 1 || res.Attempt != 2 {
		t.Errorf("delivery after unlock: ran %d, attempt %d, err %v", ran, res.Attempt, err)
	}

	if r := idemctl(t, e, "unlock", "key:never-sent"); r.code != 1 || !strings.Contains(r.stderr, "no record for key") {
		t.Errorf("missing key: exit %d: %s", r.code, r.stderr)
	}

	// A permanent failure replays its stored error until the operator clears it.
	bad := "key:u-2"
	fails := func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{}, idem.Permanent(errors.New("rule R7 refused it"))
	}
	if _, err := c.Do(ctx, &idem.Request{Key: bad, Payload: []byte(`{}`)}, fails); !idem.IsPermanent(err) {
		t.Fatalf("permanent failure: %v", err)
	}
	r = idemctl(t, e, "unlock", bad, "--reason", "R7 lifted")
	if r.code != 0 || !strings.Contains(r.stdout, "cleared "+scope+"#"+bad) || !strings.Contains(r.stdout, "rule R7 refused it") {
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
	dl := &sqsmsg.SQSDeadLetter{API: api, QueueURL: e["DLQ_URL"], Source: "test-consumer"}
	type original struct{ id, key, group string }
	originals := []original{{"m-1", "key:r-1", "g-1"}, {"m-2", "key:r-2", "g-2"}, {"m-3", "key:r-3", "g-1"}}
	for _, o := range originals {
		err := dl.DeadLetter(ctx, events.SQSMessage{
			MessageId: o.id, Body: `{"id":"` + o.key + `"}`, EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:input.fifo",
			Attributes: map[string]string{"MessageGroupId": o.group, "MessageDeduplicationId": o.key},
			MessageAttributes: map[string]events.SQSMessageAttribute{
				idem.KeyAttribute: {DataType: "String", StringValue: aws.String(o.key)},
				"trace-id":        {DataType: "String", StringValue: aws.String("trace-" + o.id)},
			},
		}, errors.New("invalid message: field: missing"))
		if err != nil {
			t.Fatal(err)
		}
	}

	dry := idemctl(t, e, "redrive", "--dry-run")
	keys := stackKeys(t, e)
	if dry.code != 0 || !strings.Contains(dry.stdout, "3 messages would move") || strings.Count(dry.stdout, "field: missing") != 3 ||
		!strings.Contains(dry.stdout, keys.LogHash("key:r-2")) || strings.Contains(dry.stdout, "key:r-2") ||
		strings.Count(dry.stdout, e["QUEUE_URL"]) != 4 || strings.Contains(dry.stdout, "g-1") {
		t.Fatalf("dry run: exit %d, want each message's destination (the input queue), the keys' and groups' hashes as logged\n%s%s", dry.code, dry.stdout, dry.stderr)
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
		if aws.ToString(m.Body) != `{"id":"`+o.key+`"}` || attr(m, "trace-id") != "trace-"+o.id {
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
		"IDEMPOTENCY_TABLE": "t", "IDEMPOTENCY_SCOPE": "s",
	}
	commands := [][]string{
		{"up", "--template", templatePath},
		{"inspect", "k"},
		{"unlock", "k"},
		{"redrive"},
	}
	if _, err := example.TrafficOf(exampletest.Example(t)); err == nil {
		commands = append(commands, []string{"send", "--count", "1"}) // it generates its message
	}
	for _, args := range commands {
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
		{[]string{"help", "nosuch"}, 2, `idemctl help: unknown command "nosuch"`},
		{[]string{"help", "send", "run"}, 2, "one command at a time"},
		{[]string{"help", "gateway"}, 0, "-addr"},
		{[]string{"send", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"send", "--duplicates", "1.5"}, 2, "--duplicates and --duplicates-past-window must be from 0 to 1"},
		{[]string{"send", "--duplicates-past-window", "-1"}, 2, "--duplicates and --duplicates-past-window must be from 0 to 1"},
		{[]string{"run", "--crash-at", "nowhere"}, 2, "--crash-at must be one of acquire, reap, step-called, step-recorded, commit, sent"},
		{[]string{"inspect", "-h"}, 0, "usage: idemctl inspect KEY"},
		{[]string{"up", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"up", "--example", "nope"}, 2, `unknown example "nope"`},
		{[]string{"send", "--example", "nope"}, 2, `unknown example "nope"`},
		{[]string{"send", "--example", "nope", "--count", "3"}, 2, wiring.Default().Name()},
		{[]string{"check", "--example", "nope", "--record", "r.jsonl"}, 2, `unknown example "nope"`},
		{[]string{"check"}, 2, "want --record FILE"},
		{[]string{"demo", "--example", "nope"}, 2, `unknown example "nope"`},
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

// TestRedriveOutbound: an outbound message that its queue refused for good was
// dead-lettered, signed, with the queue it was for; once the cause is fixed, redrive
// sends it back to that queue (not to the input queue), one of the stack's (here named
// with --outbound-queue), with its key, its group and none of the dlq-* attributes.
// The same dead letter for a queue that is not the stack's goes to the input queue.
func TestRedriveOutbound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := upStack(t)
	api := awstest.SQS(t)
	out, elsewhere := awstest.FIFOQueue(ctx, t, api, "out", nil), awstest.FIFOQueue(ctx, t, api, "elsewhere", nil)
	dl := &sqsmsg.SQSDeadLetter{API: api, QueueURL: e["DLQ_URL"], Source: "test-consumer", Keys: stackKeys(t, e)}
	m := idem.Message{QueueURL: out, Body: `{"receipt":"r-1"}`, GroupID: "acct-1", Attributes: map[string]string{idem.KeyAttribute: "payments#p-1#0"}}
	if err := dl.DeadLetterOutbound(ctx, m, errors.New("InvalidParameterValue: Message must be shorter than 1024 bytes.")); err != nil {
		t.Fatal(err)
	}
	if dry := idemctl(t, e, "redrive", "--dry-run", "--outbound-queue", out); dry.code != 0 || !strings.Contains(dry.stdout, "1 to "+out) {
		t.Fatalf("dry run: exit %d, want its destination named\n%s%s", dry.code, dry.stdout, dry.stderr)
	}
	if r := idemctl(t, e, "redrive", "--outbound-queue", out); r.code != 0 || !strings.Contains(r.stdout, "moved 1 messages") || !strings.Contains(r.stdout, "1 to "+out) {
		t.Fatalf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if in := receiveAll(t, e["QUEUE_URL"]); len(in) != 0 {
		t.Fatalf("%d messages went to the input queue, want none", len(in))
	}
	got := receiveAll(t, out)
	if len(got) != 1 || aws.ToString(got[0].Body) != m.Body || attr(got[0], idem.KeyAttribute) != "payments#p-1#0" ||
		got[0].Attributes["MessageGroupId"] != "acct-1" || got[0].Attributes["MessageDeduplicationId"] != outbox.DeduplicationID("payments#p-1#0") {
		t.Fatalf("outbound queue holds %+v, want the message with its key, group and deduplication id", got)
	}
	for name := range got[0].MessageAttributes {
		if strings.HasPrefix(name, "dlq-") {
			t.Errorf("attribute %s kept", name)
		}
	}

	// Signed, but for a queue that is not the stack's: the input queue.
	m.QueueURL, m.Attributes[idem.KeyAttribute] = elsewhere, "payments#p-2#0"
	if err := dl.DeadLetterOutbound(ctx, m, errors.New("InvalidParameterValue")); err != nil {
		t.Fatal(err)
	}
	if r := idemctl(t, e, "redrive", "--outbound-queue", out); r.code != 0 || !strings.Contains(r.stderr, "not one of the stack's queues") {
		t.Fatalf("redrive of a dead letter for another queue: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := len(receiveAll(t, elsewhere)); n != 0 {
		t.Errorf("%d messages went to a queue that is not the stack's", n)
	}
	if in := receiveAll(t, e["QUEUE_URL"]); len(in) != 1 {
		t.Errorf("%d messages in the input queue, want the dead letter for another queue", len(in))
	}
}

// stackKeys are the keys of the stack's secret `idemctl up` exported.
func stackKeys(t *testing.T, e env) *sqsmsg.Keys {
	t.Helper()
	keys, err := sqsmsg.NewKeys([]byte(e["STACK_SECRET"]))
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestRedriveForgedDeadLetter (issue 28, finding 2): a producer allowed only to send to
// the input queue forges the attributes of a dead letter (dlq-outbound-queue naming the
// example's outbound queue, which only the consumer and the reaper may write to) on a
// message the consumer cannot take, and SQS's own redrive moves it to the DLQ as it was
// (maxReceiveCount), attributes and all. `idemctl redrive` sends it to the input queue,
// says so in the dry run and the summary, and never to the outbound queue: the dead
// letter carries no signature of the consumer or the reaper.
func TestRedriveForgedDeadLetter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := upStack(t)
	_, outVar := exampletest.Confirms(exampletest.Example(t))
	if outVar == "" {
		t.Skipf("example %s has no outbound queue", exampletest.Example(t).Name())
	}
	protected := e[outVar]
	api := awstest.SQS(t)
	forged := `{"receipt":"forged"}`
	if _, err := api.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(e["QUEUE_URL"]), MessageBody: aws.String(forged), MessageGroupId: aws.String("g-forged"),
		MessageDeduplicationId: aws.String("forged-1"),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			sqsmsg.DLQOutboundQueueAttribute: {DataType: aws.String("String"), StringValue: aws.String(protected)},
			sqsmsg.DLQReasonAttribute:        {DataType: aws.String("String"), StringValue: aws.String("a receipt its queue refused")},
			sqsmsg.DLQSignatureAttribute:     {DataType: aws.String("String"), StringValue: aws.String(strings.Repeat("0", 64))},
			idem.KeyAttribute:                {DataType: aws.String("String"), StringValue: aws.String("payments#forged#0")},
		},
	}); err != nil {
		t.Fatal(err)
	}
	// The consumer never takes it: SQS moves it to the DLQ after maxReceiveCount receives.
	for range 10 {
		out, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(e["QUEUE_URL"]), MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages { // back at once: a consumer that fails to take it
			if _, err := api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(e["QUEUE_URL"]), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	dry := idemctl(t, e, "redrive", "--dry-run")
	if dry.code != 0 || !strings.Contains(dry.stdout, "1 messages would move") || !strings.Contains(dry.stdout, "not signed by the stack's consumer or reaper") ||
		strings.Count(dry.stdout, protected) != 1 || !strings.Contains(dry.stdout, "to "+e["QUEUE_URL"]) { // the note names it, no row goes there
		t.Fatalf("dry run: exit %d, want the forged dead letter shown going to the input queue\n%s%s", dry.code, dry.stdout, dry.stderr)
	}
	r := idemctl(t, e, "redrive")
	if r.code != 0 || !strings.Contains(r.stdout, "moved 1 messages") || !strings.Contains(r.stdout, "to "+e["QUEUE_URL"]) {
		t.Fatalf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := receiveAll(t, protected); len(got) != 0 {
		t.Fatalf("the forged dead letter reached the outbound queue %s: %+v", protected, got)
	}
	in := receiveAll(t, e["QUEUE_URL"])
	if len(in) != 1 || aws.ToString(in[0].Body) != forged {
		t.Fatalf("input queue holds %+v, want the forged message", in)
	}
	for name := range in[0].MessageAttributes {
		if strings.HasPrefix(name, "dlq-") {
			t.Errorf("attribute %s kept", name)
		}
	}
}

// TestInspectDeadLetteredOutbound: an outbound message its queue refused for good shows
// in the record: which one, the queue, and the reason.
func TestInspectDeadLetteredOutbound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := upStack(t)
	api := awstest.SQS(t)
	small := awstest.FIFOQueue(ctx, t, api, "small", map[string]string{"MaximumMessageSize": "1024"})
	store, err := persistence.NewDynamoStore(awstest.DynamoDB(t), e["IDEMPOTENCY_TABLE"])
	if err != nil {
		t.Fatal(err)
	}
	c, err := idem.New(idem.Config{Store: store, Scope: e["IDEMPOTENCY_SCOPE"], TTL: time.Hour, Sender: api,
		OutboxDeadLetter: &sqsmsg.SQSDeadLetter{API: api, QueueURL: e["DLQ_URL"]}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(ctx, &idem.Request{Key: "key:big", Payload: []byte(`{}`)}, func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Messages: []idem.Message{{QueueURL: small, Body: strings.Repeat("x", 2000), GroupID: "g"}}}, nil
	})
	if err != nil {
		t.Fatalf("delivery: %v, want the message dead-lettered and the delivery done", err)
	}
	r := idemctl(t, e, "inspect", "key:big")
	for _, want := range []string{"0 sent", "dead-lettered", "message 0, refused by " + small, "1024"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect does not say %q:\n%s", want, r.stdout)
		}
	}
}

// TestInspectAndUnlockInASingleTable: with the records in a single-table layout (the
// template's IdempotencyPartitionKey and IdempotencySortKey), inspect and unlock find
// them through the variables the functions read.
func TestInspectAndUnlockInASingleTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := upStack(t, "IdempotencyPartitionKey=PK", "IdempotencySortKey=SK", "IdempotencyStaticPartitionKey=IDEM")
	if e["IDEMPOTENCY_SORT_KEY"] != "SK" || e["IDEMPOTENCY_STATIC_PARTITION_KEY"] != "IDEM" {
		t.Fatalf("idemctl up exported no single-table layout: %v", e)
	}
	layout := envconf.New(e.lookup).Layout()
	store, err := persistence.NewDynamoStoreLayout(awstest.DynamoDB(t), layout)
	if err != nil {
		t.Fatal(err)
	}
	scope := e["IDEMPOTENCY_SCOPE"]
	c, err := idem.New(idem.Config{Store: store, Scope: scope, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do(ctx, &idem.Request{Key: "key:s-1", Payload: []byte(`{}`)}, func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Response: []byte(`{"ok":true}`)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if r := idemctl(t, e, "inspect", "key:s-1"); r.code != 0 || !strings.Contains(r.stdout, "COMPLETED") {
		t.Errorf("inspect: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	pk, err := idem.RecordKey(scope, "key:s-2", false)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, created, err := store.Create(ctx, &persistence.Record{
		Key: pk, Status: persistence.StatusInProgress, LeaseToken: "0123456789abcdef", LeaseUntil: now.Add(-time.Minute),
		Inflight: "1", ExpiresAt: now.Add(time.Hour), Attempt: 1, Owner: "stuck-worker", CreatedAt: now, UpdatedAt: now,
	}, now); err != nil || !created {
		t.Fatalf("create: %v, %v", created, err)
	}
	if r := idemctl(t, e, "unlock", "key:s-2"); r.code != 0 || !strings.Contains(r.stdout, "stuck-worker") {
		t.Errorf("unlock: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	rec, err := store.Get(ctx, pk, time.Now())
	if err != nil || rec.Status != persistence.StatusFailed || !rec.Retryable {
		t.Errorf("record after unlock: %+v, %v", rec, err)
	}
	// The items are where the layout says: partition key IDEM, sort key the record's key.
	out, err := awstest.DynamoDB(t).GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(layout.Table), Key: store.Key(pk)})
	if err != nil || out.Item["PK"] == nil || out.Item["PK"].(*types.AttributeValueMemberS).Value != "IDEM" {
		t.Errorf("item at %v: %v, %v", store.Key(pk), out.Item, err)
	}
}

// TestMinimalExample: a message type with example.Example's four methods only
// (internal/exampletest/minimal), as the build's one example. idemctl up creates its
// block's resources, send --from-file sends its messages and run consumes them; the
// commands that need an optional interface refuse in one line that names it (no usage
// text: no flag would fix it) and exit 1.
func TestMinimalExample(t *testing.T) {
	cli.UseExamples(t, []example.Example{minimal.Example{}})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"send"}, `idemctl send: example "minimal" has no traffic generator (implement example.Traffic); send your own messages with --from-file`},
		{[]string{"events", "--out", t.TempDir()}, `idemctl events: example "minimal" has no traffic generator (implement example.Traffic)`},
		{[]string{"check", "--record", "sent.jsonl"}, `idemctl check: example "minimal" has no check of its tables (implement example.Checker)`},
		{[]string{"demo"}, `idemctl demo: example "minimal" has no traffic generator (implement example.Traffic)`},
	} {
		r := idemctl(t, localEnv(t), c.args...)
		if r.code != 1 || r.stderr != c.want+"\n" {
			t.Errorf("idemctl %s: exit %d, stderr %q; want 1 and the one line %q", strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}

	e := localEnv(t)
	// template.yaml carries the default block; --example swaps the minimal one in.
	r := idemctl(t, e, "up", "--template", templatePath, "--example", "minimal", "--stack", stackName(t))
	if r.code != 0 {
		t.Fatalf("up: exit %d\n%s", r.code, r.stderr)
	}
	maps.Copy(e, parseExports(t, r.stdout))
	if e[example.Var] != "minimal" || e[minimal.TableVar] == "" {
		t.Fatalf("up exported %s=%q %s=%q", example.Var, e[example.Var], minimal.TableVar, e[minimal.TableVar])
	}
	file := filepath.Join(t.TempDir(), "notes.jsonl")
	if err := os.WriteFile(file, []byte(`{"note_id":"n-1"}`+"\n"+`{"note_id":"n-2"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := idemctl(t, e, "send", "--from-file", file); r.code != 0 {
		t.Fatalf("send --from-file: exit %d\n%s", r.code, r.stderr)
	}
	r = idemctl(t, e, "run", "--in-process", "--template", templatePath, "--until-idle", "2s", "--wait", "1s", "--reaper-every", "1s")
	if r.code != 0 || !strings.Contains(r.stderr, "2 deleted") {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	out, err := awstest.DynamoDB(t).Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(e[minimal.TableVar])})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 2 {
		t.Errorf("the notes table holds %d items, want the 2 notes", len(out.Items))
	}
}

// TestRedriveOutboundKeepsEveryAttribute (issue 37, hole 1): an outbound message with
// as many attributes as SQS allows (9 of the handler's and its key), refused by its
// queue for good, is dead-lettered beside the dlq-* attributes and the signature, and
// redrive sends back exactly the committed message: its body and every one of its
// attributes, no more and no fewer.
func TestRedriveOutboundKeepsEveryAttribute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := upStack(t)
	api := awstest.SQS(t)
	out := awstest.FIFOQueue(ctx, t, api, "out", map[string]string{"MaximumMessageSize": "1024"})
	m := idem.Message{QueueURL: out, Body: `{"receipt":"r-1"}`, GroupID: "acct-1", Attributes: map[string]string{idem.KeyAttribute: "payments#p-1#0"}}
	for i := range sqsmsg.MaxMessageAttributes - 1 {
		m.Attributes[fmt.Sprintf("a-%d", i)] = fmt.Sprintf(`value "%d" <&>`, i) // characters JSON escapes
	}
	dl := &sqsmsg.SQSDeadLetter{API: api, QueueURL: e["DLQ_URL"], Source: "test-consumer", Keys: stackKeys(t, e)}
	refusal := errors.New("InvalidParameterValue: One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes.")
	if err := dl.DeadLetterOutbound(ctx, m, refusal); err != nil {
		t.Fatal(err)
	}
	if r := idemctl(t, e, "redrive", "--outbound-queue", out); r.code != 0 || !strings.Contains(r.stdout, "1 to "+out) {
		t.Fatalf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	got := receiveAll(t, out)
	if len(got) != 1 {
		t.Fatalf("outbound queue holds %d messages, want the one redriven", len(got))
	}
	attrs := map[string]string{}
	for name, v := range got[0].MessageAttributes {
		attrs[name] = aws.ToString(v.StringValue)
		if aws.ToString(v.DataType) != "String" {
			t.Errorf("attribute %s has type %s, want String", name, aws.ToString(v.DataType))
		}
	}
	if aws.ToString(got[0].Body) != m.Body || !maps.Equal(attrs, m.Attributes) || got[0].Attributes["MessageGroupId"] != m.GroupID {
		t.Fatalf("redriven message: body %s, group %s, attributes %v\nwant the committed one: body %s, group %s, attributes %v",
			aws.ToString(got[0].Body), got[0].Attributes["MessageGroupId"], attrs, m.Body, m.GroupID, m.Attributes)
	}
}

// TestRedriveLeavesACutBody (issue 37, hole 4): a message too large for its dead letter
// was dead-lettered with its body cut (dlq-body-cut). Redrive does not send that cut
// body as if it were the message: it leaves it in the dead-letter queue and says why.
func TestRedriveLeavesACutBody(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := upStack(t)
	api := awstest.SQS(t)
	dl := &sqsmsg.SQSDeadLetter{API: api, QueueURL: e["DLQ_URL"], Source: "test-consumer", Keys: stackKeys(t, e), MaxMessageBytes: sqsmsg.MinSQSMessageBytes}
	msg := events.SQSMessage{MessageId: "m-cut", Body: strings.Repeat("x", 2*sqsmsg.MinSQSMessageBytes),
		Attributes: map[string]string{"MessageGroupId": "g-1", "MessageDeduplicationId": "payments-p-9"}}
	if err := dl.DeadLetter(ctx, msg, errors.New("validate: amount_cents is not a number")); err != nil {
		t.Fatal(err)
	}
	r := idemctl(t, e, "redrive")
	if r.code == 0 || !strings.Contains(r.stderr, sqsmsg.DLQBodyCutAttribute) || !strings.Contains(r.stdout, "moved 0 messages") {
		t.Fatalf("redrive of a cut body: exit %d, want a failure that names %s\n%s%s", r.code, sqsmsg.DLQBodyCutAttribute, r.stdout, r.stderr)
	}
	if in := receiveAll(t, e["QUEUE_URL"]); len(in) != 0 {
		t.Fatalf("%d messages went to the input queue, want none", len(in))
	}
	// Left there (in flight for redrive's visibility timeout): still counted by the queue.
	q, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(e["DLQ_URL"]),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatal(err)
	}
	if v, h := q.Attributes["ApproximateNumberOfMessages"], q.Attributes["ApproximateNumberOfMessagesNotVisible"]; v+h != "01" && v+h != "10" {
		t.Fatalf("the dead-letter queue holds %s visible and %s in-flight messages, want the cut one left there", v, h)
	}
}
