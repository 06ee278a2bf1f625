package idem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/emf"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/dedupgroup"
)

// countingHandler is a business handler fake: it counts runs per key and fails or
// blocks as told.
type countingHandler struct {
	fail  map[string]error         // by key
	block map[string]chan struct{} // by key: wait for close before returning
	start chan string              // if set, receives the key when a run starts

	mu   sync.Mutex
	runs map[string]int
}

func (h *countingHandler) Handle(ctx context.Context, req *idem.Request) (idem.Result, error) {
	h.mu.Lock()
	if h.runs == nil {
		h.runs = map[string]int{}
	}
	h.runs[req.Key]++
	h.mu.Unlock()
	if h.start != nil {
		h.start <- req.Key
	}
	if c := h.block[req.Key]; c != nil {
		<-c
	}
	if err := h.fail[req.Key]; err != nil {
		return idem.Result{}, err
	}
	return idem.Result{Response: append([]byte("done:"), req.Payload...)}, nil
}

func (h *countingHandler) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[key]
}

func newClient(t *testing.T) *idem.Client {
	t.Helper()
	c, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "t"})
	if err != nil {
		t.Fatalf("idem.New: %v", err)
	}
	return c
}

func keyedMsg(id, key, body string) events.SQSMessage {
	return events.SQSMessage{
		MessageId:         id,
		Body:              body,
		Attributes:        map[string]string{},
		MessageAttributes: map[string]events.SQSMessageAttribute{idem.KeyAttribute: strAttr("String", key)},
	}
}

// logLines parses JSON log lines.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, s := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if s == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, s)
		}
		out = append(out, m)
	}
	return out
}

func TestSQSHandlerDeliveries(t *testing.T) {
	var logs bytes.Buffer
	h := &countingHandler{fail: map[string]error{
		"k-bad":   idem.Permanent(errors.New("invalid amount")),
		"k-flaky": errors.New("gateway timeout"),
	}}
	m := emf.NewMetrics(nil, "ns", "svc")
	keys := testKeys(t)
	rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{
		Client: newClient(t), Handler: h, KeyField: "payment_id", Metrics: m,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Keys: keys,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-1"})
	body := `{"payment_id":"p-1","amount_cents":500}`

	steps := []struct {
		name      string
		msg       events.SQSMessage
		permanent bool
		retry     bool
		missing   bool
		outcome   string
		key       string // whose run count to check
		runs      int
	}{
		{name: "first delivery applied", msg: keyedMsg("m1", "k-1", body), outcome: "applied", key: "k-1", runs: 1},
		{name: "redelivery is a duplicate", msg: keyedMsg("m2", "k-1", body), outcome: "duplicate", key: "k-1", runs: 1},
		{name: "same key, other payload", msg: keyedMsg("m3", "k-1", `{"payment_id":"p-1","amount_cents":999}`), permanent: true, outcome: "permanent", key: "k-1", runs: 1},
		{name: "key from the JSON field", msg: events.SQSMessage{MessageId: "m4", Body: `{"payment_id":"p-2"}`}, outcome: "applied", key: "p-2", runs: 1},
		{name: "missing key", msg: events.SQSMessage{MessageId: "m5", Body: `{"amount_cents":1}`}, permanent: true, missing: true, outcome: "permanent"},
		{name: "handler permanent error", msg: keyedMsg("m6", "k-bad", body), permanent: true, outcome: "permanent", key: "k-bad", runs: 1},
		{name: "permanent error replayed without running", msg: keyedMsg("m7", "k-bad", body), permanent: true, outcome: "permanent", key: "k-bad", runs: 1},
		{name: "handler retryable error", msg: keyedMsg("m8", "k-flaky", body), retry: true, outcome: "retry", key: "k-flaky", runs: 1},
		{name: "retryable failure runs again", msg: keyedMsg("m9", "k-flaky", body), retry: true, outcome: "retry", key: "k-flaky", runs: 2},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			logs.Reset()
			err := rf(ctx, st.msg)
			switch {
			case st.permanent:
				if err == nil || !idem.IsPermanent(err) {
					t.Errorf("error = %v, want a permanent one", err)
				}
			case st.retry:
				if err == nil || idem.IsPermanent(err) {
					t.Errorf("error = %v, want a retryable one", err)
				}
			default:
				if err != nil {
					t.Errorf("error = %v, want nil", err)
				}
			}
			if errors.Is(err, idem.ErrMissingKey) != st.missing {
				t.Errorf("errors.Is(%v, ErrMissingKey) != %v", err, st.missing)
			}
			if st.key != "" && h.count(st.key) != st.runs {
				t.Errorf("handler ran %d times for %s, want %d", h.count(st.key), st.key, st.runs)
			}
			lines := logLines(t, &logs)
			if len(lines) != 1 {
				t.Fatalf("%d log lines, want 1: %s", len(lines), logs.String())
			}
			l := lines[0]
			if l["outcome"] != st.outcome || l["message_id"] != st.msg.MessageId || l["aws_request_id"] != "req-1" {
				t.Errorf("log line = %v, want outcome %s", l, st.outcome)
			}
			if st.key != "" && l["key_hash"] != keys.LogHash(st.key) {
				t.Errorf("key_hash = %v, want %s", l["key_hash"], keys.LogHash(st.key))
			}
			if st.outcome == "applied" && l["attempt"] != 1.0 {
				t.Errorf("attempt = %v, want 1", l["attempt"])
			}
			if strings.Contains(logs.String(), "amount_cents") {
				t.Errorf("log line contains the body: %s", logs.String())
			}
		})
	}
	want := map[string]float64{emf.MetricAcquired: 2, emf.MetricDuplicate: 1}
	if got := m.Snapshot(); !mapsEqual(got, want) {
		t.Errorf("metrics = %v, want %v", got, want)
	}
}

func TestSQSHandlerInProgress(t *testing.T) {
	release := make(chan struct{})
	h := &countingHandler{block: map[string]chan struct{}{"k": release}, start: make(chan string, 1)}
	m := emf.NewMetrics(nil, "ns", "svc")
	rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: newClient(t), Handler: h, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- rf(context.Background(), keyedMsg("m1", "k", "{}")) }()
	select {
	case <-h.start:
	case <-time.After(5 * time.Second):
		t.Fatal("first delivery never started")
	}
	err = rf(context.Background(), keyedMsg("m2", "k", "{}"))
	close(release)
	if !errors.Is(err, idem.ErrInProgress) || idem.IsPermanent(err) {
		t.Errorf("concurrent delivery error = %v, want a retryable ErrInProgress", err)
	}
	if err := <-first; err != nil {
		t.Errorf("first delivery: %v", err)
	}
	if got := m.Snapshot(); got[emf.MetricInProgress] != 1 || got[emf.MetricAcquired] != 1 {
		t.Errorf("metrics = %v", got)
	}
}

func TestSQSHandlerThroughBatchProcessor(t *testing.T) {
	h := &countingHandler{fail: map[string]error{"k-poison": idem.Permanent(errors.New("bad"))}}
	m := emf.NewMetrics(nil, "ns", "svc")
	rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: newClient(t), Handler: h, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	dl := &fakeDL{}
	p := newProcessor(t, sqsbatch.BatchConfig{Handle: rf, DeadLetter: dl, Metrics: m})

	group := func(msg events.SQSMessage, g string) events.SQSMessage {
		msg.Attributes = map[string]string{"MessageGroupId": g}
		return msg
	}
	body := `{"amount_cents":100}`
	ev := events.SQSEvent{Records: []events.SQSMessage{
		group(keyedMsg("m1", "k-1", body), "acct-1"),
		group(keyedMsg("m2", "k-1", body), "acct-1"), // in-batch duplicate
		group(keyedMsg("m3", "k-poison", body), "acct-1"),
		group(keyedMsg("m4", "k-2", body), "acct-1"),
		group(events.SQSMessage{MessageId: "m5", Body: body}, "acct-2"), // no key
		group(keyedMsg("m6", "k-3", body), "acct-2"),
	}}
	resp, err := p.Process(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := failureIDs(resp); len(got) != 0 {
		t.Errorf("failures = %v, want none", got)
	}
	for key, want := range map[string]int{"k-1": 1, "k-poison": 1, "k-2": 1, "k-3": 1} {
		if got := h.count(key); got != want {
			t.Errorf("handler ran %d times for %s, want %d", got, key, want)
		}
	}
	if !slices.Equal(sorted(dl.ids...), []string{"m3", "m5"}) {
		t.Errorf("dead-lettered %v, want m3 and m5", dl.ids)
	}
	if !errors.Is(dl.causes[slices.Index(dl.ids, "m5")], idem.ErrMissingKey) {
		t.Errorf("m5 dead-lettered with %v, want ErrMissingKey", dl.causes)
	}
	want := map[string]float64{
		emf.MetricAcquired: 3, emf.MetricDuplicate: 1, emf.MetricPermanentFailure: 2, emf.MetricDeadLettered: 2,
	}
	if got := m.Snapshot(); !mapsEqual(got, want) {
		t.Errorf("metrics = %v, want %v", got, want)
	}

	// The whole batch redelivered: every record is a duplicate or a stored failure,
	// the handler runs no more.
	resp, err = p.Process(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("redelivery: %v, %v", resp, err)
	}
	for _, key := range []string{"k-1", "k-poison", "k-2", "k-3"} {
		if got := h.count(key); got != 1 {
			t.Errorf("after redelivery handler ran %d times for %s, want 1", got, key)
		}
	}
}

func TestNewSQSHandlerValidation(t *testing.T) {
	c := newClient(t)
	h := &countingHandler{}
	for _, tt := range []struct {
		name string
		cfg  sqsbatch.SQSConfig
		want string
	}{
		{"no client", sqsbatch.SQSConfig{Handler: h}, "Client is nil"},
		{"no handler", sqsbatch.SQSConfig{Client: c}, "Handler is nil"},
		{"key from a field without one", sqsbatch.SQSConfig{Client: c, Handler: h, KeySource: idem.KeyFromField}, "needs a JSON field"},
		{"an unknown key source", sqsbatch.SQSConfig{Client: c, Handler: h, KeySource: idem.KeySource(9)}, "is not a key source"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := sqsbatch.NewSQSHandler(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want %q", err, tt.want)
			}
		})
	}
	if _, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: h}); err != nil {
		t.Errorf("valid config: %v", err)
	}
}

// TestSQSHandlerObservesTheHandlersDuration: each record's handler time goes to the
// HandlerDuration metric, in milliseconds.
func TestSQSHandlerObservesTheHandlersDuration(t *testing.T) {
	var buf bytes.Buffer
	m := emf.NewMetrics(&buf, "ns", "svc")
	h := idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
		time.Sleep(30 * time.Millisecond)
		return idem.Result{}, nil
	})
	rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: newClient(t), Handler: h, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := rf(context.Background(), keyedMsg("m1", "k-dur", `{}`)); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	_, raw := parseEMF(t, buf.String())
	var ms float64
	switch v := raw[0][emf.MetricHandlerDuration].(type) {
	case float64:
		ms = v
	case []any:
		if len(v) != 1 {
			t.Fatalf("HandlerDuration %v, want one value", v)
		}
		ms, _ = v[0].(float64)
	default:
		t.Fatalf("HandlerDuration %v (%T), want one value", v, v)
	}
	if ms < 30 || ms > 10_000 {
		t.Errorf("HandlerDuration %v ms for a handler that slept 30 ms", ms)
	}
}

// TestSQSHandlerCountsAGuardedDuplicate: a record whose guard found its effect already
// there (written under another key) is a guarded duplicate in the log and the metrics,
// not an applied record.
func TestSQSHandlerCountsAGuardedDuplicate(t *testing.T) {
	e := newDynamoEnv(t)
	c := e.client(t)
	ctx := context.Background()
	if _, err := c.Do(ctx, req("key-1", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Writes: []types.TransactWriteItem{journal(e, "pay-g")}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	m := emf.NewMetrics(nil, "ns", "svc")
	guarded := idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Writes: []types.TransactWriteItem{journal(e, "pay-g"), e.bizWrite("pay-g")}, Guards: []int{0}}, nil
	})
	rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: guarded, Metrics: m, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := rf(ctx, keyedMsg("m2", "key-2", `{}`)); err != nil {
		t.Fatal(err)
	}
	if got := m.Snapshot(); got[emf.MetricGuarded] != 1 || got[emf.MetricAcquired] != 0 {
		t.Errorf("metrics %v, want one guarded and none acquired", got)
	}
	if lines := logLines(t, &logs); len(lines) != 1 || lines[0]["outcome"] != "guarded_duplicate" {
		t.Errorf("log %v, want one line with the outcome guarded_duplicate", lines)
	}
	if n := e.bizCount(t, "pay-g"); n != 0 {
		t.Errorf("%d effects, want none: the guard stood", n)
	}
}

// TestDeadLetterKeepsDeduplicationGroup: a message dead-lettered twice (two consumers,
// or a retry after a lost answer), with different causes, goes to the dead-letter queue
// with the same deduplication id and the same group, so per-group deduplication
// (high-throughput FIFO) keeps one copy. A message without a group gets a fixed one.
func TestDeadLetterKeepsDeduplicationGroup(t *testing.T) {
	var m dedupgroup.Map
	for _, group := range []string{"acct-1", ""} {
		msg := poisonMsg()
		msg.MessageId += "-" + group // a message's group never changes: one id per group
		msg.Attributes = map[string]string{"MessageGroupId": group}
		for _, cause := range []error{errors.New("bad json"), errors.New("payload mismatch")} {
			c := &captureSender{}
			d := &sqsmsg.SQSDeadLetter{API: c, QueueURL: "https://sqs.us-east-1.amazonaws.com/1/dlq.fifo", Source: "t"}
			if err := d.DeadLetter(context.Background(), msg, idem.Permanent(cause)); err != nil {
				t.Fatal(err)
			}
			if err := m.Add("dlq", aws.ToString(c.in.MessageDeduplicationId), aws.ToString(c.in.MessageGroupId)); err != nil {
				t.Error(err)
			}
		}
	}
	if m.Len() != 2 {
		t.Errorf("%d deduplication ids for two messages, want 2", m.Len())
	}
}

// TestContentBasedDeduplicationIDIsNotAKey: a FIFO queue with content-based
// deduplication gives a message the SHA-256 of its body as its deduplication id. SQS
// drops the same body only for 5 minutes; a record keyed by that id would swallow the
// same body sent again as a new operation after that, for the record's whole retention.
// The consumer refuses such a message (dead-lettered with the reason) unless it carries
// the key attribute or the key field, and the same body is two operations.
func TestContentBasedDeduplicationIDIsNotAKey(t *testing.T) {
	ctx := context.Background()
	client := awstest.SQS(t)
	q := awstest.FIFOQueue(ctx, t, client, "content", map[string]string{"ContentBasedDeduplication": "true"})
	body := `{"account":"a-1","amount_cents":500}`
	if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String(body), MessageGroupId: aws.String("a-1")}); err != nil {
		t.Fatal(err)
	}
	msgs, err := awstest.Drain(ctx, client, q)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v, %d messages", err, len(msgs))
	}
	got := msgs[0]
	msg := events.SQSMessage{MessageId: aws.ToString(got.MessageId), Body: aws.ToString(got.Body), Attributes: got.Attributes}
	if msg.Attributes["MessageDeduplicationId"] == "" {
		t.Fatal("the queue gave the message no deduplication id")
	}
	h := &countingHandler{}
	rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: newClient(t), Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	// The same body, delivered twice as SQS delivers it after its deduplication interval:
	// both refused, neither swallowed as a duplicate of the other.
	for i := range 2 {
		err := rf(ctx, msg)
		if !errors.Is(err, idem.ErrMissingKey) || !idem.IsPermanent(err) || !strings.Contains(err.Error(), "content-based deduplication") {
			t.Fatalf("delivery %d: %v, want a permanent missing-key error naming content-based deduplication", i, err)
		}
	}
	if n := h.count(msg.Attributes["MessageDeduplicationId"]); n != 0 {
		t.Fatalf("handler ran %d times under the body's hash", n)
	}
	// With the key attribute, each operation has its own key.
	for i, key := range []string{"op-1", "op-2"} {
		m := msg
		m.MessageAttributes = map[string]events.SQSMessageAttribute{idem.KeyAttribute: strAttr("String", key)}
		if err := rf(ctx, m); err != nil {
			t.Fatalf("operation %d with its key: %v", i, err)
		}
	}
	if h.count("op-1") != 1 || h.count("op-2") != 1 {
		t.Fatalf("runs op-1=%d op-2=%d, want one each", h.count("op-1"), h.count("op-2"))
	}
}
