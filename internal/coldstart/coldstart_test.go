package coldstart_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/coldstart"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// gate is the variable that turns the measurement on; IDEM_COLDSTART_RUNS sets the number
// of measured starts per function (default 20).
const gate = "IDEM_COLDSTART"

func TestMain(m *testing.M) {
	if os.Getenv(gate) != "1" {
		os.Exit(m.Run()) // TestColdStart skips: no emulator needed
	}
	os.Exit(awstest.Main(m))
}

// TestColdStart builds the consumer and the reaper for the host as the Makefile builds
// them for Lambda, creates the template's resources on the local endpoint, and starts
// each bootstrap IDEM_COLDSTART_RUNS times (after one unmeasured start) with a Lambda
// environment and a coldstart.RuntimeAPI. It reports, per function, the median and p90
// of process start -> first GET /next (init done) and of process start -> response to
// the first event: a 10-record FIFO event of new payments for the consumer (from
// events/sqs-fifo-batch.json, keys unique per run, processed against the endpoint) and
// events/scheduled.json for the reaper. Run it with
//
//	IDEM_COLDSTART=1 go test -count=1 -v -run TestColdStart ./internal/coldstart/
func TestColdStart(t *testing.T) {
	if os.Getenv(gate) != "1" {
		t.Skipf("set %s=1 to measure cold starts", gate)
	}
	runs := 20
	if v := os.Getenv("IDEM_COLDSTART_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("IDEM_COLDSTART_RUNS=%q: want a positive number", v)
		}
		runs = n
	}
	dir := t.TempDir()
	fnEnv := stackEnv(t)
	consumerEvent := consumerEventFunc(t)
	scheduled, err := os.ReadFile(filepath.Join("..", "..", "events", "scheduled.json"))
	if err != nil {
		t.Fatal(err)
	}

	type function struct {
		name  string
		event func(run int) []byte
		check func(resp []byte, output string) error
	}
	functions := []function{
		{"consumer", consumerEvent, checkConsumer},
		{"reaper", func(int) []byte { return scheduled }, checkReaper},
	}
	var report strings.Builder
	fmt.Fprintf(&report, "cold start of the host build (%s/%s, -tags lambda.norpc -trimpath -ldflags='-s -w'), %d runs per function, endpoint %s\n",
		runtime.GOOS, runtime.GOARCH, runs, awstest.Endpoint(t))
	fmt.Fprintf(&report, "%-9s %-8s %-40s %9s %9s %9s %9s\n", "function", "size", "measure", "median", "p90", "min", "max")
	for _, fn := range functions {
		bin := build(t, dir, fn.name)
		env := lambdaEnv(t, fn.name, dir, fnEnv)
		var ready, first []time.Duration
		for run := 0; run <= runs; run++ { // run 0 warms the page cache and the endpoint
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			var out bytes.Buffer
			s, err := coldstart.Measure(ctx, bin, env, fn.event(run), 30*time.Second, &out)
			cancel()
			if err != nil {
				t.Fatalf("%s run %d: %v\noutput:\n%s", fn.name, run, err, out.String())
			}
			if err := fn.check(s.Response, out.String()); err != nil {
				t.Fatalf("%s run %d: %v\nresponse: %s\noutput:\n%s", fn.name, run, err, s.Response, out.String())
			}
			if run > 0 {
				ready, first = append(ready, s.Ready), append(first, s.FirstResponse)
			}
		}
		size := "?"
		if fi, err := os.Stat(bin); err == nil {
			size = fmt.Sprintf("%.1fMiB", float64(fi.Size())/(1<<20))
		}
		row := func(fnCol, sizeCol, measure string, ds []time.Duration) {
			fmt.Fprintf(&report, "%-9s %-8s %-40s %9s %9s %9s %9s\n", fnCol, sizeCol, measure,
				ms(coldstart.Percentile(ds, 50)), ms(coldstart.Percentile(ds, 90)), ms(slices.Min(ds)), ms(slices.Max(ds)))
		}
		row(fn.name, size, "start -> first GET /next (init)", ready)
		row("", "", "start -> first response ("+map[string]string{"consumer": "10 records", "reaper": "one sweep"}[fn.name]+")", first)
		fmt.Fprintf(&report, "%-9s %-8s %s\n", "", "", initTrace(t, bin, env, fn.event(runs+1)))
	}
	t.Log("\n" + report.String())
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

// build compiles functions/<name> for the host with the Makefile's LAMBDA_BUILD flags. The
// package is named by its directory, not its import path, so that a copy of the template
// whose module path gonew rewrote (only in go.mod and imports) builds it too.
func build(t *testing.T, dir, name string) string {
	t.Helper()
	bin := filepath.Join(dir, name, "bootstrap")
	cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", bin, "../../functions/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	return bin
}

// stackEnv creates the template's queues and tables under a new stack name and returns
// the functions' variables, resolved to them.
func stackEnv(t *testing.T) []string {
	t.Helper()
	tmpl, err := stack.Load(filepath.Join("..", "..", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("coldstart-%d", time.Now().UnixNano()%1e9)
	env, err := stack.Up(context.Background(), tmpl,
		stack.Clients{SQS: awstest.SQS(t), DynamoDB: awstest.DynamoDB(t), SecretsManager: awstest.SecretsManager(t), Region: awstest.Region}, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	return env.Environ()
}

// lambdaEnv is the environment Lambda gives a provided.al2023 function (256 MB, as the
// template), with dummy credentials and the local endpoint; nothing is inherited from
// this process (a CA bundle in AWS_CA_BUNDLE, for one, would be parsed at init).
func lambdaEnv(t *testing.T, name, dir string, fnEnv []string) []string {
	t.Helper()
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin:/opt/bin",
		"LANG=en_US.UTF-8",
		"TZ=:UTC",
		"LAMBDA_TASK_ROOT=" + filepath.Join(dir, name),
		"LAMBDA_RUNTIME_DIR=/var/runtime",
		"_HANDLER=bootstrap",
		"AWS_REGION=" + awstest.Region,
		"AWS_DEFAULT_REGION=" + awstest.Region,
		"AWS_ACCESS_KEY_ID=test",
		"AWS_SECRET_ACCESS_KEY=test",
		"AWS_SESSION_TOKEN=test",
		"AWS_ENDPOINT_URL=" + awstest.Endpoint(t),
		"AWS_LAMBDA_FUNCTION_NAME=" + name,
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256",
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_INITIALIZATION_TYPE=on-demand",
		"AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/" + name,
		"AWS_LAMBDA_LOG_STREAM_NAME=2025/01/01/[$LATEST]coldstart",
	}
	return append(env, fnEnv...)
}

// consumerEventFunc returns a 10-record FIFO event per run: the records of
// events/sqs-fifo-batch.json (3 groups), repeated to 10, each a new payment with a key
// unique to the run.
func consumerEventFunc(t *testing.T) func(run int) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "events", "sqs-fifo-batch.json"))
	if err != nil {
		t.Fatal(err)
	}
	var src events.SQSEvent
	if err := json.Unmarshal(raw, &src); err != nil || len(src.Records) == 0 {
		t.Fatalf("events/sqs-fifo-batch.json: %v", err)
	}
	stamp := time.Now().UnixNano()
	return func(run int) []byte {
		recs := make([]events.SQSMessage, 10)
		for i := range recs {
			r := src.Records[i%len(src.Records)]
			var body map[string]any
			if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
				t.Fatalf("record %d body: %v", i, err)
			}
			id := fmt.Sprintf("pay-cs%x-%d-%d", stamp, run, i)
			key := "payment:" + id
			body["payment_id"] = id
			b, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			r.Body = string(b)
			r.MessageId = fmt.Sprintf("cs%x-%d-%d", stamp, run, i)
			attrs := map[string]string{}
			for k, v := range r.Attributes {
				attrs[k] = v
			}
			attrs["MessageDeduplicationId"] = key
			attrs["SequenceNumber"] = strconv.FormatInt(stamp+int64(run*10+i), 10)
			r.Attributes = attrs
			r.MessageAttributes = map[string]events.SQSMessageAttribute{
				idem.KeyAttribute: {DataType: "String", StringValue: aws.String(key), StringListValues: []string{}, BinaryListValues: [][]byte{}},
			}
			recs[i] = r
		}
		b, err := json.Marshal(events.SQSEvent{Records: recs})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// checkConsumer wants no batch item failures and 10 records applied (first deliveries).
func checkConsumer(resp []byte, output string) error {
	var r events.SQSEventResponse
	if err := json.Unmarshal(resp, &r); err != nil {
		return fmt.Errorf("response: %w", err)
	}
	if len(r.BatchItemFailures) != 0 {
		return fmt.Errorf("%d batch item failures", len(r.BatchItemFailures))
	}
	if n := strings.Count(output, `"outcome":"applied"`); n != 10 {
		return fmt.Errorf("%d records applied, want 10", n)
	}
	return nil
}

// checkReaper wants a sweep result.
func checkReaper(resp []byte, _ string) error {
	var r reaper.SweepResult
	if err := json.Unmarshal(resp, &r); err != nil {
		return fmt.Errorf("response: %w", err)
	}
	return nil
}

// initLine is a line of GODEBUG=inittrace=1: init <package> @<start> ms, <clock> ms clock, ...
var initLine = regexp.MustCompile(`^init (\S+) @[0-9.]+ ms, ([0-9.]+) ms clock`)

// initTrace starts bin once more with GODEBUG=inittrace=1 and summarizes the package
// initializers: their total clock time and the slowest three.
func initTrace(t *testing.T, bin string, env []string, event []byte) string {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := coldstart.Measure(ctx, bin, append(env[:len(env):len(env)], "GODEBUG=inittrace=1"), event, 30*time.Second, &out)
	if err != nil {
		t.Fatalf("inittrace run: %v\n%s", err, out.String())
	}
	type pkg struct {
		name string
		ms   float64
	}
	var pkgs []pkg
	total := 0.0
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		m := initLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		pkgs = append(pkgs, pkg{m[1], v})
		total += v
	}
	slices.SortFunc(pkgs, func(a, b pkg) int {
		switch {
		case a.ms > b.ms:
			return -1
		case a.ms < b.ms:
			return 1
		}
		return 0
	})
	top := make([]string, 0, 3)
	for _, p := range pkgs[:min(3, len(pkgs))] {
		top = append(top, fmt.Sprintf("%s %.2fms", p.name, p.ms))
	}
	return fmt.Sprintf("package inits (one run, GODEBUG=inittrace=1): %d packages, %.1fms of a %s init; slowest: %s",
		len(pkgs), total, ms(s.Ready), strings.Join(top, ", "))
}
