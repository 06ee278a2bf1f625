package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/lambdaenv"
	"github.com/idemgo/sqs-lambda-consumer/internal/runner"
)

// The tests in this file run the runner against real Lambda execution environments:
// child processes of fnBin under the Runtime API (lambdaenv).

// environments returns n environments of fnBin, each recording the events it gets in
// dir, closed at the end of the test.
func environments(t *testing.T, n int, timeout time.Duration, dir string) []*lambdaenv.Environment {
	t.Helper()
	envs := make([]*lambdaenv.Environment, n)
	for i := range envs {
		e, err := lambdaenv.New(lambdaenv.Function{
			Name: "fn", Bin: fnBin, Timeout: timeout, Env: []string{"RECORD_DIR=" + dir},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		envs[i] = e
	}
	return envs
}

func sendBodies(t *testing.T, api *sqs.Client, url string, group func(i int) string, bodies ...string) {
	t.Helper()
	for i, b := range bodies {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(b)}
		if g := group(i); g != "" {
			in.MessageGroupId, in.MessageDeduplicationId = aws.String(g), aws.String(fmt.Sprintf("d%d", i))
		}
		if _, err := api.SendMessage(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	}
}

// recorded reads the events the environments wrote to dir.
func recorded[T any](t *testing.T, dir string) []T {
	t.Helper()
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]T, 0, len(files))
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", f.Name(), err)
		}
		out = append(out, v)
	}
	return out
}

func runEnvironments(t *testing.T, url string, envs []*lambdaenv.Environment, cfg runner.Config) runner.Stats {
	t.Helper()
	cfg.SQS, cfg.QueueURL, cfg.Consumers = awstest.SQS(t), url, len(envs)
	cfg.NewHandler = func(i int) (runner.Handler, error) { return runner.EnvironmentHandler(envs[i]), nil }
	if cfg.WaitTime == 0 {
		cfg.WaitTime = time.Second
	}
	cfg.UntilIdle, cfg.RetryAfter = 2*time.Second, time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stats, err := runner.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return stats
}

// A timeout, a function error, a panic and a crash each fail the whole batch: the
// records that came before the fault in the batch are not deleted either, and all come
// back; the next invocation gets a fresh environment where Lambda resets it.
func TestEnvironmentFaultsFailWholeBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fault     string
		timeouts  int64
		freshInit bool
	}{
		{`{"do":"sleep-first","sleep_ms":600000}`, 1, true},
		{`{"do":"error-first"}`, 0, false},
		{`{"do":"panic-first"}`, 0, true},
		{`{"do":"exit-first"}`, 0, true},
	} {
		name := strings.Split(tc.fault, `"`)[3]
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each with its own queue and environment
			api := awstest.SQS(t)
			url := fifoQueue(t, api)
			// One group: one batch, the fault last.
			sendBodies(t, api, url, func(int) string { return "g" }, `{"do":"ok","name":"a"}`, `{"do":"ok","name":"b"}`, tc.fault)
			dir := t.TempDir()
			envs := environments(t, 1, 3*time.Second, dir)
			stats := runEnvironments(t, url, envs, runner.Config{FunctionTimeout: 3 * time.Second})

			if stats.InvokeErrors != 1 || stats.Failed != 3 || stats.Succeeded != 3 || stats.Received != 6 || stats.Timeouts != tc.timeouts {
				t.Errorf("stats %+v: want 1 failed invocation, its 3 records failed and redelivered, then 3 deleted; %d timeouts", stats, tc.timeouts)
			}
			seen := map[string]int{}
			for _, ev := range recorded[events.SQSEvent](t, dir) {
				for _, r := range ev.Records {
					seen[r.Body]++
				}
			}
			for _, b := range []string{`{"do":"ok","name":"a"}`, `{"do":"ok","name":"b"}`} {
				if seen[b] != 2 {
					t.Errorf("%s delivered %d times, want 2 (the failed batch, then again)", b, seen[b])
				}
			}
			if wantInits := map[bool]int{true: 2, false: 1}[tc.freshInit]; envs[0].Inits() != wantInits {
				t.Errorf("%d inits, want %d", envs[0].Inits(), wantInits)
			}
		})
	}
}

// In-process, a handler that answers after its timeout fails the whole batch too, as
// Lambda would have ended the invocation.
func TestLateAnswerFailsWholeBatch(t *testing.T) {
	t.Parallel()
	api := awstest.SQS(t)
	url := fifoQueue(t, api)
	sendBodies(t, api, url, func(int) string { return "g" }, `{"n":1}`, `{"n":2}`)
	calls := 0
	stats, err := runner.Run(context.Background(), runner.Config{
		SQS: api, QueueURL: url, FunctionTimeout: time.Second, WaitTime: time.Second, UntilIdle: 2 * time.Second, RetryAfter: time.Second,
		NewHandler: func(int) (runner.Handler, error) {
			return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				if calls++; calls == 1 {
					<-ctx.Done()
					time.Sleep(100 * time.Millisecond) // answers late, with no failures
				}
				return events.SQSEventResponse{}, nil
			}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Timeouts != 1 || stats.Failed != 2 || stats.Succeeded != 2 || stats.Received != 4 {
		t.Errorf("stats %+v: want the late batch failed whole (2), then redelivered and deleted (2)", stats)
	}
}

// Concurrency is the number of environments: three invocations meet at a barrier that
// only opens when all three run at once, and never more than three run.
func TestEnvironmentsRunConcurrently(t *testing.T) {
	t.Parallel()
	api := awstest.SQS(t)
	out, err := api.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(awstest.Name(t, "std"))})
	if err != nil {
		t.Fatal(err)
	}
	url := aws.ToString(out.QueueUrl)
	barrier := t.TempDir()
	var bodies []string
	for i := range 6 {
		bodies = append(bodies, fmt.Sprintf(`{"do":"barrier","dir":%q,"n":3,"name":"m%d"}`, barrier, i))
	}
	sendBodies(t, api, url, func(int) string { return "" }, bodies...)
	envs := environments(t, 3, 90*time.Second, t.TempDir())
	stats := runEnvironments(t, url, envs, runner.Config{BatchSize: 1, FunctionTimeout: 90 * time.Second})
	if stats.Succeeded != 6 || stats.InvokeErrors != 0 || stats.MaxConcurrent != 3 {
		t.Errorf("stats %+v: want 6 deleted, no invocation error, 3 at once at most and at least", stats)
	}
}

// A FIFO group is never in two environments at once, and its records arrive in order
// across the invocations.
func TestEnvironmentsKeepFIFOGroupsApart(t *testing.T) {
	t.Parallel()
	api := awstest.SQS(t)
	url := fifoQueue(t, api)
	var bodies []string
	for i := range 24 {
		bodies = append(bodies, fmt.Sprintf(`{"do":"sleep","sleep_ms":100,"name":"g%d-%02d"}`, i%4, i/4))
	}
	sendBodies(t, api, url, func(i int) string { return fmt.Sprintf("g%d", i%4) }, bodies...)
	dir := t.TempDir()
	envs := environments(t, 4, 30*time.Second, dir)
	stats := runEnvironments(t, url, envs, runner.Config{BatchSize: 2, FunctionTimeout: 30 * time.Second})
	if stats.Succeeded != 24 || stats.GroupOverlaps != 0 || stats.InvokeErrors != 0 {
		t.Errorf("stats %+v: want 24 deleted, no group held by two invocations", stats)
	}
	last := map[string]string{}
	// recorded is in the order the invocations started (files named by time).
	for _, ev := range recorded[events.SQSEvent](t, dir) {
		for _, r := range ev.Records {
			var b struct{ Name string }
			if err := json.Unmarshal([]byte(r.Body), &b); err != nil {
				t.Fatal(err)
			}
			g := r.Attributes["MessageGroupId"]
			if b.Name <= last[g] {
				t.Errorf("group %s: %s after %s", g, b.Name, last[g])
			}
			last[g] = b.Name
		}
	}
}

// The reaper's environment is invoked every ReapEvery with the EventBridge scheduled
// event of its rule.
func TestReaperEnvironmentGetsScheduledEvents(t *testing.T) {
	t.Parallel()
	api := awstest.SQS(t)
	url := fifoQueue(t, api)
	dir := t.TempDir()
	reaper := environments(t, 1, 10*time.Second, dir)[0]
	rule := "arn:aws:events:us-east-1:000000000000:rule/local-ReaperFunctionSweep"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for limit := time.Now().Add(time.Minute); time.Now().Before(limit); time.Sleep(100 * time.Millisecond) {
			if files, _ := os.ReadDir(dir); len(files) >= 2 {
				break
			}
		}
		cancel()
	}()
	stats, err := runner.Run(ctx, runner.Config{
		SQS: api, QueueURL: url, WaitTime: time.Second, NewHandler: func(int) (runner.Handler, error) {
			return func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
				return events.SQSEventResponse{}, nil
			}, nil
		},
		Reap: runner.EnvironmentReaper(reaper, rule), ReapEvery: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := recorded[map[string]any](t, dir)
	if len(got) < 2 || stats.SweepErrors != 0 || stats.Sweeps < 2 {
		t.Fatalf("%d events recorded, stats %+v: want at least 2 sweeps without errors", len(got), stats)
	}
	for _, ev := range got {
		for k, want := range map[string]any{
			"version": "0", "detail-type": "Scheduled Event", "source": "aws.events", "account": "000000000000",
			"region": "us-east-1", "resources": []any{rule}, "detail": map[string]any{},
		} {
			if fmt.Sprint(ev[k]) != fmt.Sprint(want) {
				t.Errorf("%s = %v, want %v", k, ev[k], want)
			}
		}
		if ts, _ := ev["time"].(string); !strings.HasSuffix(ts, "Z") {
			t.Errorf("time %v: want an RFC 3339 UTC time", ev["time"])
		}
		if id, _ := ev["id"].(string); id == "" {
			t.Error("no event id")
		}
	}
}
