package reaperapp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/functions/reaper/reaperapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/emf"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

func TestMain(m *testing.M) { os.Exit(awstest.Main(m)) }

// TestScheduledSweep pushes events/scheduled.json through the real handler: it fails the
// stale lock (and only it), logs the counts and emits StaleLocksReaped as EMF.
func TestScheduledSweep(t *testing.T) {
	ctx := context.Background()
	ddb := awstest.DynamoDB(t)
	table := awstest.Name(t, "idem")
	if err := persistence.CreateTable(ctx, ddb, table); err != nil {
		t.Fatal(err)
	}
	store, _ := persistence.NewDynamoStore(ddb, table)
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c, err := idem.New(idem.Config{Store: store, Scope: "test", Shards: 3, DefaultLease: time.Minute, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	// A crashed holder: its handler never returns in time.
	started, release := make(chan struct{}), make(chan struct{})
	crashed := make(chan error, 1)
	go func() {
		_, err := c.Do(ctx, &idem.Request{Key: "crashed", Payload: []byte(`{}`)}, func(context.Context, *idem.Request) (idem.Result, error) {
			close(started)
			<-release
			return idem.Result{Response: []byte("late")}, nil
		})
		crashed <- err
	}()
	<-started
	if _, err := c.Do(ctx, &idem.Request{Key: "completed", Payload: []byte(`{}`)}, func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Response: []byte("ok")}, nil
	}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(2 * time.Minute) // the crashed lease ended a minute ago
	mu.Unlock()

	var logs, emfOut bytes.Buffer
	cfg := reaperapp.Config{IdempotencyTable: table, Shards: 3, Grace: 30 * time.Second, Margin: time.Second, MetricsNamespace: "Test"}
	h, err := reaperapp.New(cfg, reaperapp.Deps{DynamoDB: ddb, Logs: &logs, Metrics: &emfOut, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "events", "scheduled.json"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := lambda.NewHandler(h).Invoke(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	var res reaper.SweepResult
	if err := json.Unmarshal(out, &res); err != nil || res.Reaped != 1 || res.Scanned != 1 {
		t.Fatalf("sweep result %s (%v), want 1 reaped", out, err)
	}
	// The lateness is in milliseconds, as in the log line: the lease ended 30 s + grace ago at most.
	if !strings.Contains(string(out), `"MaxLateMs":`) || strings.Contains(string(out), `"MaxLate":`) || res.MaxLate%time.Millisecond != 0 {
		t.Errorf("sweep result %s: want MaxLateMs, in whole milliseconds", out)
	}
	for key, want := range map[string]persistence.Status{"crashed": persistence.StatusFailed, "completed": persistence.StatusCompleted} {
		pk, _ := c.RecordKey(key)
		rec, err := store.Get(ctx, pk, clock())
		if err != nil || rec.Status != want {
			t.Errorf("%s: %+v %v, want %s", key, rec, err, want)
		}
	}
	var line map[string]any
	if err := json.Unmarshal(emfOut.Bytes(), &line); err != nil || line[emf.MetricReaped] != float64(1) || line["Service"] != "reaper" {
		t.Fatalf("EMF line %q: %v", emfOut.String(), err)
	}
	if !strings.Contains(logs.String(), `"reaped":1`) {
		t.Fatalf("log: %s", logs.String())
	}
	// The crashed holder wakes up: its completion is fenced out.
	close(release)
	if err := <-crashed; !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("late holder: %v", err)
	}
	// A second sweep finds nothing and still reports a zero metric.
	emfOut.Reset()
	out, _ = lambda.NewHandler(h).Invoke(ctx, raw)
	if err := json.Unmarshal(out, &res); err != nil || res.Reaped != 0 {
		t.Fatalf("second sweep %s", out)
	}
	if !strings.Contains(emfOut.String(), `"StaleLocksReaped":0`) {
		t.Fatalf("zero metric missing: %s", emfOut.String())
	}
	// Both sweeps went through every shard: SweepIncomplete is there, at 0.
	if got := emfValue(t, emfOut.String(), reaperapp.MetricSweepIncomplete); got != 0 {
		t.Errorf("%s = %v after a complete sweep, want 0", reaperapp.MetricSweepIncomplete, got)
	}
}

// emfValue is the value of the metric name in the one EMF line of out, declared in its
// directive with the dimension Service; the test fails when it is not there.
func emfValue(t *testing.T, out, name string) float64 {
	t.Helper()
	var line struct {
		AWS struct {
			CloudWatchMetrics []struct {
				Dimensions [][]string
				Metrics    []struct{ Name string }
			}
		} `json:"_aws"`
	}
	if err := json.Unmarshal([]byte(out), &line); err != nil {
		t.Fatalf("EMF line %q: %v", out, err)
	}
	var all map[string]any
	_ = json.Unmarshal([]byte(out), &all)
	for _, d := range line.AWS.CloudWatchMetrics {
		for _, m := range d.Metrics {
			if m.Name == name && len(d.Dimensions) == 1 && slices.Equal(d.Dimensions[0], []string{"Service"}) {
				v, ok := all[name].(float64)
				if !ok {
					t.Fatalf("EMF line %q: %s declared without a number", out, name)
				}
				return v
			}
		}
	}
	t.Fatalf("EMF line %q: no metric %s with the dimension Service", out, name)
	return 0
}

func TestSweepStopsBeforeDeadline(t *testing.T) {
	ddb := awstest.DynamoDB(t)
	table := awstest.Name(t, "idem")
	if err := persistence.CreateTable(context.Background(), ddb, table); err != nil {
		t.Fatal(err)
	}
	var emf bytes.Buffer
	h, err := reaperapp.New(reaperapp.Config{IdempotencyTable: table, Shards: 4, Grace: time.Second, Margin: 2 * time.Second}, reaperapp.Deps{DynamoDB: ddb, Logs: &bytes.Buffer{}, Metrics: &emf})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	out, err := lambda.NewHandler(h).Invoke(ctx, []byte(`{"detail-type":"Scheduled Event","detail":{}}`))
	var res reaper.SweepResult
	if err != nil || json.Unmarshal(out, &res) != nil || !res.Truncated {
		t.Fatalf("out=%s err=%v, want a truncated sweep", out, err)
	}
	if got := emfValue(t, emf.String(), reaperapp.MetricSweepIncomplete); got != 1 {
		t.Errorf("%s = %v after a truncated sweep, want 1", reaperapp.MetricSweepIncomplete, got)
	}
}

// failingQuery is DynamoDB whose Query fails: the index cannot be read.
type failingQuery struct{ persistence.DynamoDBAPI }

func (failingQuery) Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return nil, errors.New("injected: the index is unreachable")
}

// TestFailedSweepIsIncomplete: a sweep stopped by an error fails the invocation (Lambda
// counts it in Errors) and emits SweepIncomplete 1, so both reaper alarms see it.
func TestFailedSweepIsIncomplete(t *testing.T) {
	ddb := awstest.DynamoDB(t)
	var emf bytes.Buffer
	h, err := reaperapp.New(reaperapp.Config{IdempotencyTable: awstest.Name(t, "idem"), Shards: 2, Grace: time.Second, Margin: time.Second},
		reaperapp.Deps{DynamoDB: failingQuery{ddb}, Logs: &bytes.Buffer{}, Metrics: &emf})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lambda.NewHandler(h).Invoke(context.Background(), []byte(`{"detail-type":"Scheduled Event","detail":{}}`)); err == nil ||
		!strings.Contains(err.Error(), "injected") {
		t.Fatalf("invoke: %v, want the sweep's error", err)
	}
	if got := emfValue(t, emf.String(), reaperapp.MetricSweepIncomplete); got != 1 {
		t.Errorf("%s = %v after a failed sweep, want 1", reaperapp.MetricSweepIncomplete, got)
	}
}

func TestFromEnv(t *testing.T) {
	lookup := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	cfg, err := reaperapp.FromEnv(lookup(map[string]string{"IDEMPOTENCY_TABLE": "t", "LEASE_GRACE": "45s"}))
	if err != nil || cfg.Grace != 45*time.Second || cfg.Shards != 4 {
		t.Fatalf("cfg=%+v err=%v", cfg, err)
	}
	if _, err := reaperapp.FromEnv(lookup(map[string]string{"LEASE_GRACE": "-1s"})); err == nil ||
		!strings.Contains(err.Error(), "IDEMPOTENCY_TABLE is not set") || !strings.Contains(err.Error(), "LEASE_GRACE") {
		t.Fatalf("err = %v", err)
	}
	// A timeout at or below SWEEP_MARGIN leaves no time for a sweep: the init fails.
	if _, err := reaperapp.FromEnv(lookup(map[string]string{"IDEMPOTENCY_TABLE": "t", "FUNCTION_TIMEOUT": "2s"})); err == nil ||
		!strings.Contains(err.Error(), "FUNCTION_TIMEOUT 2s is not more than SWEEP_MARGIN 2s") {
		t.Fatalf("timeout 2s, margin 2s: err = %v", err)
	}
	if _, err := reaperapp.FromEnv(lookup(map[string]string{"IDEMPOTENCY_TABLE": "t", "FUNCTION_TIMEOUT": "3s"})); err != nil {
		t.Fatalf("timeout 3s, margin 2s: %v", err)
	}
	// The consumer's scope: the reaper leaves other consumers' records in a shared table.
	if cfg, err := reaperapp.FromEnv(lookup(map[string]string{"IDEMPOTENCY_TABLE": "t", "IDEMPOTENCY_SCOPE": "payments"})); err != nil || cfg.Scope != "payments" {
		t.Fatalf("IDEMPOTENCY_SCOPE=payments: cfg=%+v err=%v", cfg, err)
	}
	if _, err := reaperapp.FromEnv(lookup(map[string]string{"IDEMPOTENCY_TABLE": "t", "IDEMPOTENCY_SCOPE": "a#b"})); err == nil || !strings.Contains(err.Error(), "IDEMPOTENCY_SCOPE") {
		t.Fatalf("IDEMPOTENCY_SCOPE=a#b: err = %v, want it refused", err)
	}
}

// TestNoIndexNoReaper: a table without the in-flight index has nothing for the reaper
// to query; its init says so instead of failing every sweep.
func TestNoIndexNoReaper(t *testing.T) {
	cfg, err := reaperapp.FromEnv(func(k string) (string, bool) {
		v, ok := map[string]string{"IDEMPOTENCY_TABLE": "t", "IDEMPOTENCY_INDEX": "-"}[k]
		return v, ok
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = reaperapp.New(cfg, reaperapp.Deps{DynamoDB: awstest.DynamoDB(t)})
	if !errors.Is(err, persistence.ErrNoIndex) || !strings.Contains(err.Error(), "IDEMPOTENCY_INDEX=-") {
		t.Fatalf("New: %v, want ErrNoIndex and what to do", err)
	}
}
