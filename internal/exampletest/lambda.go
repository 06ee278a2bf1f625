package exampletest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// FIFORecord is a record as Lambda's event source mapping delivers it from a FIFO queue:
// message id id in group, with body and the message attributes attrs.
func FIFORecord(id, group, body string, attrs map[string]events.SQSMessageAttribute) events.SQSMessage {
	return events.SQSMessage{
		MessageId:     id,
		ReceiptHandle: "handle-" + id,
		Body:          body,
		Attributes: map[string]string{
			"ApproximateReceiveCount": "1", "SentTimestamp": "1763632961530", "SequenceNumber": "18889596386470770358",
			"MessageGroupId": group, "SenderId": "AROA3XFRBF23EXAMPLE7:producer",
			"ApproximateFirstReceiveTimestamp": "1763633743741",
		},
		MessageAttributes: attrs,
		EventSource:       "aws:sqs",
		EventSourceARN:    "arn:aws:sqs:us-east-1:123456789012:input.fifo",
		AWSRegion:         "us-east-1",
	}
}

// Encode is the JSON of an SQS event of recs, as Lambda hands it to the runtime.
func Encode(t testing.TB, recs []events.SQSMessage) []byte {
	t.Helper()
	b, err := json.Marshal(events.SQSEvent{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Invoke pushes raw event JSON through h as the Lambda runtime does and returns the
// message ids of the batch item failures.
func Invoke(t testing.TB, h lambda.Handler, ctx context.Context, payload []byte) []string {
	t.Helper()
	out, err := h.Invoke(ctx, payload)
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("response %s: %v", out, err)
	}
	ids := []string{}
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

// ReceiveAll receives every message of a queue, attributes included, deleting nothing:
// they stay invisible for a minute.
func ReceiveAll(t testing.TB, api *sqs.Client, url string) []sqstypes.Message {
	t.Helper()
	return receive(t, api, url, false)
}

// DrainAll receives and deletes every message of a queue, attributes included. (Deleting
// lets the rest of a FIFO group through; the queue's deduplication outlives the deletes.)
func DrainAll(t testing.TB, api *sqs.Client, url string) []sqstypes.Message {
	t.Helper()
	return receive(t, api, url, true)
}

func receive(t testing.TB, api *sqs.Client, url string, del bool) []sqstypes.Message {
	t.Helper()
	ctx := context.Background()
	var all []sqstypes.Message
	for {
		out, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 60,
			MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{"All"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			return all
		}
		for i := 0; del && i < len(out.Messages); i++ {
			if _, err := api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: out.Messages[i].ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
		all = append(all, out.Messages...)
	}
}
