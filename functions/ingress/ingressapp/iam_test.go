package ingressapp_test

import (
	"bytes"
	"cmp"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// iamRecorder notes, with an SDK middleware, the IAM action of every request the
// ingress makes and the resource it names (a table, a queue URL), and the partition keys
// it reads.
type iamRecorder struct {
	mu    sync.Mutex
	calls map[string]bool     // "dynamodb:PutItem table"
	keys  map[string][]string // table -> partition keys read with GetItem
	pk    map[string]string   // table -> its partition key attribute
}

func (r *iamRecorder) apiOption(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("iam", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		op := awsmiddleware.GetOperationName(ctx)
		var resource, action string
		switch p := in.Parameters.(type) {
		case *dynamodb.PutItemInput:
			resource, action = aws.ToString(p.TableName), "dynamodb:"+op
		case *dynamodb.UpdateItemInput:
			resource, action = aws.ToString(p.TableName), "dynamodb:"+op
		case *dynamodb.GetItemInput:
			resource, action = aws.ToString(p.TableName), "dynamodb:"+op
			r.mu.Lock()
			if pk, ok := p.Key[r.pk[resource]].(*ddbtypes.AttributeValueMemberS); ok {
				r.keys[resource] = append(r.keys[resource], pk.Value)
			}
			r.mu.Unlock()
		case *sqs.SendMessageInput:
			resource, action = aws.ToString(p.QueueUrl), "sqs:"+op
		default:
			resource, action = "?", awsmiddleware.GetServiceID(ctx)+":"+op
		}
		r.mu.Lock()
		r.calls[action+" "+resource] = true
		r.mu.Unlock()
		return next.HandleInitialize(ctx, in)
	}), middleware.After)
}

// TestTemplateGrantsEveryCall runs the ingress through each of its paths (a first
// request, a retry, a mismatch, a status, a failed send released, and the retry that
// takes the record over), records every AWS action it takes and on what, and checks that
// IngressFunction's role in template.yaml, as the SAM transform outputs it, allows each;
// and that it reads the consumer's table only under its scope, as the role's
// dynamodb:LeadingKeys condition demands. moto does not enforce IAM, so a missing grant
// would otherwise only show once deployed.
//
// It runs in each layout of the consumer's records, since the condition follows it.
func TestTemplateGrantsEveryCall(t *testing.T) {
	for name, params := range map[string]map[string]string{
		"default":      nil,
		"powertools":   {"IdempotencyAttributeNames": "powertools", "IdempotencyPartitionKey": "id"},
		"single table": {"IdempotencySortKey": "SK", "IdempotencyStaticPartitionKey": "IDEMPOTENCY#ingress"},
		"key prefix":   {"IdempotencyKeyPrefix": "req#"},
	} {
		t.Run(name, func(t *testing.T) { t.Parallel(); grantsEveryCall(t, params) })
	}
}

func grantsEveryCall(t *testing.T, params map[string]string) {
	rec := &iamRecorder{calls: map[string]bool{}, keys: map[string][]string{}, pk: map[string]string{}}
	f := newFixture(t, options{apiOption: rec.apiOption, params: params})
	rec.mu.Lock()
	rec.pk[f.cfg.Layout.Table] = cmp.Or(f.cfg.Layout.PartitionKey, "pk")
	rec.pk[f.cfg.IngressTable] = "pk"
	rec.mu.Unlock()
	ms := f.traffic(t, 2)
	key := f.key("iam")
	wantCode(t, "POST", f.post(t, key, ms[0].Body), http.StatusAccepted)
	wantCode(t, "retry", f.retry(t, key, ms[0].Body), http.StatusAccepted)
	wantCode(t, "mismatch", f.post(t, key, ms[1].Body), http.StatusUnprocessableEntity)
	wantCode(t, "GET", f.get(t, key), http.StatusOK)
	f.startIngress(t, options{apiOption: rec.apiOption, deadSQS: true})
	wantCode(t, "POST with SQS down", f.post(t, f.key("iam-down"), ms[1].Body), http.StatusServiceUnavailable)
	f.startIngress(t, options{apiOption: rec.apiOption})
	wantCode(t, "the retry", f.post(t, f.key("iam-down"), ms[1].Body), http.StatusAccepted)

	logical := map[string]string{} // table name, queue URL -> logical id
	for _, r := range f.st.Env.Resources {
		logical[r.Name] = r.LogicalID
		if r.URL != "" {
			logical[r.URL] = r.LogicalID
		}
	}
	path := exampletest.TemplatePath()
	if data, err := os.ReadFile(path); err != nil {
		t.Fatal(err)
	} else if wired := exampletest.Wired(t, f.ex); !bytes.Equal(wired, data) {
		path = filepath.Join(t.TempDir(), "template.yaml")
		if err := os.WriteFile(path, wired, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tpl, err := samtemplate.Transform(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	allowed, err := tpl.FunctionAllowed("IngressFunction")
	if err != nil {
		t.Fatal(err)
	}
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
			t.Errorf("template.yaml does not allow %s on %s (IngressFunction's role allows %v)", action, id, allowed[id])
		}
	}
	// The partition keys the role's condition allows, with this layout's parameters.
	wired, err := stack.LoadFor(path, f.ex)
	if err != nil {
		t.Fatal(err)
	}
	if err := wired.SetParameters(params); err != nil {
		t.Fatal(err)
	}
	allow, err := wired.Property("IngressRole", "Policies", "0", "PolicyDocument", "Statement", "Sid=ReadConsumerRecords",
		"Condition", "ForAllValues:StringLike", "dynamodb:LeadingKeys")
	if err != nil {
		t.Fatal(err)
	}
	patterns, _ := allow.([]any)
	consumerReads := rec.keys[f.env["IDEMPOTENCY_TABLE"]]
	if len(consumerReads) == 0 {
		t.Error("no read of the consumer's table: its grant is not exercised")
	}
	for _, pk := range consumerReads {
		if !slices.ContainsFunc(patterns, func(p any) bool { s, _ := p.(string); return stringLike(s, pk) }) {
			t.Errorf("read the consumer's record %q, outside the role's condition dynamodb:LeadingKeys %v", pk, patterns)
		}
	}
	t.Logf("%d action/resource pairs used: %v", len(used), used)
}

// stringLike is IAM's StringLike: * matches any run of characters, ? any one
// (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html#Conditions_String).
func stringLike(pattern, s string) bool {
	re := "^" + strings.NewReplacer(`\*`, ".*", `\?`, ".").Replace(regexp.QuoteMeta(pattern)) + "$"
	return regexp.MustCompile(re).MatchString(s)
}
