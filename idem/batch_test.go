package idem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/emf"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
)

// recorder is a RecordFunc fake: it records which messages started, the start/end
// order per group and the peak number of records in flight, and fails or panics on
// the message ids it is told to.
type recorder struct {
	fail   map[string]error
	panics map[string]bool
	sleep  time.Duration
	// before, when set, runs inside the handler before the outcome is decided.
	before func(ctx context.Context, msg events.SQSMessage) error

	mu          sync.Mutex
	started     []string
	byGroup     map[string][]string
	inflight    int
	maxInflight int
}

func (r *recorder) handle(ctx context.Context, msg events.SQSMessage) error {
	id, g := msg.MessageId, msg.Attributes["MessageGroupId"]
	r.mu.Lock()
	if r.byGroup == nil {
		r.byGroup = map[string][]string{}
	}
	r.started = append(r.started, id)
	r.byGroup[g] = append(r.byGroup[g], "start "+id)
	r.inflight++
	r.maxInflight = max(r.maxInflight, r.inflight)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inflight--
		r.byGroup[g] = append(r.byGroup[g], "end "+id)
		r.mu.Unlock()
	}()
	if r.sleep > 0 {
		time.Sleep(r.sleep)
	}
	if r.before != nil {
		if err := r.before(ctx, msg); err != nil {
			return err
		}
	}
	if r.panics[id] {
		panic("boom " + id)
	}
	return r.fail[id]
}

func (r *recorder) ran() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := slices.Clone(r.started)
	slices.Sort(s)
	return s
}

// fakeDL is a DeadLetterer fake.
type fakeDL struct {
	err   error
	panic bool

	mu     sync.Mutex
	ids    []string
	causes []error
}

func (d *fakeDL) DeadLetter(_ context.Context, msg events.SQSMessage, cause error) error {
	d.mu.Lock()
	d.ids = append(d.ids, msg.MessageId)
	d.causes = append(d.causes, cause)
	d.mu.Unlock()
	if d.panic {
		panic("dead-letter boom")
	}
	return d.err
}

func fifoMsg(id, group string) events.SQSMessage {
	return events.SQSMessage{
		MessageId:      id,
		Body:           `{"secret":"body-of-` + id + `"}`,
		Attributes:     map[string]string{"MessageGroupId": group, "MessageDeduplicationId": "d-" + id},
		EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:in.fifo",
	}
}

func stdMsg(id string) events.SQSMessage {
	return events.SQSMessage{MessageId: id, Body: `{"secret":"body-of-` + id + `"}`, Attributes: map[string]string{}}
}

// fifoEvent builds an event from "A1", "B2"... ids: the letter is the group.
func fifoEvent(ids ...string) events.SQSEvent {
	var ev events.SQSEvent
	for _, id := range ids {
		ev.Records = append(ev.Records, fifoMsg(id, id[:1]))
	}
	return ev
}

func stdEvent(ids ...string) events.SQSEvent {
	var ev events.SQSEvent
	for _, id := range ids {
		ev.Records = append(ev.Records, stdMsg(id))
	}
	return ev
}

func failureIDs(resp events.SQSEventResponse) []string {
	ids := []string{}
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

func newProcessor(t *testing.T, cfg sqsbatch.BatchConfig) *sqsbatch.BatchProcessor {
	t.Helper()
	p, err := sqsbatch.NewBatchProcessor(cfg)
	if err != nil {
		t.Fatalf("NewBatchProcessor: %v", err)
	}
	return p
}

func sorted(s ...string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	if s == nil {
		s = []string{}
	}
	return s
}

var errTransient = errors.New("transient")

func TestBatchProcessorOutcomes(t *testing.T) {
	permanent := idem.Permanent(errors.New("bad payment"))
	tests := []struct {
		name         string
		ev           events.SQSEvent
		fail         map[string]error
		panics       map[string]bool
		dl           *fakeDL
		wantFailures []string // exact, in order
		wantRan      []string // any order
		wantDL       []string
	}{
		{
			name:         "FIFO failure stops its group only",
			ev:           fifoEvent("A1", "A2", "A3", "B1", "B2", "B3"),
			fail:         map[string]error{"A2": errTransient},
			wantFailures: []string{"A2", "A3"},
			wantRan:      []string{"A1", "A2", "B1", "B2", "B3"},
		},
		{
			name:         "FIFO failures listed in event order",
			ev:           fifoEvent("A1", "B1", "A2", "B2", "C1", "A3"),
			fail:         map[string]error{"A1": errTransient, "B1": errTransient},
			wantFailures: []string{"A1", "B1", "A2", "B2", "A3"},
			wantRan:      []string{"A1", "B1", "C1"},
		},
		{
			name:         "FIFO last record fails",
			ev:           fifoEvent("A1", "A2", "A3"),
			fail:         map[string]error{"A3": errTransient},
			wantFailures: []string{"A3"},
			wantRan:      []string{"A1", "A2", "A3"},
		},
		{
			name:         "standard records are independent",
			ev:           stdEvent("s1", "s2", "s3", "s4"),
			fail:         map[string]error{"s2": errTransient, "s4": errTransient},
			wantFailures: []string{"s2", "s4"},
			wantRan:      []string{"s1", "s2", "s3", "s4"},
		},
		{
			name:         "all succeed",
			ev:           fifoEvent("A1", "A2", "B1"),
			wantFailures: []string{},
			wantRan:      []string{"A1", "A2", "B1"},
		},
		{
			name:         "permanent dead-lettered is acknowledged and the group continues",
			ev:           fifoEvent("A1", "A2", "A3", "B1"),
			fail:         map[string]error{"A2": permanent},
			dl:           &fakeDL{},
			wantFailures: []string{},
			wantRan:      []string{"A1", "A2", "A3", "B1"},
			wantDL:       []string{"A2"},
		},
		{
			name:         "permanent on standard queue dead-lettered",
			ev:           stdEvent("s1", "s2"),
			fail:         map[string]error{"s1": permanent},
			dl:           &fakeDL{},
			wantFailures: []string{},
			wantRan:      []string{"s1", "s2"},
			wantDL:       []string{"s1"},
		},
		{
			name:         "dead-letter failure fails the record and stops the group",
			ev:           fifoEvent("A1", "A2", "A3", "B1"),
			fail:         map[string]error{"A2": permanent},
			dl:           &fakeDL{err: errors.New("dlq unavailable")},
			wantFailures: []string{"A2", "A3"},
			wantRan:      []string{"A1", "A2", "B1"},
			wantDL:       []string{"A2"},
		},
		{
			name:         "dead-letterer panic fails the record",
			ev:           fifoEvent("A1", "A2"),
			fail:         map[string]error{"A1": permanent},
			dl:           &fakeDL{panic: true},
			wantFailures: []string{"A1", "A2"},
			wantRan:      []string{"A1"},
			wantDL:       []string{"A1"},
		},
		{
			name:         "retryable error is not dead-lettered",
			ev:           fifoEvent("A1", "A2"),
			fail:         map[string]error{"A1": fmt.Errorf("wrapped: %w", idem.ErrInProgress)},
			dl:           &fakeDL{},
			wantFailures: []string{"A1", "A2"},
			wantRan:      []string{"A1"},
		},
		{
			name:         "nil DeadLetter reports permanent errors as failures",
			ev:           fifoEvent("A1", "A2", "B1"),
			fail:         map[string]error{"A1": permanent},
			wantFailures: []string{"A1", "A2"},
			wantRan:      []string{"A1", "B1"},
		},
		{
			name:         "panic in FIFO handler is a failure",
			ev:           fifoEvent("A1", "A2", "B1", "B2"),
			panics:       map[string]bool{"A1": true},
			dl:           &fakeDL{},
			wantFailures: []string{"A1", "A2"},
			wantRan:      []string{"A1", "B1", "B2"},
		},
		{
			name:         "panic in standard handler is a failure",
			ev:           stdEvent("s1", "s2", "s3"),
			panics:       map[string]bool{"s2": true},
			wantFailures: []string{"s2"},
			wantRan:      []string{"s1", "s2", "s3"},
		},
		{
			name:         "empty event",
			ev:           events.SQSEvent{},
			wantFailures: []string{},
			wantRan:      []string{},
		},
	}
	for _, tt := range tests {
		for _, conc := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/concurrency=%d", tt.name, conc), func(t *testing.T) {
				rec := &recorder{fail: tt.fail, panics: tt.panics}
				cfg := sqsbatch.BatchConfig{Handle: rec.handle, Concurrency: conc}
				var dl *fakeDL
				if tt.dl != nil {
					dl = &fakeDL{err: tt.dl.err, panic: tt.dl.panic}
					cfg.DeadLetter = dl
				}
				resp, err := newProcessor(t, cfg).Process(context.Background(), tt.ev)
				if err != nil {
					t.Fatalf("Process error: %v", err)
				}
				if resp.BatchItemFailures == nil {
					t.Error("BatchItemFailures is nil, want an empty list")
				}
				if got := failureIDs(resp); !slices.Equal(got, tt.wantFailures) {
					t.Errorf("failures = %v, want %v", got, tt.wantFailures)
				}
				if got := rec.ran(); !slices.Equal(got, sorted(tt.wantRan...)) {
					t.Errorf("ran = %v, want %v", got, sorted(tt.wantRan...))
				}
				if dl != nil {
					if !slices.Equal(sorted(dl.ids...), sorted(tt.wantDL...)) {
						t.Errorf("dead-lettered = %v, want %v", dl.ids, tt.wantDL)
					}
					for _, c := range dl.causes {
						if !idem.IsPermanent(c) {
							t.Errorf("dead-letter cause %v is not permanent", c)
						}
					}
				}
			})
		}
	}
}

func TestBatchProcessorOrderWithinGroup(t *testing.T) {
	var ids []string
	for i := 1; i <= 5; i++ {
		for _, g := range []string{"A", "B", "C", "D"} {
			ids = append(ids, fmt.Sprintf("%s%d", g, i))
		}
	}
	rec := &recorder{sleep: 2 * time.Millisecond}
	resp, err := newProcessor(t, sqsbatch.BatchConfig{Handle: rec.handle, Concurrency: 4}).Process(context.Background(), fifoEvent(ids...))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Process = %v, %v; want no failures", resp, err)
	}
	for _, g := range []string{"A", "B", "C", "D"} {
		var want []string
		for i := 1; i <= 5; i++ {
			want = append(want, fmt.Sprintf("start %s%d", g, i), fmt.Sprintf("end %s%d", g, i))
		}
		if got := rec.byGroup[g]; !slices.Equal(got, want) {
			t.Errorf("group %s ran as %v, want %v", g, got, want)
		}
	}
}

func TestBatchProcessorGroupsRunConcurrently(t *testing.T) {
	// The first record of each group waits until the first record of the other group
	// has started: that can only happen if the two groups run at the same time.
	arrived := map[string]chan struct{}{"A": make(chan struct{}), "B": make(chan struct{})}
	other := map[string]string{"A": "B", "B": "A"}
	rec := &recorder{before: func(ctx context.Context, msg events.SQSMessage) error {
		g := msg.Attributes["MessageGroupId"]
		if msg.MessageId != g+"1" {
			return nil
		}
		close(arrived[g])
		select {
		case <-arrived[other[g]]:
			return nil
		case <-time.After(5 * time.Second):
			return fmt.Errorf("group %s never ran alongside %s", other[g], g)
		}
	}}
	resp, err := newProcessor(t, sqsbatch.BatchConfig{Handle: rec.handle, Concurrency: 2}).Process(context.Background(), fifoEvent("A1", "A2", "B1", "B2"))
	if err != nil {
		t.Fatal(err)
	}
	if got := failureIDs(resp); len(got) != 0 {
		t.Fatalf("failures = %v: groups did not run concurrently", got)
	}
}

func TestBatchProcessorConcurrencyBound(t *testing.T) {
	var fifoIDs, stdIDs []string
	for i := range 24 {
		fifoIDs = append(fifoIDs, fmt.Sprintf("%c%d", 'A'+i%8, i/8))
		stdIDs = append(stdIDs, fmt.Sprintf("s%d", i))
	}
	tests := []struct {
		name string
		ev   events.SQSEvent
		conc int
	}{
		{"FIFO groups, 1", fifoEvent(fifoIDs...), 1},
		{"FIFO groups, 3", fifoEvent(fifoIDs...), 3},
		{"standard, 1", stdEvent(stdIDs...), 1},
		{"standard, 5", stdEvent(stdIDs...), 5},
		{"standard, default", stdEvent(stdIDs...), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{sleep: 10 * time.Millisecond}
			resp, err := newProcessor(t, sqsbatch.BatchConfig{Handle: rec.handle, Concurrency: tt.conc}).Process(context.Background(), tt.ev)
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("Process = %v, %v; want no failures", resp, err)
			}
			limit := tt.conc
			if limit == 0 {
				limit = 10
			}
			if len(rec.started) != len(tt.ev.Records) {
				t.Errorf("ran %d records, want %d", len(rec.started), len(tt.ev.Records))
			}
			if rec.maxInflight > limit {
				t.Errorf("%d records in flight at once, limit %d", rec.maxInflight, limit)
			}
			if limit > 1 && rec.maxInflight < 2 {
				t.Errorf("at most %d record in flight: nothing ran concurrently", rec.maxInflight)
			}
		})
	}
}

func TestBatchProcessorDeadline(t *testing.T) {
	const margin = 400 * time.Millisecond
	// sleepPastMargin makes the first record run until the deadline is inside the margin.
	sleepPastMargin := func(ctx context.Context, msg events.SQSMessage) error {
		if strings.HasSuffix(msg.MessageId, "1") {
			dl, _ := ctx.Deadline()
			time.Sleep(time.Until(dl) - margin + 50*time.Millisecond)
		}
		return nil
	}
	tests := []struct {
		name         string
		timeout      time.Duration // the invocation's time left; 0: cancelled already
		margin       time.Duration
		conc         int
		ev           events.SQSEvent
		before       func(context.Context, events.SQSMessage) error
		wantRan      []string
		wantFailures []string
	}{
		{
			name:         "deadline inside the margin: nothing runs",
			timeout:      time.Second,
			margin:       2 * time.Second,
			ev:           fifoEvent("A1", "A2", "B1"),
			wantRan:      []string{},
			wantFailures: []string{"A1", "A2", "B1"},
		},
		{
			name:         "default margin is 2s",
			timeout:      time.Second,
			ev:           stdEvent("s1", "s2"),
			wantRan:      []string{},
			wantFailures: []string{"s1", "s2"},
		},
		{
			name:         "cancelled context: nothing runs",
			timeout:      0, // cancelled before Process
			ev:           stdEvent("s1", "s2", "s3"),
			wantRan:      []string{},
			wantFailures: []string{"s1", "s2", "s3"},
		},
		{
			name:         "deadline far away: everything runs",
			timeout:      time.Minute,
			ev:           fifoEvent("A1", "A2"),
			wantRan:      []string{"A1", "A2"},
			wantFailures: []string{},
		},
		{
			name:         "deadline reached mid-group",
			timeout:      2 * margin,
			margin:       margin,
			conc:         1,
			ev:           fifoEvent("A1", "A2", "A3"),
			before:       sleepPastMargin,
			wantRan:      []string{"A1"},
			wantFailures: []string{"A2", "A3"},
		},
		{
			name:         "deadline reached mid-batch on a standard queue",
			timeout:      2 * margin,
			margin:       margin,
			conc:         1,
			ev:           stdEvent("s1", "s2", "s3"),
			before:       sleepPastMargin,
			wantRan:      []string{"s1"},
			wantFailures: []string{"s2", "s3"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{before: tt.before}
			p := newProcessor(t, sqsbatch.BatchConfig{Handle: rec.handle, DeadlineMargin: tt.margin, Concurrency: tt.conc})
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			if tt.timeout == 0 {
				cancel()
			}
			resp, err := p.Process(ctx, tt.ev)
			if err != nil {
				t.Fatalf("Process error: %v", err)
			}
			if got := rec.ran(); !slices.Equal(got, sorted(tt.wantRan...)) {
				t.Errorf("ran = %v, want %v", got, tt.wantRan)
			}
			if got := failureIDs(resp); !slices.Equal(got, tt.wantFailures) {
				t.Errorf("failures = %v, want %v", got, tt.wantFailures)
			}
		})
	}
}

func TestBatchProcessorMissingMessageID(t *testing.T) {
	ev := fifoEvent("A1", "A2", "A3", "B1", "B2")
	ev.Records[1].MessageId = ""
	ev.Records = append(ev.Records, stdMsg(""), stdMsg("s1"))
	rec := &recorder{fail: map[string]error{"B2": errTransient}}
	resp, err := newProcessor(t, sqsbatch.BatchConfig{Handle: rec.handle}).Process(context.Background(), ev)
	if err == nil || !strings.Contains(err.Error(), "without a messageId") {
		t.Errorf("Process error = %v, want one about records without a messageId", err)
	}
	if got, want := failureIDs(resp), []string{"A3", "B2"}; !slices.Equal(got, want) {
		t.Errorf("failures = %v, want %v", got, want)
	}
	if got, want := rec.ran(), []string{"A1", "B1", "B2", "s1"}; !slices.Equal(got, want) {
		t.Errorf("ran = %v, want %v", got, want)
	}
	// A record without a messageId that the deadline skips is not reported under the
	// empty id either: the whole batch is retried.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // within the default 2s margin
	defer cancel()
	resp, err = newProcessor(t, sqsbatch.BatchConfig{Handle: rec.handle}).Process(ctx, events.SQSEvent{Records: []events.SQSMessage{stdMsg(""), stdMsg("s2")}})
	if err == nil || !strings.Contains(err.Error(), "without a messageId") {
		t.Errorf("past the deadline: Process error = %v, want one about records without a messageId", err)
	}
	if got, want := failureIDs(resp), []string{"s2"}; !slices.Equal(got, want) {
		t.Errorf("past the deadline: failures = %v, want %v", got, want)
	}
}

func TestBatchProcessorLogsAndMetrics(t *testing.T) {
	var logs bytes.Buffer
	m := emf.NewMetrics(nil, "ns", "svc")
	rec := &recorder{fail: map[string]error{
		"A1": idem.Permanent(errors.New("bad")),
		"B1": errTransient,
		"C1": idem.Permanent(errors.New("bad too")),
	}, panics: map[string]bool{"D1": true}}
	keys := testKeys(t)
	p := newProcessor(t, sqsbatch.BatchConfig{
		Handle:     rec.handle,
		DeadLetter: dlByID{"C1": errors.New("dlq down")},
		Logger:     slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics:    m,
		Keys:       keys,
	})
	ev := fifoEvent("A1", "A2", "B1", "B2", "C1", "D1", "E1")
	resp, err := p.Process(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := failureIDs(resp), []string{"B1", "B2", "C1", "D1"}; !slices.Equal(got, want) {
		t.Errorf("failures = %v, want %v", got, want)
	}

	wantOutcome := map[string]string{
		"A1": "dead_lettered", "A2": "ok", "B1": "retry", "B2": "skipped_after_group_failure",
		"C1": "retry", "D1": "retry", "E1": "ok",
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != len(ev.Records) {
		t.Fatalf("%d log lines, want one per record (%d):\n%s", len(lines), len(ev.Records), logs.String())
	}
	for _, line := range lines {
		if strings.Contains(line, "body-of-") || strings.Contains(line, "secret") {
			t.Errorf("log line contains the body: %s", line)
		}
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, line)
		}
		id, _ := l["message_id"].(string)
		if l["outcome"] != wantOutcome[id] {
			t.Errorf("%s: outcome %v, want %s", id, l["outcome"], wantOutcome[id])
		}
		if l["group_hash"] != keys.LogHash(id[:1]) || l["group"] != nil {
			t.Errorf("%s: group %v, group_hash %v, want the group's keyed hash %s alone (a group is often a business id)", id, l["group"], l["group_hash"], keys.LogHash(id[:1]))
		}
		if _, ok := l["duration_ms"].(float64); !ok {
			t.Errorf("%s: no duration_ms: %s", id, line)
		}
		if wantOutcome[id] != "ok" && l["error"] == nil {
			t.Errorf("%s: no error in %s", id, line)
		}
		if id == "D1" && (l["level"] != "ERROR" || !strings.Contains(fmt.Sprint(l["error"]), "panicked") || l["stack"] == nil) {
			t.Errorf("panic line should be an ERROR with the panic and a stack: %s", line)
		}
	}

	want := map[string]float64{
		emf.MetricPermanentFailure: 2, // A1 (dead-lettered), C1 (dead-letter failed)
		emf.MetricDeadLettered:     1,
		emf.MetricRetry:            2, // B1, D1 (panic)
		emf.MetricSkipped:          1, // B2
	}
	if got := m.Snapshot(); !mapsEqual(got, want) {
		t.Errorf("metrics = %v, want %v", got, want)
	}
}

// dlByID is a DeadLetterer that fails for the ids in the map.
type dlByID map[string]error

func (d dlByID) DeadLetter(_ context.Context, msg events.SQSMessage, _ error) error {
	return d[msg.MessageId]
}

func mapsEqual(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestBatchProcessorResponseJSON(t *testing.T) {
	rec := &recorder{fail: map[string]error{"s2": errTransient}}
	p := newProcessor(t, sqsbatch.BatchConfig{Handle: rec.handle})
	for _, tt := range []struct {
		name string
		ev   events.SQSEvent
		want string
	}{
		{"no failures", stdEvent("s1"), `{"batchItemFailures":[]}`},
		{"one failure", stdEvent("s1", "s2"), `{"batchItemFailures":[{"itemIdentifier":"s2"}]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := p.Process(context.Background(), tt.ev)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(resp)
			if string(b) != tt.want {
				t.Errorf("response = %s, want %s", b, tt.want)
			}
		})
	}
}

func TestNewBatchProcessorValidation(t *testing.T) {
	ok := func(context.Context, events.SQSMessage) error { return nil }
	tests := []struct {
		name    string
		cfg     sqsbatch.BatchConfig
		wantErr string
	}{
		{"valid", sqsbatch.BatchConfig{Handle: ok}, ""},
		{"nil handle", sqsbatch.BatchConfig{}, "Handle is nil"},
		{"negative concurrency", sqsbatch.BatchConfig{Handle: ok, Concurrency: -1}, "Concurrency"},
		{"negative margin", sqsbatch.BatchConfig{Handle: ok, DeadlineMargin: -time.Second}, "DeadlineMargin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := sqsbatch.NewBatchProcessor(tt.cfg)
			if tt.wantErr == "" {
				if err != nil || p == nil {
					t.Fatalf("NewBatchProcessor = %v, %v", p, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

// TestBatchAnswersADuplicateOfItsOwnPendingMessages: a batch that holds a key twice
// commits it once, and the second copy is answered from the record while the batch
// still holds its messages: they are sent once, at the batch's end, even to a standard
// queue that would keep a second copy.
func TestBatchAnswersADuplicateOfItsOwnPendingMessages(t *testing.T) {
	out := &capture{}
	c, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "batchdup", Sender: out})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	h := idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
		runs.Add(1)
		return idem.Result{Messages: []idem.Message{{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/receipts", Body: "receipt"}}}, nil
	})
	rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	bp, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: rf, Outbox: c})
	if err != nil {
		t.Fatal(err)
	}
	copyOf := func(id string) events.SQSMessage {
		m := keyedMsg(id, "pay-1", `{}`)
		m.Attributes = map[string]string{"MessageGroupId": "acct-1"}
		return m
	}
	resp, err := bp.Process(context.Background(), events.SQSEvent{Records: []events.SQSMessage{copyOf("m1"), copyOf("m2")}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("process: %+v, %v", resp, err)
	}
	if runs.Load() != 1 || len(out.entries) != 1 {
		t.Fatalf("handler ran %d times and %d messages were sent, want 1 and 1", runs.Load(), len(out.entries))
	}
}

// TestBatchOnADoneContextRunsNothing: a batch whose context is already canceled (the
// invocation is over) starts no record: each is returned to SQS as skipped, no record is
// written and no handler runs.
func TestBatchOnADoneContextRunsNothing(t *testing.T) {
	mem := memstore.NewMemoryStore()
	c, err := idem.New(idem.Config{Store: mem, Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
		runs.Add(1)
		return idem.Result{}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	metrics := emf.NewMetrics(nil, "ns", "test")
	bp, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: rf, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	for i := range 10 {
		id := fmt.Sprint("m-", i)
		ev.Records = append(ev.Records, keyedFIFORecord(id, fmt.Sprint("g-", i), fmt.Sprint("k-", i), `{}`))
	}
	// Canceled, and its Done channel never ready: every unit is offered to the
	// records' own check (a closed Done would let the batch's loop skip some first, at
	// random).
	resp, err := bp.Process(canceledNotDone{context.Background()}, ev)
	snap := metrics.Snapshot()
	if err != nil || len(resp.BatchItemFailures) != 10 || runs.Load() != 0 || mem.Len() != 0 || snap[emf.MetricSkipped] != 10 || snap[emf.MetricRetry] != 0 {
		t.Fatalf("a batch on a canceled context: %d failures, %v, %d runs, %d records, metrics %v; want all 10 skipped and nothing run or written",
			len(resp.BatchItemFailures), err, runs.Load(), mem.Len(), snap)
	}
}

// canceledNotDone is a context that says it is canceled, but whose Done never closes.
type canceledNotDone struct{ context.Context }

func (canceledNotDone) Err() error { return context.Canceled }

// TestBatchReportsAMessageIDOnce: SQS may hand a batch the same message twice; when both
// fail, its id is reported once.
func TestBatchReportsAMessageIDOnce(t *testing.T) {
	c, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{}, errors.New("transient")
	})})
	if err != nil {
		t.Fatal(err)
	}
	bp, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: rf})
	if err != nil {
		t.Fatal(err)
	}
	rec := keyedFIFORecord("m-1", "", "k-1", `{}`)
	delete(rec.Attributes, "MessageGroupId")
	resp, err := bp.Process(context.Background(), events.SQSEvent{Records: []events.SQSMessage{rec, rec}})
	if err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "m-1" {
		t.Fatalf("a message twice in a failed batch: %+v, %v; want its id once", resp, err)
	}
}

// TestBatchRunsARecordWithExactlyTheMarginLeft: a record starts while at least the
// deadline margin is left, and not once less is (time stands still in the bubble, so the
// time left is exactly the timeout set).
func TestBatchRunsARecordWithExactlyTheMarginLeft(t *testing.T) {
	for _, c := range []struct {
		left time.Duration
		runs bool
	}{{2 * time.Second, true}, {2*time.Second - time.Nanosecond, false}} {
		synctest.Test(t, func(t *testing.T) {
			ran := false
			p, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{DeadlineMargin: 2 * time.Second, Handle: func(context.Context, events.SQSMessage) error {
				ran = true
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), c.left)
			defer cancel()
			resp, err := p.Process(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1"}}})
			if err != nil || ran != c.runs || (len(resp.BatchItemFailures) == 0) != c.runs {
				t.Errorf("%s left, margin 2s: ran %v, failures %+v, %v; want run %v", c.left, ran, resp.BatchItemFailures, err, c.runs)
			}
		})
	}
}

// TestRecordLogNamesWhyTheDeadLetterFailed: a permanent failure that cannot be
// dead-lettered is retried, and its log line has both errors: the record's and the
// dead-letter queue's.
func TestRecordLogNamesWhyTheDeadLetterFailed(t *testing.T) {
	var logs bytes.Buffer
	p, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{
		Handle: func(context.Context, events.SQSMessage) error {
			return idem.Permanent(errors.New("the body is refused"))
		},
		DeadLetter: &fakeDL{err: errors.New("the dead-letter queue is down")},
		Logger:     slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.Process(context.Background(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1"}}})
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("%+v %v, want the record retried", resp, err)
	}
	lines := logLines(t, &logs)
	if len(lines) != 1 {
		t.Fatalf("%d log lines, want 1: %s", len(lines), logs.String())
	}
	msg, _ := lines[0]["error"].(string)
	if !strings.Contains(msg, "the body is refused") || !strings.Contains(msg, "the dead-letter queue is down") {
		t.Errorf("the record's error %q, want both errors", msg)
	}
}

// TestRecordWhoseCommitLostTheLeaseIsLoggedAsAnError: a record whose commit found its
// lease taken over is logged at ERROR (outcome lease_lost): the handler ran while another
// holder had the key.
func TestRecordWhoseCommitLostTheLeaseIsLoggedAsAnError(t *testing.T) {
	var logs bytes.Buffer
	c, err := idem.New(idem.Config{Store: &commitFaults{Store: memstore.NewMemoryStore(), complete: idem.ErrLeaseLost}, Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	record, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Response: []byte("r")}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	p, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: record, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Process(context.Background(), events.SQSEvent{Records: []events.SQSMessage{keyedFIFORecord("m1", "g", "k", `{}`)}}); err != nil {
		t.Fatal(err)
	}
	lines := logLines(t, &logs)
	if len(lines) != 1 || lines[0]["level"] != "ERROR" || lines[0]["outcome"] != "lease_lost" {
		t.Errorf("log lines %v, want one at ERROR with the outcome lease_lost", lines)
	}
}
