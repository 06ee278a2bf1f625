package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// sourceStamping is moto's SQS, with the one attribute moto leaves out: it never sets
// DeadLetterQueueSourceArn on a message it moves to a dead-letter queue (moto's
// sqs/models.py adds the message to the DLQ as it is), so the messages the test places
// get the source it gives their bodies.
type sourceStamping struct {
	*sqs.Client
	source map[string]string // body -> the queue SQS would have moved it from
}

func (s sourceStamping) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := s.Client.ReceiveMessage(ctx, in, optFns...)
	if err != nil {
		return nil, err
	}
	for i, m := range out.Messages {
		if src := s.source[aws.ToString(m.Body)]; src != "" {
			if m.Attributes == nil {
				out.Messages[i].Attributes = map[string]string{}
			}
			out.Messages[i].Attributes[string(types.MessageSystemAttributeNameDeadLetterQueueSourceArn)] = src
		}
	}
	return out, nil
}

// TestRedriveRefusesAForeignSource (issue 38, finding 1): a queue of the account that
// names the stack's DLQ as its own dead-letter queue gets its messages moved there by
// SQS. The dry run shows each dead letter's source and refuses the stranger's; redrive
// moves the input queue's dead letter and the consumer's own (no source), and leaves the
// stranger's in the dead-letter queue, reporting it and failing.
func TestRedriveRefusesAForeignSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	api := awstest.SQS(t)
	input, dlq := awstest.FIFOQueue(ctx, t, api, "in", nil), awstest.FIFOQueue(ctx, t, api, "dlq", nil)
	_, inputARN, err := queueFacts(ctx, api, input)
	if err != nil {
		t.Fatal(err)
	}
	const stranger = "arn:aws:sqs:us-east-1:123456789012:stranger.fifo"
	for i, body := range []string{`{"from":"input"}`, `{"from":"stranger"}`, `{"from":"consumer"}`} {
		if _, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(dlq), MessageBody: aws.String(body),
			MessageGroupId: aws.String(body), MessageDeduplicationId: aws.String(string(rune('a' + i))),
			MessageAttributes: map[string]types.MessageAttributeValue{
				sqsmsg.DLQReasonAttribute: {DataType: aws.String("String"), StringValue: aws.String("a plausible reason")},
			}}); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := sqsmsg.NewKeys(bytes.Repeat([]byte("k"), 32))
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	r := &redriver{
		api: sourceStamping{api, map[string]string{`{"from":"input"}`: inputARN, `{"from":"stranger"}`: stranger}},
		dlq: dlq, queue: input, queueARN: inputARN, fifo: true, keys: keys, queues: map[string]bool{}, stdout: &stdout, stderr: &stderr,
	}
	if err := r.list(ctx); err != nil {
		t.Fatal(err)
	}
	if out := stdout.String(); !strings.Contains(out, "2 messages would move") || !strings.Contains(out, "1 refused") ||
		strings.Count(out, stranger) != 2 || strings.Count(out, inputARN) != 1 || !strings.Contains(out, "refused: stays") {
		t.Fatalf("dry run: want the stranger's dead letter shown with its source and refused, the input queue's with its own\n%s", out)
	}
	stdout.Reset()
	if err := r.move(ctx); err == nil || !strings.Contains(err.Error(), "1 messages not moved") {
		t.Errorf("redrive: %v, want 1 message not moved", err)
	}
	if out := stdout.String(); !strings.Contains(out, "moved 2 messages") || !strings.Contains(out, "1 refused") || !strings.Contains(stderr.String(), stranger) {
		t.Errorf("redrive: want 2 moved, the stranger's refused and named\n%s%s", out, stderr.String())
	}
	got := map[string]bool{}
	for range 3 {
		out, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(input), MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			got[aws.ToString(m.Body)] = true
		}
	}
	if len(got) != 2 || got[`{"from":"stranger"}`] {
		t.Errorf("the input queue got %v, want the input queue's and the consumer's dead letters only", got)
	}
	attrs, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(dlq),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatal(err)
	}
	if n := attrs.Attributes["ApproximateNumberOfMessages"] + "/" + attrs.Attributes["ApproximateNumberOfMessagesNotVisible"]; n != "0/1" {
		t.Errorf("dead-letter queue holds %s (visible/in flight), want the stranger's alone", n)
	}
}
