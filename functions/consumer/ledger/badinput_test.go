package ledger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// badCase is one file of testdata/bad: one SQS record to inject. The format is
// described in testdata/bad/README.md.
type badCase struct {
	Name       string                                `json:"name"`
	Body       *string                               `json:"body"`
	BodyBase64 []byte                                `json:"bodyBase64"`
	PadTo      int                                   `json:"padTo"`
	Attributes map[string]events.SQSMessageAttribute `json:"attributes"`
	KeyBase64  []byte                                `json:"keyBase64"`
	PadKeyTo   int                                   `json:"padKeyTo"`
	DedupID    *string                               `json:"dedupId"`
	Before     []struct {
		Body string `json:"body"`
		Key  string `json:"key"`
	} `json:"before"`
	Expect string `json:"expect"`
	Reason string `json:"reason"`
}

// Groups (= accounts) of the batch around the injected record.
const (
	badGroup   = "acct-bad"   // the injected record and the valid payment right after it
	otherGroup = "acct-other" // a valid payment in another group
)

func loadBadCase(t *testing.T, file string) badCase {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var c badCase
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields() // a typo in a case file must not silently test nothing
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	switch {
	case c.Name == "":
		t.Fatalf("%s: no name", file)
	case (c.Body == nil) == (c.BodyBase64 == nil):
		t.Fatalf("%s: give exactly one of body and bodyBase64", file)
	case c.Expect != "dlq" && c.Expect != "ok":
		t.Fatalf("%s: expect is %q, want dlq or ok", file, c.Expect)
	case c.Expect == "dlq" && c.Reason == "":
		t.Fatalf("%s: a dlq case needs a reason", file)
	case c.Expect == "ok" && c.Reason != "":
		t.Fatalf("%s: an ok case has no reason", file)
	}
	return c
}

// record builds the injected record, with message id id.
func (c badCase) record(t *testing.T, id string) events.SQSMessage {
	t.Helper()
	body := c.BodyBase64
	if c.Body != nil {
		body = []byte(*c.Body)
	}
	if c.PadTo > 0 {
		// An extra field before the closing brace, so the body stays one JSON object.
		end := bytes.LastIndexByte(body, '}')
		fill := c.PadTo - len(body) - len(`,"padding":""`)
		if end < 0 || fill < 0 {
			t.Fatalf("padTo %d: the body must be a JSON object shorter than that", c.PadTo)
		}
		padded := append([]byte(nil), body[:end]...)
		padded = append(padded, `,"padding":"`...)
		padded = append(padded, bytes.Repeat([]byte("x"), fill)...)
		body = append(append(padded, '"'), body[end:]...)
	}
	attrs := maps.Clone(c.Attributes)
	if c.KeyBase64 != nil || c.PadKeyTo > 0 {
		// The key as a String attribute: raw bytes, or the attribute's value padded.
		key := string(c.KeyBase64)
		if c.KeyBase64 == nil {
			key = aws.ToString(attrs[idem.KeyAttribute].StringValue)
		}
		key += strings.Repeat("x", max(0, c.PadKeyTo-len(key)))
		if attrs == nil {
			attrs = map[string]events.SQSMessageAttribute{}
		}
		attrs[idem.KeyAttribute] = events.SQSMessageAttribute{DataType: "String", StringValue: &key}
	}
	dedup := "dedup-" + id
	if c.DedupID != nil {
		dedup = *c.DedupID
	}
	r := exampletest.FIFORecord(id, badGroup, string(body), attrs)
	if dedup != "" {
		r.Attributes["MessageDeduplicationId"] = dedup
	}
	return r
}

// payment is a valid record: the key as attribute and dedup id, the group = the account.
func payment(id, account, key string, cents int64) events.SQSMessage {
	body := fmt.Sprintf(`{"payment_id":%q,"account_id":%q,"amount_cents":%d,"currency":"EUR"}`, id, account, cents)
	r := exampletest.FIFORecord(id, account, body, map[string]events.SQSMessageAttribute{
		idem.KeyAttribute: {DataType: "String", StringValue: aws.String(key)},
	})
	r.Attributes["MessageDeduplicationId"] = key
	return r
}

// recordLine is the one log line BatchProcessor writes per record.
type recordLine struct {
	Msg       string `json:"msg"`
	Level     string `json:"level"`
	MessageID string `json:"message_id"`
	Outcome   string `json:"outcome"`
	Error     string `json:"error"`
}

// TestBadInput injects each testdata/bad case into a batch between a valid payment of
// another group and a valid payment of its own group, pushes the batch through the real
// handler twice (the second time as SQS redelivers it), and checks that the bad record
// is dead-lettered with its reason (or applied, for the cases that are valid) without
// failing, blocking or double-applying anything else.
func TestBadInput(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "bad", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 22 {
		t.Fatalf("%d cases in testdata/bad, want at least 22", len(files))
	}
	for _, file := range files {
		stem := strings.TrimSuffix(filepath.Base(file), ".json")
		c := loadBadCase(t, file)
		t.Run(stem, func(t *testing.T) {
			t.Parallel()
			t.Log(c.Name)
			runBadCase(t, stem, c)
		})
	}
}

func runBadCase(t *testing.T, stem string, c badCase) {
	ctx := context.Background()
	f := newConsumer(t)
	h := f.handler(t)
	want := map[string]int64{otherGroup: 300, badGroup: 700}
	receipts := 2

	// An earlier batch, e.g. the first use of a key the case then reuses.
	if len(c.Before) > 0 {
		var recs []events.SQSMessage
		for i, b := range c.Before {
			r := exampletest.FIFORecord(fmt.Sprintf("%s-before-%d", stem, i), badGroup, b.Body, map[string]events.SQSMessageAttribute{
				idem.KeyAttribute: {DataType: "String", StringValue: aws.String(b.Key)},
			})
			r.Attributes["MessageDeduplicationId"] = b.Key
			recs = append(recs, r)
			p, err := ledger.Decode([]byte(b.Body))
			if err != nil {
				t.Fatalf("before[%d] is not a valid payment: %v", i, err)
			}
			want[p.AccountID] += p.AmountCents
			receipts++
		}
		if failed := exampletest.Invoke(t, h, ctx, exampletest.Encode(t, recs)); len(failed) != 0 {
			t.Fatalf("earlier batch: failures %v", failed)
		}
	}

	bad := c.record(t, stem+"-bad")
	batch := []events.SQSMessage{
		payment(stem+"-other", otherGroup, "payment:"+stem+"-other", 300),
		bad,
		payment(stem+"-same", badGroup, "payment:"+stem+"-same", 700), // after the bad one, in its group
	}
	// What the handler sees is the record after a JSON round trip, as from the Lambda
	// runtime: invalid UTF-8 in a string becomes U+FFFD there.
	var seen events.SQSEvent
	if err := json.Unmarshal(exampletest.Encode(t, batch), &seen); err != nil {
		t.Fatal(err)
	}
	badBody := seen.Records[1].Body
	if c.Expect == "ok" {
		p, err := ledger.Decode([]byte(badBody))
		if err != nil {
			t.Fatalf("an ok case must carry a valid payment: %v", err)
		}
		want[p.AccountID] += p.AmountCents
		receipts++
	}
	for round := 1; round <= 2; round++ {
		// The first push applies the payments; the second, as SQS redelivers, replays them.
		ok := map[int]string{1: "applied", 2: "duplicate"}[round]
		wantOutcome := map[string]string{batch[0].MessageId: ok, bad.MessageId: ok, batch[2].MessageId: ok}
		if c.Expect == "dlq" {
			wantOutcome[bad.MessageId] = "dead_lettered"
		}
		for i := range batch {
			batch[i].Attributes["ApproximateReceiveCount"] = strconv.Itoa(round)
		}
		mark := f.logs.Len()
		if failed := exampletest.Invoke(t, h, ctx, exampletest.Encode(t, batch)); len(failed) != 0 {
			t.Fatalf("round %d: batch item failures %v, want none", round, failed)
		}
		if got := f.balances(t); !maps.Equal(got, want) {
			t.Fatalf("round %d: balances %v, want %v", round, got, want)
		}
		checkRecordLines(t, round, f.logs.Bytes()[mark:], wantOutcome, bad.MessageId, c.Reason)

		dlq := exampletest.ReceiveAll(t, f.sqs, f.cfg.DLQURL)
		switch {
		case round == 2 && len(dlq) != 0:
			// The second dead-lettering has the same MessageDeduplicationId ("dlq-" +
			// message id): SQS, and moto alike, drop it within the 5-minute window.
			t.Fatalf("round 2: %d new DLQ messages, want 0 (deduplicated)", len(dlq))
		case round == 1 && c.Expect == "ok" && len(dlq) != 0:
			t.Fatalf("%d DLQ messages for a valid record: %v", len(dlq), aws.ToString(dlq[0].Body))
		case round == 1 && c.Expect == "dlq":
			checkDLQ(t, dlq, bad, badBody, c.Reason)
		}
	}
	if n := queueDepth(t, f, f.cfg.DLQURL); (c.Expect == "dlq" && n != 1) || (c.Expect == "ok" && n != 0) {
		t.Errorf("DLQ holds %d messages after the redelivery", n)
	}
	if n := len(exampletest.ReceiveAll(t, f.sqs, f.receipts)); n != receipts {
		t.Errorf("%d receipts, want %d", n, receipts)
	}
	logs := f.logs.String()
	if len(badBody) >= 16 && strings.Contains(logs, badBody) {
		t.Error("the logs contain the bad record's body")
	}
	if a := bad.MessageAttributes[idem.KeyAttribute]; a.StringValue != nil && len(*a.StringValue) >= 16 && strings.Contains(logs, *a.StringValue) {
		t.Error("the logs contain the idempotency key")
	}
}

// checkRecordLines checks the batch processor's lines of one invocation: exactly one
// per record, with the expected outcome; the bad record's line names the reason.
func checkRecordLines(t *testing.T, round int, logs []byte, want map[string]string, badID, reason string) {
	t.Helper()
	got := map[string][]recordLine{}
	for line := range bytes.Lines(logs) {
		var l recordLine
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("round %d: log line %q: %v", round, line, err)
		}
		if l.Level == "ERROR" || strings.Contains(l.Error, "panicked") {
			t.Errorf("round %d: %s", round, line)
		}
		switch {
		case l.Msg == "sqs record":
			got[l.MessageID] = append(got[l.MessageID], l)
		case l.MessageID != "":
			t.Errorf("round %d: a second line for record %s: %s", round, l.MessageID, line)
		}
	}
	if len(got) != len(want) {
		t.Errorf("round %d: record lines for %d messages, want %d", round, len(got), len(want))
	}
	for id, outcome := range want {
		lines := got[id]
		if len(lines) != 1 {
			t.Errorf("round %d: %d record lines for %s, want 1", round, len(lines), id)
			continue
		}
		if lines[0].Outcome != outcome {
			t.Errorf("round %d: %s: outcome %q (%s), want %q", round, id, lines[0].Outcome, lines[0].Error, outcome)
		}
		if id == badID && !strings.Contains(lines[0].Error, reason) {
			t.Errorf("round %d: error %q does not contain %q", round, lines[0].Error, reason)
		}
	}
}

// checkDLQ checks the dead-lettered copy: one message, the body unchanged, the reason,
// the source message id and the group.
func checkDLQ(t *testing.T, dlq []sqstypes.Message, bad events.SQSMessage, body, reason string) {
	t.Helper()
	if len(dlq) != 1 {
		t.Fatalf("%d DLQ messages, want 1", len(dlq))
	}
	m := dlq[0]
	if got := aws.ToString(m.Body); got != body {
		t.Errorf("DLQ body changed: %d bytes %.80q, want %d bytes %.80q", len(got), got, len(body), body)
	}
	attr := func(name string) string { return aws.ToString(m.MessageAttributes[name].StringValue) }
	if got := attr(sqsmsg.DLQReasonAttribute); !strings.Contains(got, reason) {
		t.Errorf("dlq-reason %q does not contain %q", got, reason)
	}
	if got := attr(sqsmsg.DLQSourceMessageIDAttribute); got != bad.MessageId {
		t.Errorf("dlq-source-message-id %q, want %q", got, bad.MessageId)
	}
	if got := m.Attributes["MessageGroupId"]; got != badGroup {
		t.Errorf("DLQ group %q, want %q", got, badGroup)
	}
}

// queueDepth is the number of messages in a queue, visible or in flight.
func queueDepth(t *testing.T, f *consumer, url string) int {
	t.Helper()
	out, err := f.sqs.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range []sqstypes.QueueAttributeName{
		sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	} {
		v, err := strconv.Atoi(out.Attributes[string(name)])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n += v
	}
	return n
}
