package consumerapp_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// TestBadMessages pushes the example's bad messages (example.Example.Bad) through the
// real handler after the first half of its valid traffic, among the second half, twice
// (the second time as SQS redelivers them): each bad message is dead-lettered once with
// a dlq-reason that contains its Reason and acknowledged (no batch item failure), and
// applies nothing and sends nothing; the valid messages are applied once each. The
// example's own corpus of bad inputs is in its own package's tests.
func TestBadMessages(t *testing.T) {
	f := newFixture(t)
	h := f.handler(t, nil)
	ctx := context.Background()
	valid := f.traffic(t, 6, 2)
	half := len(valid) / 2
	if failed := exampletest.Invoke(t, h, ctx, exampletest.Encode(t, f.records(valid[:half], "m-"))); len(failed) != 0 {
		t.Fatalf("the first half of the traffic: failures %v", failed)
	}
	bad := f.gen(t).Bad(f.run, valid)
	if len(bad) == 0 {
		t.Fatalf("example %s has no bad messages", f.ex.Name())
	}
	var recs []events.SQSMessage
	reason := map[string]string{} // message id -> the reason its dlq-reason must contain
	for i, b := range bad {
		r := f.record(b.Message, fmt.Sprintf("bad-%d", i))
		recs = append(recs, r)
		reason[r.MessageId] = b.Reason
	}
	recs = append(recs, f.records(valid[half:], "m-")...)
	for round := 1; round <= 2; round++ {
		for i := 0; i < len(recs); i += 10 { // Lambda's largest batch from a FIFO queue
			batch := recs[i:min(i+10, len(recs))]
			for j := range batch {
				batch[j].Attributes["ApproximateReceiveCount"] = strconv.Itoa(round)
			}
			if failed := exampletest.Invoke(t, h, ctx, exampletest.Encode(t, batch)); len(failed) != 0 {
				t.Fatalf("round %d: batch item failures %v, want none (bad messages are dead-lettered and acknowledged)", round, failed)
			}
		}
		f.checkApplied(t, fmt.Sprintf("round %d", round), valid, valid)
		dlq := exampletest.ReceiveAll(t, f.sqs, f.cfg.DLQURL)
		if round == 2 {
			// The second dead-lettering has the same MessageDeduplicationId ("dlq-" +
			// message id): SQS, and moto alike, drop it within the 5-minute window.
			if len(dlq) != 0 {
				t.Errorf("round 2: %d new DLQ messages, want 0 (deduplicated)", len(dlq))
			}
			continue
		}
		checkDeadLetters(t, dlq, reason)
	}
	f.checkOutbound(t, valid)
	if n := queueDepth(t, f, f.cfg.DLQURL); n != len(bad) {
		t.Errorf("the DLQ holds %d messages after the redelivery, want %d", n, len(bad))
	}
}

// checkDeadLetters checks that dlq holds one message per bad message, found by its
// dlq-source-message-id, with a dlq-reason containing its reason.
func checkDeadLetters(t *testing.T, dlq []sqstypes.Message, reason map[string]string) {
	t.Helper()
	seen := map[string]bool{}
	for _, m := range dlq {
		attr := func(name string) string { return aws.ToString(m.MessageAttributes[name].StringValue) }
		id := attr(sqsmsg.DLQSourceMessageIDAttribute)
		want, ok := reason[id]
		switch {
		case !ok:
			t.Errorf("dead letter of %q, not a bad message (dlq-reason %q)", id, attr(sqsmsg.DLQReasonAttribute))
		case seen[id]:
			t.Errorf("%s dead-lettered twice", id)
		case !strings.Contains(attr(sqsmsg.DLQReasonAttribute), want):
			t.Errorf("%s: dlq-reason %q does not contain %q", id, attr(sqsmsg.DLQReasonAttribute), want)
		}
		seen[id] = true
	}
	for id, want := range reason {
		if !seen[id] {
			t.Errorf("%s (%s) was not dead-lettered", id, want)
		}
	}
}

// queueDepth is the number of messages in a queue, visible or in flight.
func queueDepth(t *testing.T, f *fixture, url string) int {
	t.Helper()
	names := []sqstypes.QueueAttributeName{
		sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	}
	out, err := f.sqs.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range names {
		v, err := strconv.Atoi(out.Attributes[string(name)])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n += v
	}
	return n
}
