package idem_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// TestContentBasedDeduplicationIDIsNotAKey: a FIFO queue with content-based
// deduplication gives a message the SHA-256 of its body as its deduplication id. SQS
// drops the same body only for 5 minutes; a record keyed by that id would swallow the
// same body sent again as a new operation after that, for the record's whole retention.
// The consumer refuses such a message (dead-lettered with the reason) unless it carries
// the key attribute or the key field, and the same body is two operations.
func TestContentBasedDeduplicationIDIsNotAKey(t *testing.T) {
	ctx := context.Background()
	client := awstest.SQS(t)
	q, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String(awstest.Name(t, "content") + ".fifo"),
		Attributes: map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"},
	})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"account":"a-1","amount_cents":500}`
	if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(body), MessageGroupId: aws.String("a-1")}); err != nil {
		t.Fatal(err)
	}
	msgs, err := awstest.Drain(ctx, client, aws.ToString(q.QueueUrl))
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
