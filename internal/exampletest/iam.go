package exampletest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
)

// IAMCalls records, with an SDK middleware (APIOption), the IAM action of every request
// a function makes and the resource it names (a table, a queue URL), for a test that
// checks them against the function's role in template.yaml (Stack.CheckGrants). moto
// does not enforce IAM, so without such a test a missing grant would only show once
// deployed, as AccessDenied.
type IAMCalls struct {
	// Seen, when set, is called with every request's input before it is sent.
	Seen func(params any)

	mu    sync.Mutex
	calls map[string]bool // "dynamodb:PutItem table", "sqs:SendMessage url"
}

// APIOption adds the recording to a client's middleware (its Options.APIOptions).
func (c *IAMCalls) APIOption(s *middleware.Stack) error {
	return s.Initialize.Add(middleware.InitializeMiddlewareFunc("iam", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		if c.Seen != nil {
			c.Seen(in.Parameters)
		}
		service := strings.ToLower(awsmiddleware.GetServiceID(ctx))
		c.mu.Lock()
		if c.calls == nil {
			c.calls = map[string]bool{}
		}
		for _, call := range authorised(service, awsmiddleware.GetOperationName(ctx), in.Parameters) {
			c.calls[call] = true
		}
		c.mu.Unlock()
		return next.HandleInitialize(ctx, in)
	}), middleware.After)
}

// authorised returns the "action resource" pairs IAM authorises a request by. A
// transaction is authorised item by item, by the action of each item; SendMessageBatch
// by sqs:SendMessage, ChangeMessageVisibilityBatch by sqs:ChangeMessageVisibility
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-batch-api.html).
func authorised(service, op string, params any) []string {
	if tx, ok := params.(*dynamodb.TransactWriteItemsInput); ok {
		var out []string
		for _, it := range tx.TransactItems {
			switch {
			case it.Put != nil:
				out = append(out, "dynamodb:PutItem "+aws.ToString(it.Put.TableName))
			case it.Update != nil:
				out = append(out, "dynamodb:UpdateItem "+aws.ToString(it.Update.TableName))
			case it.Delete != nil:
				out = append(out, "dynamodb:DeleteItem "+aws.ToString(it.Delete.TableName))
			case it.ConditionCheck != nil:
				out = append(out, "dynamodb:ConditionCheckItem "+aws.ToString(it.ConditionCheck.TableName))
			}
		}
		return out
	}
	if service == "sqs" {
		op = strings.TrimSuffix(op, "Batch")
	}
	resource := "?"
	if v := reflect.Indirect(reflect.ValueOf(params)); v.Kind() == reflect.Struct {
		for _, field := range []string{"TableName", "QueueUrl"} {
			if f := v.FieldByName(field); f.IsValid() {
				if s, ok := f.Interface().(*string); ok {
					resource = aws.ToString(s)
				}
			}
		}
	}
	if q, ok := params.(*dynamodb.QueryInput); ok && q.IndexName != nil {
		resource += "/index/" + aws.ToString(q.IndexName) // an index is a resource of its own
	}
	return []string{service + ":" + op + " " + resource}
}

// Used returns the recorded calls, "action resource", sorted.
func (c *IAMCalls) Used() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.calls))
	for call := range c.calls {
		out = append(out, call)
	}
	slices.Sort(out)
	return out
}

// Has reports whether the call "action resource" was recorded.
func (c *IAMCalls) Has(call string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[call]
}

// CheckGrants fails t for each call of used ("action resource") whose resource is not
// one of s's queues and tables, or whose action the role of the template's function
// does not allow on it, in template.yaml with s's example wired, after the SAM
// transform (which adds policies the YAML does not show). The role's statements include
// the AWS::IAM::Policy resources attached to it, such as the example's grants. It
// returns the path of the template it read: template.yaml, or a copy with the example
// wired.
func (s *Stack) CheckGrants(t testing.TB, function string, used []string) string {
	t.Helper()
	path := TemplatePath()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	wired, err := example.Wire(data, s.Example)
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
	allowed, err := tpl.FunctionAllowed(function)
	if err != nil {
		t.Fatal(err)
	}
	if len(allowed) == 0 {
		t.Fatalf("template.yaml: the role of %s allows nothing", function)
	}
	logical := map[string]string{} // table name, queue URL -> logical id
	for _, r := range s.Env.Resources {
		logical[r.Name] = r.LogicalID
		if r.URL == "" {
			continue
		}
		logical[r.URL] = r.LogicalID
		// The queue as a consumer finds it from a record's eventSourceARN.
		url, err := sqsbatch.QueueURLFromARN(r.ARN)
		if err != nil {
			t.Fatal(err)
		}
		logical[url] = r.LogicalID
	}
	for _, call := range used {
		action, resource, _ := strings.Cut(call, " ")
		name, index, onIndex := strings.Cut(resource, "/index/")
		id, ok := logical[name]
		if onIndex {
			id += "/index/" + index
		}
		if !ok {
			t.Errorf("%s on %s: not a resource of the template", action, resource)
			continue
		}
		if !slices.Contains(allowed[id], action) {
			t.Errorf("template.yaml does not allow %s on %s (%s's role allows %v)", action, id, function, allowed[id])
		}
	}
	return path
}
