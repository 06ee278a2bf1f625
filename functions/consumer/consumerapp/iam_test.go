package consumerapp_test

import (
	"context"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"gopkg.in/yaml.v3"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// recorder notes the IAM action and the resource of every call the consumer makes; a
// transaction is authorised item by item, by the action of each item.
type recorder struct {
	idem.DynamoDBAPI
	sqs   consumerapp.SQSAPI
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

// grants reads the ConsumerFunction's inline policies in template.yaml: logical id of the
// resource (a `!GetAtt X.Arn`) → the actions allowed on it.
func grants(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile("../../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Resources map[string]struct {
			Properties struct {
				Policies []struct {
					Statement []struct {
						Effect   string    `yaml:"Effect"`
						Action   yaml.Node `yaml:"Action"`
						Resource yaml.Node `yaml:"Resource"`
					} `yaml:"Statement"`
				} `yaml:"Policies"`
			} `yaml:"Properties"`
		} `yaml:"Resources"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("template.yaml: %v", err)
	}
	list := func(n yaml.Node) []*yaml.Node {
		if n.Kind == yaml.SequenceNode {
			return n.Content
		}
		return []*yaml.Node{&n}
	}
	out := map[string][]string{}
	for _, p := range doc.Resources["ConsumerFunction"].Properties.Policies {
		for _, st := range p.Statement {
			if st.Effect != "Allow" {
				continue
			}
			for _, res := range list(st.Resource) {
				if res.Tag != "!GetAtt" || !strings.HasSuffix(res.Value, ".Arn") {
					continue
				}
				id := strings.TrimSuffix(res.Value, ".Arn")
				for _, a := range list(st.Action) {
					out[id] = append(out[id], a.Value)
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("template.yaml: no policy statement found for ConsumerFunction")
	}
	return out
}

// TestTemplateGrantsEveryCall runs the consumer over the sample events (first
// deliveries, duplicates, a bad message for the DLQ), records every AWS action it takes
// and on what, and checks that the ConsumerFunction's policies in template.yaml allow
// each one. moto does not enforce IAM, so without this test a missing action would only
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
	logical := map[string]string{
		f.cfg.IdempotencyTable: "IdempotencyTable", f.cfg.LedgerTable: "LedgerTable",
		f.cfg.DLQURL: "DeadLetterQueue", f.cfg.ReceiptsQueueURL: "ReceiptsQueue",
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
