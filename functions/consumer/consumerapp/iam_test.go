package consumerapp_test

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
)

// recorder notes the IAM action and the resource of every call the consumer makes; a
// transaction is authorised item by item, by the action of each item.
type recorder struct {
	idem.DynamoDBAPI
	sqs   *sqs.Client
	mu    sync.Mutex
	calls map[string]bool // "dynamodb:PutItem table" / "sqs:SendMessage url"
}

func (r *recorder) note(action, resource string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[action+" "+resource] = true
}

func (r *recorder) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	r.note("dynamodb:PutItem", aws.ToString(in.TableName))
	return r.DynamoDBAPI.PutItem(ctx, in, o...)
}

func (r *recorder) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	r.note("dynamodb:UpdateItem", aws.ToString(in.TableName))
	return r.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

func (r *recorder) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	r.note("dynamodb:GetItem", aws.ToString(in.TableName))
	return r.DynamoDBAPI.GetItem(ctx, in, o...)
}

func (r *recorder) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	r.note("dynamodb:Query", aws.ToString(in.TableName))
	return r.DynamoDBAPI.Query(ctx, in, o...)
}

func (r *recorder) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			r.note("dynamodb:PutItem", aws.ToString(it.Put.TableName))
		case it.Update != nil:
			r.note("dynamodb:UpdateItem", aws.ToString(it.Update.TableName))
		case it.Delete != nil:
			r.note("dynamodb:DeleteItem", aws.ToString(it.Delete.TableName))
		case it.ConditionCheck != nil:
			r.note("dynamodb:ConditionCheckItem", aws.ToString(it.ConditionCheck.TableName))
		}
	}
	return r.DynamoDBAPI.TransactWriteItems(ctx, in, o...)
}

func (r *recorder) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	r.note("sqs:SendMessage", aws.ToString(in.QueueUrl))
	return r.sqs.SendMessage(ctx, in, o...)
}

// SendMessageBatch is authorised by the sqs:SendMessage action.
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-api-permissions-reference.html
func (r *recorder) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, o ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	r.note("sqs:SendMessage", aws.ToString(in.QueueUrl))
	return r.sqs.SendMessageBatch(ctx, in, o...)
}

func (r *recorder) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, o ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	r.note("sqs:ChangeMessageVisibility", aws.ToString(in.QueueUrl))
	return r.sqs.ChangeMessageVisibility(ctx, in, o...)
}

// grants reads what the ConsumerFunction's role allows in template.yaml as deployed,
// after the SAM transform (which can add policies the YAML does not show): logical id
// of the resource → the actions allowed on it.
func grants(t *testing.T) map[string][]string {
	t.Helper()
	tpl, err := samtemplate.Transform(context.Background(), "../../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := tpl.FunctionAllowed("ConsumerFunction")
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("template.yaml: the role of ConsumerFunction allows nothing")
	}
	return out
}

// TestTemplateGrantsEveryCall runs the consumer over the sample events (first
// deliveries, duplicates, a bad message for the DLQ), records every AWS action it takes
// and on what, and checks that the ConsumerFunction's policies in template.yaml allow
// each one, in the template as the SAM transform outputs it. moto does not enforce IAM, so without this test a missing action would only
// show once deployed, as AccessDenied on every message.
func TestTemplateGrantsEveryCall(t *testing.T) {
	f := newFixture(t)
	rec := &recorder{DynamoDBAPI: f.ddb, sqs: f.sqs, calls: map[string]bool{}}
	h, err := consumerapp.New(f.cfg, consumerapp.Deps{DynamoDB: rec, SQS: rec, Logs: &f.logs, Metrics: &f.emf, Owner: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"sqs-fifo-batch.json", "sqs-duplicates-malformed.json"} {
		raw, _ := readEvent(t, file)
		for range 2 { // the second time, every record is a duplicate
			invoke(t, lambda.NewHandler(h), context.Background(), raw)
		}
	}
	// A delivery that finds its key held by a live lease hides its message until the
	// lease ends (ChangeMessageVisibility on the queue of its eventSourceARN).
	held := heldEvent(t)
	holder, err := idem.New(idem.Config{Store: mustStore(t, f), Scope: f.cfg.Scope, Owner: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Do(context.Background(), &idem.Request{Key: "iam-held-key", Payload: []byte(held.Records[0].Body)},
		func(ctx context.Context, _ *idem.Request) (idem.Result, error) {
			raw, _ := json.Marshal(held)
			if failed := invoke(t, lambda.NewHandler(h), context.Background(), raw); len(failed) != 1 {
				t.Errorf("a delivery of a held key: failures %v, want its message id", failed)
			}
			return idem.Result{Response: []byte("{}")}, nil
		}); err != nil {
		t.Fatal(err)
	}
	inputURL, err := idem.QueueURLFromARN(held.Records[0].EventSourceARN)
	if err != nil {
		t.Fatal(err)
	}
	logical := map[string]string{
		f.cfg.IdempotencyTable: "IdempotencyTable", f.cfg.LedgerTable: "LedgerTable",
		f.cfg.DLQURL: "DeadLetterQueue", f.cfg.ReceiptsQueueURL: "ReceiptsQueue", inputURL: "InputQueue",
	}
	allowed := grants(t)
	var used []string
	for call := range rec.calls {
		used = append(used, call)
	}
	sort.Strings(used)
	for _, call := range used {
		action, resource, _ := strings.Cut(call, " ")
		id, ok := logical[resource]
		if !ok {
			t.Errorf("%s on %s: a resource the test does not know", action, resource)
			continue
		}
		if !slices.Contains(allowed[id], action) {
			t.Errorf("template.yaml does not allow %s on %s (ConsumerFunction policies allow %v)", action, id, allowed[id])
		}
	}
	t.Logf("%d action/resource pairs used: %v", len(used), used)
}

// heldEvent is one FIFO record keyed "iam-held-key", from the input queue of the sample
// events.
func heldEvent(t *testing.T) events.SQSEvent {
	t.Helper()
	raw, _ := readEvent(t, "sqs-fifo-batch.json")
	var ev events.SQSEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	rec := ev.Records[0]
	rec.MessageId = "iam-held-message"
	rec.MessageAttributes = map[string]events.SQSMessageAttribute{
		idem.KeyAttribute: {DataType: "String", StringValue: aws.String("iam-held-key")},
	}
	return events.SQSEvent{Records: []events.SQSMessage{rec}}
}

func mustStore(t *testing.T, f *fixture) idem.Store {
	t.Helper()
	s, err := idem.NewDynamoStore(f.ddb, f.cfg.IdempotencyTable)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
