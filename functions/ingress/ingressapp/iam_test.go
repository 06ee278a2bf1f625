package ingressapp_test

import (
	"cmp"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

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
	// Besides the calls, the partition keys the ingress reads of the consumer's table.
	var mu sync.Mutex
	var consumerTable, consumerPK string
	var consumerReads []string
	rec := &exampletest.IAMCalls{Seen: func(params any) {
		mu.Lock()
		defer mu.Unlock()
		if p, ok := params.(*dynamodb.GetItemInput); ok && consumerTable != "" && aws.ToString(p.TableName) == consumerTable {
			if pk, ok := p.Key[consumerPK].(*ddbtypes.AttributeValueMemberS); ok {
				consumerReads = append(consumerReads, pk.Value)
			}
		}
	}}
	f := newFixture(t, options{apiOption: rec.APIOption, params: params})
	mu.Lock()
	consumerTable, consumerPK = f.cfg.Layout.Table, cmp.Or(f.cfg.Layout.PartitionKey, "pk")
	mu.Unlock()
	ms := f.traffic(t, 2)
	key := f.key("iam")
	wantCode(t, "POST", f.post(t, key, ms[0].Body), http.StatusAccepted)
	wantCode(t, "retry", f.retry(t, key, ms[0].Body), http.StatusAccepted)
	wantCode(t, "mismatch", f.post(t, key, ms[1].Body), http.StatusUnprocessableEntity)
	wantCode(t, "GET", f.get(t, key), http.StatusOK)
	f.startIngress(t, options{apiOption: rec.APIOption, deadSQS: true})
	wantCode(t, "POST with SQS down", f.post(t, f.key("iam-down"), ms[1].Body), http.StatusServiceUnavailable)
	f.startIngress(t, options{apiOption: rec.APIOption})
	wantCode(t, "the retry", f.post(t, f.key("iam-down"), ms[1].Body), http.StatusAccepted)

	used := rec.Used()
	path := f.st.CheckGrants(t, "IngressFunction", used)
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
	mu.Lock()
	defer mu.Unlock()
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
