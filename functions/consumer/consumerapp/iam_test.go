package consumerapp_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
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

// grants reads what the ConsumerFunction's role allows in template.yaml as deployed
// with ex's block (example.Wire), after the SAM transform (which can add policies the
// YAML does not show): logical id of the resource → the actions allowed on it. The
// role's statements include the AWS::IAM::Policy resources attached to it, such as the
// example's grants (ExampleConsumerPolicy).
func grants(t *testing.T, ex example.Example) map[string][]string {
	t.Helper()
	path := exampletest.TemplatePath()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	wired, err := example.Wire(data, ex)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(wired, data) {
		path = filepath.Join(t.TempDir(), "template.yaml")
		if err := os.WriteFile(path, wired, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tpl, err := samtemplate.Transform(context.Background(), path)
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

// TestTemplateGrantsEveryCall runs the consumer over the example's traffic (first
// deliveries, duplicates, bad messages for the DLQ, a delivery of a held key), records
// every AWS action it takes and on what, and checks that the ConsumerFunction's policies
// in template.yaml allow each one, in the template as the SAM transform outputs it. The
// resources are named by the stack's own list (logical id, name, URL, ARN), so the test
// names none. moto does not enforce IAM, so without this test a missing action would
// only show once deployed, as AccessDenied on every message.
func TestTemplateGrantsEveryCall(t *testing.T) {
	f := newFixture(t)
	rec := &recorder{DynamoDBAPI: f.ddb, sqs: f.sqs, calls: map[string]bool{}}
	h, err := consumerapp.New(f.cfg, consumerapp.Deps{DynamoDB: rec, SQS: rec, Logs: &f.logs, Metrics: &f.emf, Owner: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	valid := f.traffic(t, 6, 3)
	recs := f.records(valid[:3], "m-")
	for i, b := range f.gen(t).Bad(f.run, valid[:3]) {
		recs = append(recs, f.record(b.Message, fmt.Sprintf("bad-%d", i)))
	}
	for _, batch := range [][]events.SQSMessage{recs, f.records(valid[3:], "m-")} {
		for range 2 { // the second time, every record is a duplicate
			exampletest.Invoke(t, lambda.NewHandler(h), context.Background(), exampletest.Encode(t, batch))
		}
	}
	if n := len(exampletest.ReceiveAll(t, f.sqs, f.cfg.DLQURL)); n == 0 {
		t.Error("nothing was dead-lettered: the DLQ's grant is not exercised")
	}
	// A delivery that finds its key held by a live lease hides its message until the
	// lease ends (ChangeMessageVisibility on the queue of its eventSourceARN).
	held := events.SQSEvent{Records: []events.SQSMessage{f.record(valid[0], "iam-held-message")}}
	held.Records[0].MessageAttributes[idem.KeyAttribute] = events.SQSMessageAttribute{DataType: "String", StringValue: aws.String("iam-held-key")}
	holder, err := idem.New(idem.Config{Store: mustStore(t, f), Scope: f.cfg.Scope, Owner: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Do(context.Background(), &idem.Request{Key: "iam-held-key", Payload: []byte(held.Records[0].Body)},
		func(ctx context.Context, _ *idem.Request) (idem.Result, error) {
			if failed := exampletest.Invoke(t, lambda.NewHandler(h), context.Background(), exampletest.Encode(t, held.Records)); len(failed) != 1 {
				t.Errorf("a delivery of a held key: failures %v, want its message id", failed)
			}
			return idem.Result{Response: []byte("{}")}, nil
		}); err != nil {
		t.Fatal(err)
	}
	logical := map[string]string{} // table name, queue URL -> logical id
	for _, r := range f.st.Env.Resources {
		logical[r.Name] = r.LogicalID
		if r.URL != "" {
			logical[r.URL] = r.LogicalID
			// The queue as the consumer finds it from a record's eventSourceARN.
			url, err := idem.QueueURLFromARN(r.ARN)
			if err != nil {
				t.Fatal(err)
			}
			logical[url] = r.LogicalID
		}
	}
	allowed := grants(t, f.ex)
	var used []string
	for call := range rec.calls {
		used = append(used, call)
	}
	sort.Strings(used)
	for _, call := range used {
		action, resource, _ := strings.Cut(call, " ")
		id, ok := logical[resource]
		if !ok {
			t.Errorf("%s on %s: not a resource of the template", action, resource)
			continue
		}
		if !slices.Contains(allowed[id], action) {
			t.Errorf("template.yaml does not allow %s on %s (ConsumerFunction policies allow %v)", action, id, allowed[id])
		}
	}
	if f.outbound != "" && !rec.calls["sqs:SendMessage "+f.outbound] {
		t.Errorf("no outbound message was sent: the example's grant on its outbound queue is not exercised")
	}
	t.Logf("%d action/resource pairs used: %v", len(used), used)
}

func mustStore(t *testing.T, f *fixture) idem.Store {
	t.Helper()
	s, err := idem.NewDynamoStore(f.ddb, f.cfg.IdempotencyTable)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
