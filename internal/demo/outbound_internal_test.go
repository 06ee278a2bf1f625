package demo

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// newQueue creates a queue for the test: standard, or FIFO.
func newQueue(t *testing.T, api *sqs.Client, fifo bool) string {
	t.Helper()
	in := &sqs.CreateQueueInput{QueueName: aws.String(awstest.Name(t, "out"))}
	if fifo {
		in.QueueName = aws.String(*in.QueueName + ".fifo")
		in.Attributes = map[string]string{"FifoQueue": "true"}
	}
	out, err := api.CreateQueue(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.QueueUrl)
}

// TestOutboundQueues: the demo counts each outbound queue by idempotency-key. A resend
// (a key again) is what a standard queue delivers and its receiver drops: that queue is
// OK; a FIFO queue that delivered a key twice is not. On the Confirmer's queue a resend
// counts once for its message, and a message not applied is named.
func TestOutboundQueues(t *testing.T) {
	ctx := context.Background()
	api := awstest.SQS(t)
	// send puts body under key: on a FIFO queue with a dedup id of its own, so that
	// SQS keeps the copy, as it does past its deduplication interval.
	send := func(url, key, body string, n int) {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			idem.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(key)}}}
		if strings.HasSuffix(url, ".fifo") {
			in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String(fmt.Sprint(key, "-", n))
		}
		if _, err := api.SendMessage(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	standard, fifo, confirmed := newQueue(t, api, false), newQueue(t, api, true), newQueue(t, api, true)
	for _, url := range []string{standard, fifo} {
		send(url, "pk1#0", "a", 1)
		send(url, "pk1#0", "a", 2) // the resend
		send(url, "pk2#0", "b", 1)
	}
	send(confirmed, "pk1#0", "a", 1)
	send(confirmed, "pk3#0", "c", 1) // for a message not applied
	got := map[string]QueueCount{}
	var rc *receiptReader
	for _, url := range []string{standard, fifo, confirmed} {
		r := &receiptReader{api: api, url: url, seen: map[string]map[string]bool{}}
		if url == confirmed {
			r.confirms, rc = func(body string) (string, bool) { return body, true }, r
		}
		if err := r.drain(ctx); err != nil {
			t.Fatal(err)
		}
		got[url] = r.queueCount()
	}
	if q := got[standard]; q.Messages != 3 || q.Keys != 2 || !q.OK() {
		t.Errorf("standard queue %+v (OK %v), want 3 messages, 2 keys, OK", q, q.OK())
	}
	if q := got[fifo]; q.Messages != 3 || q.Keys != 2 || q.OK() {
		t.Errorf("FIFO queue %+v (OK %v), want 3 messages, 2 keys, not OK", q, q.OK())
	}
	if distinct, total, notApplied := rc.counts([]example.Message{{ID: "a"}}); distinct != 2 || total != 2 || notApplied != 1 {
		t.Errorf("the Confirmer's queue: %d messages with an outbound message, %d outbound, %d not applied; want 2, 2, 1", distinct, total, notApplied)
	}
}
