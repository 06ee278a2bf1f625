package samdeploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
)

func TestMain(m *testing.M) { os.Exit(awstest.Main(m)) }

type deployment struct {
	Status    string            `json:"status"`
	Reason    string            `json:"reason"`
	Outputs   map[string]string `json:"outputs"`
	Resources []struct {
		ID, Type, Status, Physical string
	} `json:"resources"`
	TransformedTypes []string `json:"transformed_types"`
	Workarounds      []string `json:"workarounds"`
	ESMs             []struct {
		Function           string   `json:"function"`
		Source             string   `json:"source"`
		BatchSize          int      `json:"batch_size"`
		ResponseTypes      []string `json:"response_types"`
		MaximumConcurrency int      `json:"maximum_concurrency"`
	} `json:"event_source_mappings"`
	Rules []struct {
		Rule     string   `json:"rule"`
		Schedule string   `json:"schedule"`
		Targets  []string `json:"targets"`
	} `json:"rule_targets"`
	FunctionURLs []struct {
		ID         string `json:"id"`
		Function   string `json:"function"`
		AuthType   string `json:"auth_type"`
		InvokeMode string `json:"invoke_mode"`
	} `json:"function_urls"`
}

// TestTemplateDeploysOnMoto: template.yaml, transformed by aws-sam-translator as `sam
// deploy` has CloudFormation do, creates on moto's CloudFormation: CREATE_COMPLETE,
// every resource created, the consumer's SQS event source mapping with partial batch
// responses, and the reaper's schedule rule targeting the reaper.
func TestTemplateDeploysOnMoto(t *testing.T) {
	stack := strings.ReplaceAll(awstest.Name(t, "sam"), "_", "-")
	cmd := exec.Command("python3", "deploy.py", "--template", "../../template.yaml", "--endpoint", awstest.Endpoint(t),
		"--stack", stack, "--region", awstest.Region)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("deploy.py (needs python3 with aws-sam-translator, which cfn-lint installs, and boto3): %v\n%s", err, stderr.String())
	}
	var d deployment
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("deploy.py output: %v\n%s", err, out)
	}
	t.Logf("workarounds for moto: %s", strings.Join(d.Workarounds, "; "))
	if d.Status != "CREATE_COMPLETE" {
		t.Fatalf("stack %s: %s (%s)", stack, d.Status, d.Reason)
	}

	// Every resource of the transformed template must be created, but the alarms, which
	// moto's CloudFormation does not create (deploy.py); the list comes from the template,
	// so a renamed or added resource needs no change here.
	tpl, err := samtemplate.Transform(context.Background(), "../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for id, r := range tpl.Resources {
		// moto's CloudFormation creates no alarm and has no function URL, alias or
		// CodeDeploy resource: deploy.py creates the URL through Lambda's API (checked
		// below) and leaves the others out (internal/samtemplate's TestSafeDeploys checks
		// them in the transformed template). Nor has it a model of a Secrets Manager
		// secret, its resource policy or a queue policy, which it lists without an id:
		// internal/samtemplate's TestStackSecret, TestOnlyTheFunctionsAndTheOperatorReadTheSecret
		// and TestOnlyTheConsumerAndTheReaperDeadLetter check them, and internal/stack
		// creates the secret on moto for local runs.
		switch {
		case r.Type == "AWS::CloudWatch::Alarm", r.Type == "AWS::Lambda::Url", r.Type == "AWS::Lambda::Alias", r.Type == "AWS::CodeDeploy::Application", r.Type == "AWS::CodeDeploy::DeploymentGroup",
			r.Type == "AWS::SecretsManager::Secret", r.Type == "AWS::SecretsManager::ResourcePolicy", r.Type == "AWS::SQS::QueuePolicy":
		case r.Condition != "":
			// Created on a condition the default parameters leave false (the tracing
			// grants: internal/samtemplate's TestTracingGrants checks them).
		default:
			want[id] = r.Type
		}
	}
	for _, typ := range []string{"AWS::SQS::Queue", "AWS::DynamoDB::Table", "AWS::Lambda::Function", "AWS::IAM::Role", "AWS::Lambda::EventSourceMapping", "AWS::Events::Rule",
		"AWS::Lambda::Version", "AWS::CloudWatch::Dashboard"} {
		if !slices.Contains(slices.Collect(maps.Values(want)), typ) {
			t.Errorf("the transformed template has no %s", typ)
		}
	}
	got := map[string]string{}
	for _, r := range d.Resources {
		if r.ID == "" {
			continue // an alarm: moto does not create them (see deploy.py)
		}
		got[r.ID] = r.Type
		if r.Status != "CREATE_COMPLETE" {
			t.Errorf("%s (%s): %s", r.ID, r.Type, r.Status)
		}
	}
	for id, typ := range want {
		if typ == "AWS::Lambda::Version" {
			// Its logical id ends with a hash of the code's location, which deploy.py sets
			// apart from samtemplate.Transform: the function's version, by its prefix.
			prefix := id[:strings.LastIndex(id, "Version")+len("Version")]
			if !slices.ContainsFunc(slices.Collect(maps.Keys(got)), func(g string) bool { return strings.HasPrefix(g, prefix) && got[g] == typ }) {
				t.Errorf("resource %s*: no %s created", prefix, typ)
			}
			continue
		}
		if got[id] != typ {
			t.Errorf("resource %s: %q, want %s created", id, got[id], typ)
		}
	}
	if !slices.Contains(d.TransformedTypes, "AWS::CloudWatch::Alarm") {
		t.Errorf("the transformed template has no alarm: %v", d.TransformedTypes)
	}

	if len(d.ESMs) != 1 || d.ESMs[0].Function != "ConsumerFunction" || !strings.HasSuffix(d.ESMs[0].Source, stack+"-InputQueue.fifo") ||
		d.ESMs[0].BatchSize != 10 || !slices.Equal(d.ESMs[0].ResponseTypes, []string{"ReportBatchItemFailures"}) ||
		fmt.Sprint(d.ESMs[0].MaximumConcurrency) != fmt.Sprint(tpl.Parameters["ConsumerMaxConcurrency"].Default) {
		t.Errorf("event source mappings %+v: want the consumer on the input queue, batch 10, ReportBatchItemFailures, MaximumConcurrency %v (ConsumerMaxConcurrency)",
			d.ESMs, tpl.Parameters["ConsumerMaxConcurrency"].Default)
	}
	if len(d.Rules) != 1 || d.Rules[0].Schedule != "rate(1 minute)" || len(d.Rules[0].Targets) != 1 ||
		!strings.Contains(d.Rules[0].Targets[0], "ReaperFunction") {
		t.Errorf("rules %+v: want the reaper's rate(1 minute) schedule targeting the reaper", d.Rules)
	}

	// The ingress's function URL: IAM auth, buffered.
	if len(d.FunctionURLs) != 1 || d.FunctionURLs[0].Function != "IngressFunction" || d.FunctionURLs[0].AuthType != "AWS_IAM" ||
		d.FunctionURLs[0].InvokeMode != "BUFFERED" {
		t.Errorf("function URLs %+v: want the ingress's, AuthType AWS_IAM, BUFFERED", d.FunctionURLs)
	}

	// The input queue as the template describes it: FIFO, 180 s visibility, redrive to
	// the DLQ after 5 receives.
	q, err := awstest.SQS(t).GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(d.Outputs["QueueUrl"]), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
	})
	if err != nil {
		t.Fatalf("input queue %q: %v", d.Outputs["QueueUrl"], err)
	}
	if a := q.Attributes; a["FifoQueue"] != "true" || a["VisibilityTimeout"] != "180" || !strings.Contains(a["RedrivePolicy"], `"maxReceiveCount": 5`) &&
		!strings.Contains(a["RedrivePolicy"], `"maxReceiveCount":5`) {
		t.Errorf("input queue attributes %v", a)
	}
}
