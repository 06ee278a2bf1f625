package cli_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// TestRedriveOutboundKeepsEveryAttribute (issue 37, hole 1): an outbound message with
// as many attributes as SQS allows (9 of the handler's and its key), refused by its
// queue for good, is dead-lettered beside the dlq-* attributes and the signature, and
// redrive sends back exactly the committed message: its body and every one of its
// attributes, no more and no fewer.
func TestRedriveOutboundKeepsEveryAttribute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := upStack(t)
	api := awstest.SQS(t)
	q, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(awstest.Name(t, "out") + ".fifo"),
		Attributes: map[string]string{"FifoQueue": "true", "MaximumMessageSize": "1024"}})
	if err != nil {
		t.Fatal(err)
	}
	out := aws.ToString(q.QueueUrl)
	m := idem.Message{QueueURL: out, Body: `{"receipt":"r-1"}`, GroupID: "acct-1", Attributes: map[string]string{idem.KeyAttribute: "payments#p-1#0"}}
	for i := range sqsmsg.MaxMessageAttributes - 1 {
		m.Attributes[fmt.Sprintf("a-%d", i)] = fmt.Sprintf(`value "%d" <&>`, i) // characters JSON escapes
	}
	dl := &sqsmsg.SQSDeadLetter{API: api, QueueURL: e["DLQ_URL"], Source: "test-consumer", Keys: stackKeys(t, e)}
	refusal := errors.New("InvalidParameterValue: One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes.")
	if err := dl.DeadLetterOutbound(ctx, m, refusal); err != nil {
		t.Fatal(err)
	}
	if r := idemctl(t, e, "redrive", "--outbound-queue", out); r.code != 0 || !strings.Contains(r.stdout, "1 to "+out) {
		t.Fatalf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	got := receiveAll(t, out)
	if len(got) != 1 {
		t.Fatalf("outbound queue holds %d messages, want the one redriven", len(got))
	}
	attrs := map[string]string{}
	for name, v := range got[0].MessageAttributes {
		attrs[name] = aws.ToString(v.StringValue)
		if aws.ToString(v.DataType) != "String" {
			t.Errorf("attribute %s has type %s, want String", name, aws.ToString(v.DataType))
		}
	}
	if aws.ToString(got[0].Body) != m.Body || !maps.Equal(attrs, m.Attributes) || got[0].Attributes["MessageGroupId"] != m.GroupID {
		t.Fatalf("redriven message: body %s, group %s, attributes %v\nwant the committed one: body %s, group %s, attributes %v",
			aws.ToString(got[0].Body), got[0].Attributes["MessageGroupId"], attrs, m.Body, m.GroupID, m.Attributes)
	}
}

// TestRedriveLeavesACutBody (issue 37, hole 4): a message too large for its dead letter
// was dead-lettered with its body cut (dlq-body-cut). Redrive does not send that cut
// body as if it were the message: it leaves it in the dead-letter queue and says why.
func TestRedriveLeavesACutBody(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := upStack(t)
	api := awstest.SQS(t)
	dl := &sqsmsg.SQSDeadLetter{API: api, QueueURL: e["DLQ_URL"], Source: "test-consumer", Keys: stackKeys(t, e), MaxMessageBytes: sqsmsg.MinSQSMessageBytes}
	msg := events.SQSMessage{MessageId: "m-cut", Body: strings.Repeat("x", 2*sqsmsg.MinSQSMessageBytes),
		Attributes: map[string]string{"MessageGroupId": "g-1", "MessageDeduplicationId": "payments-p-9"}}
	if err := dl.DeadLetter(ctx, msg, errors.New("validate: amount_cents is not a number")); err != nil {
		t.Fatal(err)
	}
	r := idemctl(t, e, "redrive")
	if r.code == 0 || !strings.Contains(r.stderr, sqsmsg.DLQBodyCutAttribute) || !strings.Contains(r.stdout, "moved 0 messages") {
		t.Fatalf("redrive of a cut body: exit %d, want a failure that names %s\n%s%s", r.code, sqsmsg.DLQBodyCutAttribute, r.stdout, r.stderr)
	}
	if in := receiveAll(t, e["QUEUE_URL"]); len(in) != 0 {
		t.Fatalf("%d messages went to the input queue, want none", len(in))
	}
	// Left there (in flight for redrive's visibility timeout): still counted by the queue.
	q, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(e["DLQ_URL"]),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatal(err)
	}
	if v, h := q.Attributes["ApproximateNumberOfMessages"], q.Attributes["ApproximateNumberOfMessagesNotVisible"]; v+h != "01" && v+h != "10" {
		t.Fatalf("the dead-letter queue holds %s visible and %s in-flight messages, want the cut one left there", v, h)
	}
}
