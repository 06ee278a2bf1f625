package samtemplate_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
)

// TestIngressLeastPrivilege checks the ingress's role as deployed, statement by
// statement: it may send to the input queue and nothing else of SQS, write and read its
// own table, read (GetItem only) the consumer's records of its own scope (the
// dynamodb:LeadingKeys condition), read the stack's secret and write its log group;
// nothing more. The calls it
// makes are recorded against these grants by ingressapp's TestTemplateGrantsEveryCall.
func TestIngressLeastPrivilege(t *testing.T) {
	eachExample(t, func(t *testing.T, _ example.Example, tpl *samtemplate.Template) {
		allowed, err := tpl.FunctionAllowed("IngressFunction")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]string{
			"IngressTable":     {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"},
			"IdempotencyTable": {"dynamodb:GetItem"},
			"InputQueue":       {"sqs:SendMessage"},
			"IngressLogGroup":  {"logs:CreateLogStream", "logs:PutLogEvents"},
			"StackSecret":      {"secretsmanager:GetSecretValue"},
		}
		got := map[string][]string{}
		for res, actions := range withoutTraceExport(allowed) { // TestTracingGrants checks those
			a := slices.Clone(actions)
			sort.Strings(a)
			got[res] = slices.Compact(a)
		}
		if !maps.EqualFunc(got, want, slices.Equal[[]string]) {
			t.Errorf("IngressFunction's role allows %v, want exactly %v", got, want)
		}
		role, err := tpl.FunctionRole("IngressFunction")
		if err != nil {
			t.Fatal(err)
		}
		sts, err := tpl.Statements(role)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range sts {
			if !slices.Contains(st.Resources, "IdempotencyTable") {
				continue
			}
			var cond map[string]map[string][]json.RawMessage
			if err := json.Unmarshal(st.Condition, &cond); err != nil {
				t.Fatalf("statement %s on the consumer's table: condition %s: %v", st.Sid, st.Condition, err)
			}
			keys := cond["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]
			want := `{"Fn::If":["HasIdempotencySortKey",{"Ref":"IdempotencyStaticPartitionKey"},{"Fn::Sub":"${IdempotencyKeyPrefix}${ScopeName}#*"}]}`
			if len(keys) != 1 || !bytes.Equal(compact(t, keys[0]), []byte(want)) {
				t.Errorf("statement %s reads the consumer's table under condition %s, want only the keys of its scope (dynamodb:LeadingKeys %s; ingressapp's TestTemplateGrantsEveryCall checks the reads match it in each layout)", st.Sid, st.Condition, want)
			}
		}
	})
}

func compact(t *testing.T, raw json.RawMessage) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestIngressURLNeedsIAM: the ingress's function URL (on its alias "live") authenticates
// with IAM (SigV4), and no resource policy opens it: no AWS::Lambda::Permission names the
// ingress or its alias.
func TestIngressURLNeedsIAM(t *testing.T) {
	tpl := load(t)
	urls := 0
	for _, id := range tpl.OfType("AWS::Lambda::Url") {
		var p struct {
			AuthType          string          `json:"AuthType"`
			TargetFunctionArn json.RawMessage `json:"TargetFunctionArn"`
		}
		if err := tpl.Props(id, &p); err != nil {
			t.Fatal(err)
		}
		urls++
		if fn, err := tpl.FunctionOf(p.TargetFunctionArn); err != nil || fn != "IngressFunction" || p.AuthType != "AWS_IAM" {
			t.Errorf("function URL %s: AuthType %q on %s, want AWS_IAM on IngressFunction", id, p.AuthType, p.TargetFunctionArn)
		}
	}
	if urls != 1 {
		t.Errorf("%d function URLs, want the ingress's", urls)
	}
	for _, id := range tpl.OfType("AWS::Lambda::Permission") {
		var p struct {
			FunctionName json.RawMessage `json:"FunctionName"`
			Principal    json.RawMessage `json:"Principal"`
		}
		if err := tpl.Props(id, &p); err != nil {
			t.Fatal(err)
		}
		if fn, err := tpl.FunctionOf(p.FunctionName); err != nil || fn != "IngressFunction" {
			continue
		}
		t.Errorf("permission %s grants %s on %s: the ingress takes IAM-authorized callers only", id, p.Principal, p.FunctionName)
	}
}

// TestIngressAgreesWithConsumer: the ingress keys, scopes and fingerprints requests as
// the consumer does only if it reads the same scope and records and sends to the queue
// the consumer polls, keeps its own records elsewhere, holds a key no longer than its
// timeout, and validates with the example the consumer runs: the build's default, whose
// block template.yaml carries (the ingress is given no EXAMPLE).
func TestIngressAgreesWithConsumer(t *testing.T) {
	tpl := load(t)
	env := func(fn string) map[string]json.RawMessage {
		var p struct {
			Timeout     json.RawMessage `json:"Timeout"`
			Environment struct {
				Variables map[string]json.RawMessage `json:"Variables"`
			} `json:"Environment"`
		}
		if err := tpl.Props(fn, &p); err != nil {
			t.Fatal(err)
		}
		p.Environment.Variables["(Timeout)"] = p.Timeout
		return p.Environment.Variables
	}
	consumer, ingress := env("ConsumerFunction"), env("IngressFunction")
	for _, name := range []string{"IDEMPOTENCY_SCOPE", "IDEMPOTENCY_TABLE", "IDEMPOTENCY_TTL", "LEASE_GRACE"} {
		if ingress[name] == nil || !bytes.Equal(compact(t, ingress[name]), compact(t, consumer[name])) {
			t.Errorf("%s: the ingress has %s, the consumer %s", name, ingress[name], consumer[name])
		}
	}
	if q := refName(t, ingress["INPUT_QUEUE_URL"]); q != "InputQueue" {
		t.Errorf("INPUT_QUEUE_URL refers to %s, want InputQueue, the consumer's event source", q)
	}
	if tb := refName(t, ingress["INGRESS_TABLE"]); tb == "IdempotencyTable" || tpl.Resources[tb].Type != "AWS::DynamoDB::Table" {
		t.Errorf("INGRESS_TABLE refers to %s, want a table of its own", tb)
	}
	var window string
	_ = json.Unmarshal(ingress["ACCEPT_WINDOW"], &window)
	if timeout := string(compact(t, ingress["(Timeout)"])); window != timeout+"s" {
		t.Errorf("ACCEPT_WINDOW %q, the ingress's Timeout %s: change both together", window, timeout)
	}
	if _, ok := ingress["EXAMPLE"]; ok {
		t.Error("the ingress sets EXAMPLE: it runs the build's default, the example template.yaml's block wires")
	}
	data, err := os.ReadFile(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	if name, err := example.BlockExample(data); err != nil || name != wiring.Default().Name() {
		t.Errorf("template.yaml wires example %q (%v), the build's default is %q: the ingress would validate with another example than the consumer's", name, err, wiring.Default().Name())
	}
	if _, err := strconv.Atoi(string(compact(t, ingress["(Timeout)"]))); err != nil {
		t.Errorf("the ingress's Timeout %s is not a number of seconds", ingress["(Timeout)"])
	}
}
