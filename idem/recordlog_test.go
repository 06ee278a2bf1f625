package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
)

// TestOneLogLinePerRecord runs NewSQSHandler under a BatchProcessor, both logging to one
// buffer: each record gets exactly one line, with everything an operator looks for:
// message id, group, receive count, request id, key hash, the precise outcome, attempt,
// duration and error.
func TestOneLogLinePerRecord(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	h := &countingHandler{fail: map[string]error{
		"k-bad":   idem.Permanent(errors.New("invalid amount")),
		"k-flaky": errors.New("gateway timeout"),
	}}
	keys := testKeys(t)
	rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: newClient(t), Handler: h, Logger: logger, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	p := newProcessor(t, sqsbatch.BatchConfig{Handle: rf, DeadLetter: dlByID{}, Logger: logger, Keys: keys})

	msg := func(id, group, key, receives string) events.SQSMessage {
		m := keyedMsg(id, key, `{"amount_cents":500}`)
		if key == "" {
			m.MessageAttributes = nil
		}
		m.Attributes = map[string]string{"MessageGroupId": group, "ApproximateReceiveCount": receives}
		return m
	}
	ev := events.SQSEvent{Records: []events.SQSMessage{
		msg("m1", "g1", "k-1", "1"),
		msg("m2", "g1", "k-1", "3"), // after m1 in its group: the stored result answers
		msg("m3", "g2", "k-bad", "1"),
		msg("m4", "g3", "", "2"),
		msg("m5", "g4", "k-flaky", "4"),
	}}
	want := map[string]struct {
		outcome, key string
		receives     float64
		attempt      bool
	}{
		"m1": {"applied", "k-1", 1, true},
		"m2": {"duplicate", "k-1", 3, false},
		"m3": {"dead_lettered", "k-bad", 1, false},
		"m4": {"dead_lettered", "", 2, false},
		"m5": {"retry", "k-flaky", 4, false},
	}
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-1"})
	if _, err := p.Process(ctx, ev); err != nil {
		t.Fatal(err)
	}

	lines := logLines(t, &logs)
	if len(lines) != len(ev.Records) {
		t.Fatalf("%d log lines for %d records, want one each:\n%s", len(lines), len(ev.Records), logs.String())
	}
	seen := map[string]bool{}
	for _, l := range lines {
		id, _ := l["message_id"].(string)
		w, ok := want[id]
		if !ok || seen[id] {
			t.Errorf("line for %q: unknown or repeated: %v", id, l)
			continue
		}
		seen[id] = true
		group := ev.Records[slices.IndexFunc(ev.Records, func(m events.SQSMessage) bool { return m.MessageId == id })].Attributes["MessageGroupId"]
		if l["msg"] != "sqs record" || l["outcome"] != w.outcome || l["receive_count"] != w.receives ||
			l["aws_request_id"] != "req-1" || l["group_hash"] != keys.LogHash(group) || l["group"] != nil {
			t.Errorf("%s: line %v, want outcome %s, receive_count %v, aws_request_id, group_hash (the group's keyed hash) and no group", id, l, w.outcome, w.receives)
		}
		if _, ok := l["duration_ms"].(float64); !ok {
			t.Errorf("%s: no duration_ms: %v", id, l)
		}
		if w.key != "" && (l["key_hash"] != keys.LogHash(w.key) || l["key_hash"] == idem.HashKey(w.key)) {
			t.Errorf("%s: key_hash %v, want the key's keyed hash %s (not its plain hash %s)", id, l["key_hash"], keys.LogHash(w.key), idem.HashKey(w.key))
		}
		if w.key == "" && l["key_hash"] != nil {
			t.Errorf("%s: key_hash %v for a message without a key", id, l["key_hash"])
		}
		if (l["attempt"] == 1.0) != w.attempt {
			t.Errorf("%s: attempt %v", id, l["attempt"])
		}
		if (w.outcome == "applied" || w.outcome == "duplicate") != (l["error"] == nil) {
			t.Errorf("%s: error %v with outcome %s", id, l["error"], w.outcome)
		}
		if w.outcome == "dead_lettered" && l["permanent"] != true {
			t.Errorf("%s: a dead-lettered record's line lacks permanent: %v", id, l)
		}
	}
}

// TestRecordLineOutcomeOfARetry: the outcome on a record's line is the handler's precise
// one when the batch only knows the record is retried (in_progress: another delivery
// holds its key), and the batch's own when the record failed for good but is still
// retried (its dead-lettering failed): "retry", not the handler's "permanent", which
// would read as if the record had been moved out of the way.
func TestRecordLineOutcomeOfARetry(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	h := &countingHandler{fail: map[string]error{
		"k-busy": fmt.Errorf("held elsewhere: %w", idem.ErrInProgress),
		"k-bad":  idem.Permanent(errors.New("invalid amount")),
	}}
	keys := testKeys(t)
	rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: newClient(t), Handler: h, Logger: logger, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	p := newProcessor(t, sqsbatch.BatchConfig{Handle: rf, DeadLetter: dlByID{"m2": errors.New("dead-letter queue unreachable")}, Logger: logger, Keys: keys})
	ev := events.SQSEvent{Records: []events.SQSMessage{
		keyedMsg("m1", "k-busy", `{"amount_cents":500}`),
		keyedMsg("m2", "k-bad", `{"amount_cents":500}`),
	}}
	if _, err := p.Process(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"m1": "in_progress", "m2": "retry"}
	lines := logLines(t, &logs)
	if len(lines) != len(ev.Records) {
		t.Fatalf("%d log lines for %d records:\n%s", len(lines), len(ev.Records), logs.String())
	}
	for _, l := range lines {
		id, _ := l["message_id"].(string)
		if l["outcome"] != want[id] {
			t.Errorf("%s: outcome %v, want %s: %v", id, l["outcome"], want[id], l)
		}
	}
	if l := lines[slices.IndexFunc(lines, func(l map[string]any) bool { return l["message_id"] == "m2" })]; l["permanent"] != true {
		t.Errorf("m2: the line lacks permanent: %v", l)
	}
}
