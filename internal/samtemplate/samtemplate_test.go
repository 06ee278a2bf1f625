package samtemplate_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
)

const templatePath = "../../template.yaml"

var (
	mu          sync.Mutex
	transformed = map[string]*samtemplate.Template{} // by example
)

// load transforms the repository's template.yaml once for all the tests.
func load(t *testing.T) *samtemplate.Template {
	t.Helper()
	return loadFor(t, wiring.Default())
}

// loadFor transforms template.yaml with ex's block in it (example.Wire), once per
// example: written to a temporary directory unless it is the block template.yaml has.
func loadFor(t *testing.T, ex example.Example) *samtemplate.Template {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if tpl, ok := transformed[ex.Name()]; ok {
		return tpl
	}
	data, err := os.ReadFile(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	path := templatePath
	if name, err := example.BlockExample(data); err != nil || name != ex.Name() {
		wired, err := example.Wire(data, ex)
		if err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(t.TempDir(), "template.yaml")
		if err := os.WriteFile(path, wired, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tpl, err := samtemplate.Transform(context.Background(), path)
	if err != nil {
		t.Fatalf("example %s: %v", ex.Name(), err)
	}
	transformed[ex.Name()] = tpl
	return tpl
}

// eachExample runs check on the template with each example of the build wired.
func eachExample(t *testing.T, check func(t *testing.T, ex example.Example, tpl *samtemplate.Template)) {
	t.Helper()
	for _, ex := range wiring.Examples {
		t.Run(ex.Name(), func(t *testing.T) { check(t, ex, loadFor(t, ex)) })
	}
}

// functions returns the Lambda functions of the transformed template with their roles.
func functions(t *testing.T, tpl *samtemplate.Template) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, fn := range tpl.OfType("AWS::Lambda::Function") {
		role, err := tpl.FunctionRole(fn)
		if err != nil {
			t.Fatal(err)
		}
		out[fn] = role
	}
	if len(out) != 3 {
		t.Fatalf("functions %v, want the consumer, the reaper and the ingress", out)
	}
	return out
}

// TestRolesAreScoped checks every role of the deployed template: no managed policy (SAM
// attaches AWSLambdaSQSQueueExecutionRole, which allows receive and delete on every queue,
// when a function with an SQS event has no Role), no Resource "*", and every resource a
// resource of the stack.
func TestRolesAreScoped(t *testing.T) {
	eachExample(t, func(t *testing.T, _ example.Example, tpl *samtemplate.Template) { rolesAreScoped(t, tpl) })
}

func rolesAreScoped(t *testing.T, tpl *samtemplate.Template) {
	roles := tpl.OfType("AWS::IAM::Role")
	if len(roles) == 0 {
		t.Fatal("no AWS::IAM::Role in the transformed template")
	}
	for _, role := range roles {
		if isSAMCodeDeployRole(t, tpl, role) {
			continue // TestCodeDeployRoleIsSAMs
		}
		managed, err := tpl.ManagedPolicies(role)
		if err != nil {
			t.Fatal(err)
		}
		if len(managed) > 0 {
			t.Errorf("%s has managed policies %v: their resources are not scoped to this stack", role, managed)
		}
		sts, err := tpl.Statements(role)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range sts {
			if st.Effect != "Allow" || traceExport(st) {
				continue // TestTracingGrants checks the trace export's
			}
			for _, a := range st.Actions {
				if strings.Contains(a, "*") {
					t.Errorf("%s statement %s allows the wildcard action %s", role, st.Sid, a)
				}
			}
			for _, r := range st.Resources {
				base, _, _ := strings.Cut(r, "/")
				if _, ok := tpl.Resources[base]; !ok {
					t.Errorf("%s statement %s allows %v on %s, not a resource of the stack", role, st.Sid, st.Actions, r)
				}
			}
		}
	}
	// Each function its own role, so one function's grants never reach the other.
	seen := map[string]string{}
	for fn, role := range functions(t, tpl) {
		if other, ok := seen[role]; ok {
			t.Errorf("%s and %s share the role %s", fn, other, role)
		}
		seen[role] = fn
	}
}

// codeDeployPolicy is the one managed policy the template lets in: the policy SAM gives
// the CodeDeploy service role it adds for DeploymentPreference (samtranslator's
// deployment_preference_collection.py). AWS maintains it for CodeDeploy's Lambda
// deployments; it allows lambda:GetAlias and lambda:UpdateAlias, cloudwatch:DescribeAlarms
// and sns:Publish on every resource
// (https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AWSCodeDeployRoleForLambda.html).
const codeDeployPolicy = `"arn:aws:iam::aws:policy/service-role/AWSCodeDeployRoleForLambda"`

// isSAMCodeDeployRole reports whether role is the CodeDeploy service role as SAM makes it:
// CodeDeployServiceRole, trusted by codedeploy.amazonaws.com alone, with
// AWSCodeDeployRoleForLambda as its only policy. Any other role, or that one changed, is
// checked like the functions' roles.
func isSAMCodeDeployRole(t *testing.T, tpl *samtemplate.Template, role string) bool {
	t.Helper()
	if role != "CodeDeployServiceRole" {
		return false
	}
	trusted, err := tpl.AssumedBy(role)
	if err != nil {
		t.Fatal(err)
	}
	managed, err := tpl.ManagedPolicies(role)
	if err != nil {
		t.Fatal(err)
	}
	sts, err := tpl.Statements(role)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Equal(trusted, []string{"codedeploy.amazonaws.com"}) && slices.Equal(managed, []string{codeDeployPolicy}) && len(sts) == 0
}

// TestCodeDeployRoleIsSAMs: gradual deployments (AutoPublishAlias with a
// DeploymentPreference) add one role that no function runs as: the CodeDeploy service
// role SAM makes, exactly as SAM makes it (isSAMCodeDeployRole), used by the deployment
// groups and by nothing else. Its managed policy is AWS's for CodeDeploy on Lambda; a team
// that wants it narrower gives DeploymentPreference a Role of its own
// (docs/operations.md).
func TestCodeDeployRoleIsSAMs(t *testing.T) {
	eachExample(t, func(t *testing.T, _ example.Example, tpl *samtemplate.Template) {
		var codeDeploy []string
		for _, role := range tpl.OfType("AWS::IAM::Role") {
			trusted, err := tpl.AssumedBy(role)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(trusted, "codedeploy.amazonaws.com") {
				codeDeploy = append(codeDeploy, role)
			}
		}
		if !slices.Equal(codeDeploy, []string{"CodeDeployServiceRole"}) || !isSAMCodeDeployRole(t, tpl, "CodeDeployServiceRole") {
			t.Fatalf("roles CodeDeploy may assume: %v; want SAM's CodeDeployServiceRole alone, trusted by codedeploy.amazonaws.com only, with %s only", codeDeploy, codeDeployPolicy)
		}
		groups := tpl.OfType("AWS::CodeDeploy::DeploymentGroup")
		if len(groups) != 3 {
			t.Errorf("deployment groups %v, want one per function", groups)
		}
		for _, g := range groups {
			var p struct {
				ServiceRoleArn json.RawMessage `json:"ServiceRoleArn"`
			}
			if err := tpl.Props(g, &p); err != nil {
				t.Fatal(err)
			}
			if refName(t, p.ServiceRoleArn) != "CodeDeployServiceRole" {
				t.Errorf("%s runs as %s, want CodeDeployServiceRole", g, p.ServiceRoleArn)
			}
		}
		for id, r := range tpl.Resources {
			if r.Type == "AWS::CodeDeploy::DeploymentGroup" || id == "CodeDeployServiceRole" {
				continue
			}
			if strings.Contains(string(r.Properties), `"CodeDeployServiceRole"`) {
				t.Errorf("%s (%s) refers to CodeDeployServiceRole: only the deployment groups may", id, r.Type)
			}
		}
	})
}

// TestEventSourceMappingCanPoll checks that the role of each SQS event source mapping's
// function allows what the mapping calls with it on exactly that queue
// (https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html), and the
// ChangeMessageVisibility the consumer calls itself.
func TestEventSourceMappingCanPoll(t *testing.T) {
	tpl := load(t)
	roles := functions(t, tpl)
	esms := tpl.OfType("AWS::Lambda::EventSourceMapping")
	if len(esms) == 0 {
		t.Fatal("no event source mapping")
	}
	for _, id := range esms {
		var p struct {
			EventSourceArn json.RawMessage `json:"EventSourceArn"`
			FunctionName   json.RawMessage `json:"FunctionName"`
		}
		if err := tpl.Props(id, &p); err != nil {
			t.Fatal(err)
		}
		queue := refName(t, p.EventSourceArn)
		fn, err := tpl.FunctionOf(p.FunctionName)
		if err != nil {
			t.Fatal(err)
		}
		allowed, err := tpl.Allowed(roles[fn])
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ChangeMessageVisibility"} {
			if !slices.Contains(allowed[queue], a) {
				t.Errorf("%s: role %s of %s does not allow %s on %s", id, roles[fn], fn, a, queue)
			}
		}
	}
}

// TestFunctionsCanLog checks that each function may write to its own log group, and to
// no other.
func TestFunctionsCanLog(t *testing.T) {
	tpl := load(t)
	for fn, role := range functions(t, tpl) {
		var p struct {
			LoggingConfig struct {
				LogGroup json.RawMessage `json:"LogGroup"`
			} `json:"LoggingConfig"`
		}
		if err := tpl.Props(fn, &p); err != nil {
			t.Fatal(err)
		}
		group := refName(t, p.LoggingConfig.LogGroup)
		allowed, err := tpl.Allowed(role)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []string{"logs:CreateLogStream", "logs:PutLogEvents"} {
			if !slices.Contains(allowed[group], a) {
				t.Errorf("%s (role %s) may not %s on its log group %s", fn, role, a, group)
			}
		}
		for res, actions := range allowed {
			if res == group {
				continue
			}
			for _, a := range actions {
				if strings.HasPrefix(a, "logs:") {
					t.Errorf("%s (role %s) may %s on %s, not its log group", fn, role, a, res)
				}
			}
		}
	}
}

// TestReaperGrants checks the reaper's role against the calls it makes: a Query on each
// shard of the inflight index, an UpdateItem per expired lease, and (the outbox) a
// GetItem and the outbound messages that a crashed consumer committed but did not send.
// reaperapp's TestTemplateGrantsEveryCall checks the calls the reaper makes today.
func TestReaperGrants(t *testing.T) {
	eachExample(t, func(t *testing.T, ex example.Example, tpl *samtemplate.Template) {
		allowed, err := tpl.FunctionAllowed("ReaperFunction")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]string{
			"IdempotencyTable/index/inflight": {"dynamodb:Query"},
			"IdempotencyTable":                {"dynamodb:UpdateItem", "dynamodb:GetItem"},
		}
		if q := outboundQueue(t, ex, tpl); q != "" {
			want[q] = []string{"sqs:SendMessage"}
		}
		for res, actions := range want {
			for _, a := range actions {
				if !slices.Contains(allowed[res], a) {
					t.Errorf("ReaperFunction may not %s on %s (allowed: %v)", a, res, allowed)
				}
			}
		}
	})
}

// TestExampleGrants checks the example's grants: its AWS::IAM::Policy resources are
// attached to the consumer's and the reaper's roles, and the consumer may send to the
// example's outbound queue and write to each of the example's tables.
func TestExampleGrants(t *testing.T) {
	eachExample(t, func(t *testing.T, ex example.Example, tpl *samtemplate.Template) {
		for policy, role := range map[string]string{"ExampleConsumerPolicy": "ConsumerRole", "ExampleReaperPolicy": "ReaperRole"} {
			var p struct {
				Roles []json.RawMessage `json:"Roles"`
			}
			if err := tpl.Props(policy, &p); err != nil {
				t.Fatalf("%s: %v", policy, err)
			}
			if len(p.Roles) != 1 || refName(t, p.Roles[0]) != role {
				t.Errorf("%s is attached to %s, want %s only", policy, p.Roles, role)
			}
		}
		allowed, err := tpl.FunctionAllowed("ConsumerFunction")
		if err != nil {
			t.Fatal(err)
		}
		if q := outboundQueue(t, ex, tpl); q != "" && !slices.Contains(allowed[q], "sqs:SendMessage") {
			t.Errorf("ConsumerFunction may not send to the outbound queue %s (allowed: %v)", q, allowed)
		}
		for _, v := range consumerEnv(t, tpl) {
			var ref struct {
				Ref string `json:"Ref"`
			}
			if json.Unmarshal(v, &ref) != nil || ref.Ref == "" || tpl.Resources[ref.Ref].Type != "AWS::DynamoDB::Table" {
				continue
			}
			if len(allowed[ref.Ref]) == 0 {
				t.Errorf("ConsumerFunction has the table %s in its environment but no grant on it", ref.Ref)
			}
		}
	})
}

// TestExampleGrantsBeforeTheFirstEvent: the functions are created only after the
// example's policies are attached (DependsOn: "that resource is created only after the
// creation of the resource specified in the DependsOn attribute",
// https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-attribute-dependson.html),
// and the SQS event source mapping refers to the consumer function, so it is created
// after it (an implicit dependency of a Ref, same page): no event reaches the consumer
// before it may write the example's tables. The mapping invokes the consumer's alias
// "live" (AutoPublishAlias), which refers to the function and to a version of it, which
// refers to the function: created after it too. moto's CloudFormation does not enforce
// IAM, so the order is checked on the template as CloudFormation receives it.
func TestExampleGrantsBeforeTheFirstEvent(t *testing.T) {
	eachExample(t, func(t *testing.T, _ example.Example, tpl *samtemplate.Template) {
		for fn, policy := range map[string]string{"ConsumerFunction": "ExampleConsumerPolicy", "ReaperFunction": "ExampleReaperPolicy"} {
			if !slices.Contains(tpl.DependsOn(fn), policy) {
				t.Errorf("%s DependsOn %v, want %s", fn, tpl.DependsOn(fn), policy)
			}
		}
		mappings := 0
		for id, r := range tpl.Resources {
			if r.Type != "AWS::Lambda::EventSourceMapping" {
				continue
			}
			mappings++
			var p struct {
				FunctionName json.RawMessage `json:"FunctionName"`
			}
			if err := tpl.Props(id, &p); err != nil {
				t.Fatal(err)
			}
			fn, err := tpl.FunctionOf(p.FunctionName)
			if err != nil || fn != "ConsumerFunction" {
				t.Errorf("event source mapping %s invokes %s (%v), want ConsumerFunction or its alias", id, p.FunctionName, err)
			}
		}
		if mappings == 0 {
			t.Error("no event source mapping in the transformed template")
		}
	})
}

// consumerEnv returns the consumer's Environment.Variables.
func consumerEnv(t *testing.T, tpl *samtemplate.Template) map[string]json.RawMessage {
	t.Helper()
	var fn struct {
		Environment struct {
			Variables map[string]json.RawMessage `json:"Variables"`
		} `json:"Environment"`
	}
	if err := tpl.Props("ConsumerFunction", &fn); err != nil {
		t.Fatal(err)
	}
	return fn.Environment.Variables
}

// outboundQueue is the queue the example's outbound messages go to: what the variable
// its example.Confirmer's OutboundQueue names refers to ("" when the example is no
// Confirmer, or names none).
func outboundQueue(t *testing.T, ex example.Example, tpl *samtemplate.Template) string {
	t.Helper()
	_, name := exampletest.Confirms(ex)
	if name == "" {
		return ""
	}
	v, ok := consumerEnv(t, tpl)[name]
	if !ok {
		t.Fatalf("the consumer has no %s, the %s example's outbound queue", name, ex.Name())
	}
	q := refName(t, v)
	if tpl.Resources[q].Type != "AWS::SQS::Queue" {
		t.Fatalf("%s refers to %s, not a queue", name, q)
	}
	return q
}

// refName is the resource raw refers to: a Ref or a GetAtt .Arn.
func refName(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var fn struct {
		GetAtt []string `json:"Fn::GetAtt"`
		Ref    string   `json:"Ref"`
	}
	if err := json.Unmarshal(raw, &fn); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	if fn.Ref != "" {
		return fn.Ref
	}
	if len(fn.GetAtt) == 2 {
		return fn.GetAtt[0]
	}
	t.Fatalf("%s is neither a Ref nor a GetAtt", raw)
	return ""
}

// TestFIFOQueuesHighThroughput checks that every FIFO queue is in high-throughput mode:
// without it, a FIFO queue takes 300 calls per second per API action
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/troubleshooting-fifo-throttling-issues.html),
// and the consumer sends a receipt, and sometimes a dead letter, per record. The input
// queue and its dead-letter queue are FIFO; an example's own queues are what its block
// makes them, FIFO or standard.
func TestFIFOQueuesHighThroughput(t *testing.T) {
	eachExample(t, func(t *testing.T, ex example.Example, tpl *samtemplate.Template) {
		fifoQueuesHighThroughput(t, ex, tpl)
	})
}

// TestStandardOutboundQueue: an example whose outbound queue is a standard queue (its
// block without FifoQueue) passes the check above; the input and dead-letter queues
// stay FIFO.
func TestStandardOutboundQueue(t *testing.T) {
	for _, ex := range wiring.Examples {
		tpl := loadFor(t, ex)
		out := outboundQueue(t, ex, tpl)
		if out == "" {
			continue
		}
		r := tpl.Resources[out]
		r.Properties = json.RawMessage(`{"VisibilityTimeout": 60}`)
		tpl.Resources[out] = r
		t.Run(ex.Name(), func(t *testing.T) { fifoQueuesHighThroughput(t, ex, tpl) })
		return
	}
	t.Skip("no wired example has an outbound queue")
}

func fifoQueuesHighThroughput(t *testing.T, ex example.Example, tpl *samtemplate.Template) {
	fifo := map[string]bool{}
	for _, id := range tpl.OfType("AWS::SQS::Queue") {
		p, err := tpl.Queue(id)
		if err != nil {
			t.Fatal(err)
		}
		if !p.FifoQueue {
			continue
		}
		fifo[id] = true
		if p.FifoThroughputLimit != "perMessageGroupId" || p.DeduplicationScope != "messageGroup" {
			t.Errorf("%s: FifoThroughputLimit %q, DeduplicationScope %q; want perMessageGroupId, messageGroup", id, p.FifoThroughputLimit, p.DeduplicationScope)
		}
	}
	if !fifo["InputQueue"] || !fifo["DeadLetterQueue"] {
		t.Errorf("FIFO queues %v: want the input queue and its dead-letter queue among them", fifo)
	}
	outboundQueue(t, ex, tpl) // a queue of the template, or the test fails
}

// TestLeaseEndsBeforeRedelivery checks the bounds that keep a crashed consumer's lease
// from outliving the message's invisibility: the largest FunctionTimeout plus the largest
// LeaseGraceSeconds is below the input queue's visibility timeout, the consumer runs
// with that timeout and is told that visibility timeout (it checks the inequality at
// init), and 6 x timeout <= visibility timeout, as AWS recommends
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-lambda-function-trigger.html).
func TestLeaseEndsBeforeRedelivery(t *testing.T) {
	tpl := load(t)
	timeout, grace := tpl.Parameters["FunctionTimeout"], tpl.Parameters["LeaseGraceSeconds"]
	if timeout.MaxValue == nil || grace.MaxValue == nil {
		t.Fatal("FunctionTimeout and LeaseGraceSeconds must have a MaxValue")
	}
	q, err := tpl.Queue("InputQueue")
	if err != nil {
		t.Fatal(err)
	}
	if *timeout.MaxValue+*grace.MaxValue >= q.VisibilityTimeout {
		t.Errorf("FunctionTimeout max %v + LeaseGraceSeconds max %v >= visibility timeout %v", *timeout.MaxValue, *grace.MaxValue, q.VisibilityTimeout)
	}
	if 6**timeout.MaxValue > q.VisibilityTimeout {
		t.Errorf("6 x FunctionTimeout max %v > visibility timeout %v", *timeout.MaxValue, q.VisibilityTimeout)
	}
	var fn struct {
		Timeout     json.RawMessage `json:"Timeout"`
		Environment struct {
			Variables map[string]json.RawMessage `json:"Variables"`
		} `json:"Environment"`
	}
	if err := tpl.Props("ConsumerFunction", &fn); err != nil {
		t.Fatal(err)
	}
	if got := refName(t, fn.Timeout); got != "FunctionTimeout" {
		t.Errorf("ConsumerFunction Timeout is %s, want Ref FunctionTimeout", fn.Timeout)
	}
	var vis string
	if err := json.Unmarshal(fn.Environment.Variables["VISIBILITY_TIMEOUT"], &vis); err != nil {
		t.Fatalf("VISIBILITY_TIMEOUT: %v", err)
	}
	if want := strconv.Itoa(int(q.VisibilityTimeout)) + "s"; vis != want {
		t.Errorf("VISIBILITY_TIMEOUT is %q, InputQueue's VisibilityTimeout is %s", vis, want)
	}
	if _, ok := fn.Environment.Variables["FUNCTION_TIMEOUT"]; !ok {
		t.Error("ConsumerFunction has no FUNCTION_TIMEOUT")
	}
}
