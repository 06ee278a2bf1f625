package idem_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/emf"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
)

// unreachableSQS refuses every SendMessageBatch, as SQS out of reach would.
type unreachableSQS struct{}

func (unreachableSQS) SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	return nil, errors.New("connection refused")
}

// TestNothingEmittedNamesAKeyAGroupACallerOrABody (issue 38, findings 5 and 6): a batch
// with a failure in a FIFO group (its next record not run), and a record whose outbound
// messages of one group could not be sent (the next record's message of that group held
// back behind them), run with JSON logs, metrics and a tracer on.
// Nothing any of them emits holds a key, a group, the caller in a key or the body, in
// clear or as a plain SHA-256 (whole, or its first 16 hex digits, HashKey): only the hashes
// keyed with the stack's secret, which are there.
func TestNothingEmittedNamesAKeyAGroupACallerOrABody(t *testing.T) {
	const (
		caller   = "alice@example.com"
		groupA   = "account-4711"
		groupB   = "account-9999"
		iban     = "DE89370400440532013000"
		body     = `{"iban":"` + iban + `"}`
		receipts = "https://sqs.us-east-1.amazonaws.com/123456789012/receipts.fifo"
	)
	keyOf := func(n string) string { return "caller:" + caller + "/pay-" + n } // the caller in the key, as INGRESS_KEY_SCOPE=caller has it
	keys, err := sqsmsg.NewKeys(bytes.Repeat([]byte("s"), 32))
	if err != nil {
		t.Fatal(err)
	}
	tp, spans := spanRecorder(t)
	var logs, metricsOut bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	metrics := emf.NewMetrics(&metricsOut, "ns", "svc")
	client, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "payments", Sender: unreachableSQS{}, Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	h := idem.HandlerFunc(func(_ context.Context, req *idem.Request) (idem.Result, error) {
		switch req.Key {
		case keyOf("1"):
			return idem.Result{}, errTransient
		case keyOf("3"), keyOf("4"): // 3's ten fill one request to SQS; 4's is held back behind them
			m := idem.Message{QueueURL: receipts, GroupID: groupB, Body: body, Attributes: map[string]string{}}
			if req.Key == keyOf("4") {
				return idem.Result{Response: []byte(body), Messages: []idem.Message{m}}, nil
			}
			return idem.Result{Response: []byte(body), Messages: slices.Repeat([]idem.Message{m}, 10)}, nil
		}
		return idem.Result{Response: []byte(body)}, nil
	})
	record, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: client, Handler: h, Logger: log, Metrics: metrics, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	p := newProcessor(t, sqsbatch.BatchConfig{Handle: record, Outbox: client, Tracer: tp, Logger: log, Metrics: metrics, Keys: keys, DeadLetter: &fakeDL{}})
	msg := func(n, group string) events.SQSMessage {
		m := keyedMsg("m-"+n, keyOf(n), body)
		m.Attributes = map[string]string{"MessageGroupId": group}
		m.EventSourceARN = "arn:aws:sqs:us-east-1:123456789012:input.fifo"
		return m
	}
	resp, err := p.Process(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		msg("1", groupA), msg("2", groupA), msg("3", groupB), msg("4", groupB),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failureIDs(resp); len(got) != 4 {
		t.Fatalf("failures %v, want all four (a failure and a held group, an unsent message and a held group)", got)
	}
	if err := metrics.Flush(); err != nil {
		t.Fatal(err)
	}
	emitted := logs.String() + metricsOut.String()
	for _, s := range spans.GetSpans() {
		raw, err := json.Marshal(struct {
			Name, Status string
			Attrs        any
			Events       any
		}{s.Name, s.Status.Description, s.Attributes, s.Events})
		if err != nil {
			t.Fatal(err)
		}
		emitted += string(raw)
	}
	for _, want := range []string{"earlier in its group failed", "an earlier message of its group was not sent"} {
		if !strings.Contains(emitted, want) {
			t.Errorf("nothing emitted says %q: the run did not take the path under test", want)
		}
	}
	for _, secret := range []string{keyOf("1"), keyOf("2"), keyOf("3"), keyOf("4"), caller, groupA, groupB, body, iban} {
		sum := sha256.Sum256([]byte(secret))
		plain := hex.EncodeToString(sum[:])
		for what, s := range map[string]string{"in clear": secret, "as its SHA-256": plain, "as HashKey": plain[:16]} {
			if strings.Contains(emitted, s) {
				t.Errorf("%q is emitted %s", secret, what)
			}
		}
	}
	for _, keyed := range []string{keys.LogHash(groupA), keys.LogHash(groupB), keys.LogHash(keyOf("3"))} {
		if !strings.Contains(emitted, keyed) {
			t.Errorf("keyed hash %s not emitted: the lines and spans should name keys and groups by it", keyed)
		}
	}
}
