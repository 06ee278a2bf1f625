package exampletest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
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

// Consumed is what Consume did: the records it handed to the handler, and how many of
// them it deleted (the others were reported in BatchItemFailures).
type Consumed struct{ Received, Deleted int }

// Consume plays Lambda's SQS event source mapping over the queue at url, one batch at a
// time, until a receive has waited a second and found nothing: it receives up to 10
// messages (attributes included), hands them to h as one event whose records are built
// as the mapping builds them, under a 10 s deadline, and deletes the messages h does not
// report in BatchItemFailures. A reported message stays invisible for the receive's
// visibility timeout (a minute), so each message reaches h at most once per call; an
// error of h fails the test. It needs no local event source mapping: the real SDK only.
func Consume(t testing.TB, api *sqs.Client, url string, h func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)) Consumed {
	t.Helper()
	ctx := context.Background()
	attrs, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	arn, region := attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)], api.Options().Region
	var done Consumed
	for batch := 1; ; batch++ {
		out, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 60, WaitTimeSeconds: 1,
			MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{"All"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			return done
		}
		ev := events.SQSEvent{Records: make([]events.SQSMessage, len(out.Messages))}
		for i, m := range out.Messages {
			ev.Records[i] = received(m, arn, region)
		}
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ictx = lambdacontext.NewContext(ictx, &lambdacontext.LambdaContext{AwsRequestID: fmt.Sprintf("consume-%d", batch)})
		resp, err := h(ictx, ev)
		cancel()
		if err != nil {
			t.Fatalf("the handler failed batch %d: %v", batch, err)
		}
		failed := map[string]bool{}
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		done.Received += len(out.Messages)
		for _, m := range out.Messages {
			if failed[aws.ToString(m.MessageId)] {
				continue
			}
			if _, err := api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
			done.Deleted++
		}
	}
}

// received is the record Lambda's SQS event source mapping builds for a received
// message: its system and message attributes, digests, source ARN and region.
func received(m sqstypes.Message, queueARN, region string) events.SQSMessage {
	rec := events.SQSMessage{
		MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
		Body: aws.ToString(m.Body), Md5OfBody: aws.ToString(m.MD5OfBody),
		Md5OfMessageAttributes: aws.ToString(m.MD5OfMessageAttributes),
		Attributes:             map[string]string{}, MessageAttributes: map[string]events.SQSMessageAttribute{},
		EventSource: "aws:sqs", EventSourceARN: queueARN, AWSRegion: region,
	}
	maps.Copy(rec.Attributes, m.Attributes)
	for name, v := range m.MessageAttributes {
		rec.MessageAttributes[name] = events.SQSMessageAttribute{
			StringValue: v.StringValue, BinaryValue: v.BinaryValue, DataType: aws.ToString(v.DataType),
			StringListValues: []string{}, BinaryListValues: [][]byte{},
		}
	}
	return rec
}

// Redeliver plays SQS for one message: deliver runs it, and a delivery that fails with
// a retryable error (the key in progress elsewhere, a transaction conflict) comes back
// a little later, up to 100 times while ctx lasts. retried counts the deliveries that
// came back (nil: not counted).
func Redeliver(ctx context.Context, retried *atomic.Int64, deliver func() error) error {
	for try := 1; ; try++ {
		err := deliver()
		if err == nil || idem.IsPermanent(err) || try == 100 || ctx.Err() != nil {
			return err
		}
		if retried != nil {
			retried.Add(1)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Middleware is a handler under the idem middleware on moto, for an example's own
// integration tests: the clients, the middleware's client and store, and the handler.
type Middleware struct {
	DynamoDB *dynamodb.Client
	SQS      *sqs.Client
	Client   *idem.Client
	Store    *persistence.DynamoStore
	Handler  idem.Handler // the example's handler under the middleware
	Retried  atomic.Int64 // deliveries that came back (Deliver), for the log
}

// Deliver plays SQS for one delivery of body under key (Redeliver).
func (m *Middleware) Deliver(ctx context.Context, key, body string) (res idem.Result, err error) {
	err = Redeliver(ctx, &m.Retried, func() error {
		res, err = m.Handler.Handle(ctx, &idem.Request{Key: key, Payload: []byte(body)})
		return err
	})
	return res, err
}

// Forget deletes key's idempotency record, as DynamoDB's TTL does within days of its
// expiry (moto never deletes expired items, so the tests do it). A record that is not
// there fails the test.
func (m *Middleware) Forget(ctx context.Context, t testing.TB, key string) {
	t.Helper()
	pk, err := m.Client.RecordKey(key)
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.DynamoDB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(m.Store.Table()), Key: m.Store.Key(pk), ReturnValues: types.ReturnValueAllOld,
	})
	if err != nil || len(out.Attributes) == 0 {
		t.Fatalf("delete the record of %s: %v (found: %v)", key, err, len(out.Attributes) > 0)
	}
}

// JSON is v as JSON; v that does not marshal fails the test.
func JSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Pages is a DynamoDB Scan for the unit tests of an example's table reader
// (example.ScanAPI): it serves Pages in order, page i+1 for the start key of i+1 x's in
// the string attribute Key, and refuses a scan that is not strongly consistent (a
// check must read consistently). Calls counts the scans.
type Pages struct {
	Key   string
	Pages [][]map[string]types.AttributeValue
	Calls int
}

// Scan serves the next page.
func (p *Pages) Scan(_ context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	p.Calls++
	if !aws.ToBool(in.ConsistentRead) {
		return nil, context.Canceled
	}
	i := 0
	if k, ok := in.ExclusiveStartKey[p.Key].(*types.AttributeValueMemberS); ok {
		i = len(k.Value)
	}
	out := &dynamodb.ScanOutput{Items: p.Pages[i]}
	if i+1 < len(p.Pages) {
		out.LastEvaluatedKey = map[string]types.AttributeValue{p.Key: &types.AttributeValueMemberS{Value: strings.Repeat("x", i+1)}}
	}
	return out, nil
}
