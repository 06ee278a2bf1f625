package stack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/envconf"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// TestMain points the integration tests at a local endpoint, starting moto_server when
// AWS_ENDPOINT_URL is unset.
func TestMain(m *testing.M) { os.Exit(awstest.Main(m)) }

const templatePath = "../../template.yaml"

// stackName returns a stack name unique to the test, short enough for SQS's 80
// characters with "-DeadLetterQueue.fifo" appended.
func stackName(t *testing.T) string {
	t.Helper()
	name := awstest.Name(t, "s")
	if len(name)+len("-DeadLetterQueue.fifo") > 80 {
		t.Fatalf("stack name %s is too long for the queue names", name)
	}
	return name
}

func clients(t *testing.T) stack.Clients {
	return stack.Clients{SQS: awstest.SQS(t), DynamoDB: awstest.DynamoDB(t), SecretsManager: awstest.SecretsManager(t), Region: awstest.Region}
}

// cleanup deletes what Up created.
func cleanup(t *testing.T, env *stack.Env) {
	t.Cleanup(func() {
		ctx := context.Background()
		for _, r := range env.Resources {
			switch r.Type {
			case stack.TypeQueue:
				_, _ = awstest.SQS(t).DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(r.URL)})
			case stack.TypeSecret:
				_, _ = awstest.SecretsManager(t).DeleteSecret(ctx, &secretsmanager.DeleteSecretInput{SecretId: aws.String(r.ARN), ForceDeleteWithoutRecovery: aws.Bool(true)})
			default:
				_, _ = awstest.DynamoDB(t).DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(r.Name)})
			}
		}
	})
}

func up(t *testing.T, tm *stack.Template, name string) (*stack.Env, string) {
	t.Helper()
	var progress bytes.Buffer
	env, err := stack.Up(context.Background(), tm, clients(t), name, &progress)
	if err != nil {
		t.Fatalf("Up: %v\n%s", err, progress.String())
	}
	cleanup(t, env)
	return env, progress.String()
}

func load(t *testing.T) *stack.Template {
	t.Helper()
	tm, err := stack.Load(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// progressStatus maps logical id to the status word of its progress line.
func progressStatus(progress string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(progress), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] != "note:" {
			out[f[2]] = f[0]
		}
	}
	return out
}

func TestUpOurTemplate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tm := load(t)
	name := stackName(t)
	env, progress := up(t, tm, name)

	// What the template says: its queues and tables created, the rest skipped.
	info := exampletest.ReadTemplateFile(t, templatePath)
	wantStatus := map[string]string{}
	for _, r := range info.Resources {
		wantStatus[r.ID] = "skipped"
		if r.Type == stack.TypeQueue || r.Type == stack.TypeTable || r.Type == stack.TypeSecret {
			wantStatus[r.ID] = "created"
		}
	}
	if got := progressStatus(progress); !reflect.DeepEqual(got, wantStatus) {
		t.Errorf("first run progress:\n%s\nstatuses %v, want %v", progress, got, wantStatus)
	}

	// The environment: the functions' variables, in template order, resolved, then
	// QUEUE_URL.
	dlq, _ := env.Resource("DeadLetterQueue")
	input, _ := env.Resource("InputQueue")
	want := templateEnv(t, info, env, name)
	want = append(want, stack.Var{Name: stack.QueueURLVar, Value: input.URL})
	// The stack's secret: made by the endpoint as GenerateSecretString says (64 letters
	// and digits), its ARN in the functions' variables, its value in STACK_SECRET.
	secret, ok := env.Resource("StackSecret")
	if !ok {
		t.Fatal("no StackSecret")
	}
	value, err := awstest.SecretsManager(t).GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(secret.ARN)})
	if err != nil {
		t.Fatal(err)
	}
	if v := aws.ToString(value.SecretString); len(v) != 64 || strings.IndexFunc(v, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9')
	}) >= 0 {
		t.Errorf("the stack's secret %q: want 64 letters and digits", v)
	}
	want = append(want, stack.Var{Name: stack.SecretValueVar, Value: aws.ToString(value.SecretString)})
	if !reflect.DeepEqual(env.Vars, want) {
		t.Errorf("env:\n%v\nwant\n%v", env.Vars, want)
	}
	if scope, _ := env.Lookup("IDEMPOTENCY_SCOPE"); scope == "" || scope != info.Defaults["ScopeName"] {
		t.Errorf("IDEMPOTENCY_SCOPE %q, want the ScopeName default %q", scope, info.Defaults["ScopeName"])
	}
	// FUNCTION_TIMEOUT tells each function its own Timeout: they must agree.
	for _, id := range []string{"ConsumerFunction", "ReaperFunction"} {
		fn, err := tm.Function(id)
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := env.Lookup("FUNCTION_TIMEOUT"); v != fn.Timeout.String() {
			t.Errorf("%s: FUNCTION_TIMEOUT %s, Timeout %s: change both together", id, v, fn.Timeout)
		}
	}
	queues := info.OfType(stack.TypeQueue)
	for _, id := range queues {
		q, ok := env.Resource(id)
		suffix := "" // a standard queue, unless the template makes it FIFO
		if fifo, _ := info.Static(info.Prop(id, "FifoQueue")); fifo == "true" {
			suffix = ".fifo"
		}
		if !ok || !strings.HasSuffix(q.URL, "/"+name+"-"+q.LogicalID+suffix) || !strings.HasPrefix(q.ARN, "arn:aws:sqs:") {
			t.Errorf("queue %s: URL %s, ARN %s", id, q.URL, q.ARN)
		}
	}
	wantQueues := 2 // the input queue and the DLQ
	if _, outbound := exampletest.Confirms(wiring.Default()); outbound != "" {
		wantQueues++ // and the example's outbound queue
	}
	if len(queues) < wantQueues {
		t.Errorf("queues %v: want the input queue, the DLQ and the example's outbound queue if it has one", queues)
	}

	// The input queue: FIFO, visibility 180 s, redrive to the DLQ after 5 receives.
	sqsAPI := awstest.SQS(t)
	attrs := func(url string) map[string]string {
		out, err := sqsAPI.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
		})
		if err != nil {
			t.Fatal(err)
		}
		return out.Attributes
	}
	in := attrs(input.URL)
	for k, v := range map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "false", "VisibilityTimeout": "180", "MessageRetentionPeriod": "345600"} {
		if in[k] != v {
			t.Errorf("input queue %s = %q, want %q", k, in[k], v)
		}
	}
	var redrive struct {
		DeadLetterTargetArn string          `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(in["RedrivePolicy"]), &redrive); err != nil {
		t.Fatalf("RedrivePolicy %q: %v", in["RedrivePolicy"], err)
	}
	if redrive.DeadLetterTargetArn != dlq.ARN || strings.Trim(string(redrive.MaxReceiveCount), `"`) != "5" {
		t.Errorf("RedrivePolicy %s, want the DLQ %s and maxReceiveCount 5", in["RedrivePolicy"], dlq.ARN)
	}
	if d := attrs(dlq.URL); d["FifoQueue"] != "true" || d["MessageRetentionPeriod"] != "1209600" || d["RedrivePolicy"] != "" {
		t.Errorf("DLQ attributes %v", d)
	}

	// The idempotency table: key pk, the sparse inflight GSI, TTL on expires_at.
	ddb := awstest.DynamoDB(t)
	desc, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name + "-IdempotencyTable")})
	if err != nil {
		t.Fatal(err)
	}
	if ks := desc.Table.KeySchema; len(ks) != 1 || aws.ToString(ks[0].AttributeName) != "pk" {
		t.Errorf("key schema %v", ks)
	}
	gsi := desc.Table.GlobalSecondaryIndexes
	if len(gsi) != 1 || aws.ToString(gsi[0].IndexName) != "inflight" || len(gsi[0].KeySchema) != 2 ||
		aws.ToString(gsi[0].KeySchema[0].AttributeName) != "inflight" || aws.ToString(gsi[0].KeySchema[1].AttributeName) != "lease_until" ||
		gsi[0].Projection.ProjectionType != ddbtypes.ProjectionTypeInclude ||
		!slices.Equal(gsi[0].Projection.NonKeyAttributes, []string{"lease_token", "owner", "attempt"}) {
		t.Errorf("GSI %+v", gsi)
	}
	ttl, err := ddb.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name + "-IdempotencyTable")})
	if err != nil {
		t.Fatal(err)
	}
	if d := ttl.TimeToLiveDescription; d.TimeToLiveStatus != ddbtypes.TimeToLiveStatusEnabled || aws.ToString(d.AttributeName) != "expires_at" {
		t.Errorf("TTL %+v", d)
	}
	// Every table has the key schema the template gives it (the example's too).
	for _, id := range info.OfType(stack.TypeTable) {
		tb, ok := env.Resource(id)
		if !ok {
			t.Fatalf("table %s not created", id)
		}
		desc, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(tb.Name)})
		if err != nil {
			t.Fatal(err)
		}
		var got, want []string
		for _, k := range desc.Table.KeySchema {
			got = append(got, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
		}
		ks := info.Prop(id, "KeySchema")
		if ks != nil && ks.Tag == "!If" {
			// A key schema chosen by a condition (the idempotency table's, by
			// IdempotencySortKey) is checked above and in TestUpIdempotencyLayouts.
			continue
		}
		if ks != nil {
			for _, k := range ks.Content {
				var e struct {
					AttributeName string `yaml:"AttributeName"`
					KeyType       string `yaml:"KeyType"`
				}
				if err := k.Decode(&e); err != nil {
					t.Fatal(err)
				}
				want = append(want, e.AttributeName+" "+e.KeyType)
			}
		}
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("table %s: key schema %v, want the template's %v", id, got, want)
		}
	}

	// Twice: everything exists, nothing changes.
	env2, progress2 := up(t, tm, name)
	for id, st := range progressStatus(progress2) {
		if st != "exists" && st != "skipped" {
			t.Errorf("second run: %s %s\n%s", id, st, progress2)
		}
	}
	if !reflect.DeepEqual(env2.Vars, env.Vars) {
		t.Errorf("second run env %v, first %v", env2.Vars, env.Vars)
	}
}

func TestUpConvergesQueueAttributes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tm := load(t)
	name := stackName(t)
	env, _ := up(t, tm, name)
	input, _ := env.Resource("InputQueue")
	sqsAPI := awstest.SQS(t)
	if _, err := sqsAPI.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{
		QueueUrl: aws.String(input.URL), Attributes: map[string]string{"VisibilityTimeout": "30", "RedrivePolicy": ""},
	}); err != nil {
		t.Fatal(err)
	}
	_, progress := up(t, tm, name)
	if st := progressStatus(progress)["InputQueue"]; st != "updated" {
		t.Errorf("InputQueue %s after its attributes changed, want updated:\n%s", st, progress)
	}
	out, err := sqsAPI.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(input.URL), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.Attributes["VisibilityTimeout"] != "180" || !strings.Contains(out.Attributes["RedrivePolicy"], "DeadLetterQueue") {
		t.Errorf("attributes not converged: %v", out.Attributes)
	}
}

// inlineTemplate exercises what our template does not: a standard queue, parameters in
// properties, a RedrivePolicy as JSON text, DependsOn, a resource behind a condition,
// Fn::Sub with pseudo parameters and attributes, Fn::If, and Globals.
const inlineTemplate = `
Transform: AWS::Serverless-2016-10-31
Parameters:
  Stage:
    Type: String
    Default: dev
  Visibility:
    Type: Number
    Default: 45
Conditions:
  IsProd: !Equals [!Ref Stage, prod]
Globals:
  Function:
    Environment:
      Variables:
        STAGE: !Ref Stage
        REGION: !Ref AWS::Region
Resources:
  Work:
    Type: AWS::SQS::Queue
    DependsOn: Store
    Properties:
      VisibilityTimeout: !Ref Visibility
      DelaySeconds: 2
      RedrivePolicy: !Sub '{"deadLetterTargetArn": "${Dead.Arn}", "maxReceiveCount": 3}'
      KmsMasterKeyId: alias/aws/sqs
  Dead:
    Type: AWS::SQS::Queue
  ProdOnly:
    Type: AWS::SQS::Queue
    Condition: IsProd
  Store:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PROVISIONED
      ProvisionedThroughput: {ReadCapacityUnits: 1, WriteCapacityUnits: 1}
      KeySchema: [{AttributeName: id, KeyType: HASH}]
      AttributeDefinitions: [{AttributeName: id, AttributeType: S}]
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          STAGE: !Ref Stage
          NAMES: !Sub "${AWS::StackName}:${Work.QueueName}:${Store}:${Store.Arn}"
          MODE: !If [IsProd, strict, relaxed]
          ACCOUNT: !Sub "${AWS::AccountId}"
      Events:
        Jobs:
          Type: SQS
          Properties:
            Queue: !GetAtt Work.Arn
            BatchSize: 3
        Tick:
          Type: Schedule
          Properties:
            Schedule: rate(5 minutes)
`

func TestUpInlineTemplate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tm, err := stack.Parse([]byte(inlineTemplate))
	if err != nil {
		t.Fatal(err)
	}
	name := stackName(t)
	env, progress := up(t, tm, name)
	work, _ := env.Resource("Work")
	dead, _ := env.Resource("Dead")
	store, _ := env.Resource("Store")
	if _, ok := env.Resource("ProdOnly"); ok || !strings.Contains(progress, "condition IsProd is false") {
		t.Errorf("ProdOnly created or not reported skipped:\n%s", progress)
	}
	if !strings.Contains(progress, "KmsMasterKeyId: ignored locally") {
		t.Errorf("no note on the KMS property:\n%s", progress)
	}
	// Dependencies first: Dead (RedrivePolicy) and Store (DependsOn) before Work.
	var order []string
	for _, r := range env.Resources {
		order = append(order, r.LogicalID)
	}
	if !reflect.DeepEqual(order, []string{"Dead", "Store", "Work"}) {
		t.Errorf("creation order %v", order)
	}
	account := strings.Split(work.ARN, ":")[4]
	want := []stack.Var{
		{"STAGE", "dev"},
		{"REGION", awstest.Region},
		{"NAMES", fmt.Sprintf("%s:%s:%s:%s", name, name+"-Work", name+"-Store", store.ARN)},
		{"MODE", "relaxed"},
		{"ACCOUNT", account},
		{"QUEUE_URL", work.URL},
	}
	if !reflect.DeepEqual(env.Vars, want) {
		t.Errorf("env:\n%v\nwant\n%v", env.Vars, want)
	}
	out, err := awstest.SQS(t).GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(work.URL), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
	})
	if err != nil {
		t.Fatal(err)
	}
	if a := out.Attributes; a["VisibilityTimeout"] != "45" || a["DelaySeconds"] != "2" || !strings.Contains(a["RedrivePolicy"], dead.ARN) || a["FifoQueue"] == "true" {
		t.Errorf("Work attributes %v", a)
	}
	es, err := tm.EventSource()
	if err != nil {
		t.Fatal(err)
	}
	if es.QueueLogicalID != "Work" || es.BatchSize != 3 || es.VisibilityTimeout != 45*time.Second || es.ReportBatchItemFailures {
		t.Errorf("event source %+v", es)
	}
	if d, err := tm.ReaperPeriod(); err != nil || d != 5*time.Minute {
		t.Errorf("ReaperPeriod = %v, %v", d, err)
	}

	// With the parameter overridden, the condition flips and the new queue appears.
	if err := tm.SetParameters(map[string]string{"Stage": "prod"}); err != nil {
		t.Fatal(err)
	}
	env, _ = up(t, tm, name)
	if _, ok := env.Resource("ProdOnly"); !ok {
		t.Error("ProdOnly not created with Stage=prod")
	}
	if v, _ := env.Lookup("MODE"); v != "strict" {
		t.Errorf("MODE = %q with Stage=prod", v)
	}
}

func TestUpErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		template string
		stack    string
		want     []string
	}{
		{"unsupported property", `
Resources:
  Q:
    Type: AWS::SQS::Queue
    Properties:
      Bogus: 1
`, "", []string{"resource Q (line 3), property Bogus", "not supported locally"}},
		{"unsupported intrinsic in a property", `
Resources:
  Q:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: !ImportValue shared-timeout
`, "", []string{"resource Q", "property VisibilityTimeout", "Fn::ImportValue is not supported locally"}},
		{"reference to a function", `
Resources:
  F:
    Type: AWS::Serverless::Function
  Q:
    Type: AWS::SQS::Queue
    Properties:
      RedrivePolicy: {deadLetterTargetArn: !GetAtt F.Arn, maxReceiveCount: 1}
`, "", []string{"resource Q", "property RedrivePolicy.deadLetterTargetArn", "F is a AWS::Serverless::Function"}},
		{"circular", `
Resources:
  A:
    Type: AWS::SQS::Queue
    Properties:
      RedrivePolicy: {deadLetterTargetArn: !GetAtt B.Arn, maxReceiveCount: 1}
  B:
    Type: AWS::SQS::Queue
    Properties:
      RedrivePolicy: {deadLetterTargetArn: !GetAtt A.Arn, maxReceiveCount: 1}
`, "", []string{"circular dependency between A, B"}},
		{"the first of several problems", `
Resources:
  Q:
    Type: AWS::SQS::Queue
    Properties:
      FifoQueue: maybe
      Bogus: 1
`, "", []string{"resource Q (line 3), property FifoQueue: want true or false"}},
		{"wrong type in a nested mapping", `
Resources:
  T:
    Type: AWS::DynamoDB::Table
    Properties:
      KeySchema: [{AttributeName: pk, KeyType: HASH}]
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
      ProvisionedThroughput: {ReadCapacityUnits: many, WriteCapacityUnits: 1}
`, "", []string{"resource T (line 3), property ProvisionedThroughput.ReadCapacityUnits", "is not a whole number"}},
		{"content-based deduplication on a standard queue", `
Resources:
  Q:
    Type: AWS::SQS::Queue
    Properties:
      ContentBasedDeduplication: true
`, "", []string{"property ContentBasedDeduplication: applies to FIFO queues only"}},
		{"queue name too long", `
Resources:
  AQueueWithAVeryLongLogicalIdThatMakesTheNameLongerThanEighty:
    Type: AWS::SQS::Queue
    Properties:
      FifoQueue: true
`, "stack-name-that-is-long", []string{"is 89 characters, SQS allows 80"}},
		{"no default", `
Parameters:
  P:
    Type: String
Resources:
  Q:
    Type: AWS::SQS::Queue
`, "", []string{"parameter P has no Default", "--param P="}},
		{"bad stack name", `
Resources:
  Q:
    Type: AWS::SQS::Queue
`, "has space", []string{`stack name "has space"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tm, err := stack.Parse([]byte(tt.template))
			if err != nil {
				t.Fatal(err)
			}
			name := tt.stack
			if name == "" {
				name = stackName(t)
			}
			env, err := stack.Up(context.Background(), tm, clients(t), name, nil)
			if env != nil {
				cleanup(t, env)
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestUpExistingTableWithOtherKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := stackName(t)
	ddb := awstest.DynamoDB(t)
	table := name + "-IdempotencyTable"
	if err := awstest.CreateTable(ctx, ddb, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          ddbtypes.BillingModePayPerRequest,
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: ddbtypes.KeyTypeHash}},
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ddb.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)}) })
	tm, err := stack.Parse([]byte(`
Resources:
  IdempotencyTable:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      KeySchema: [{AttributeName: pk, KeyType: HASH}]
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = stack.Up(ctx, tm, clients(t), name, nil)
	if err == nil || !strings.Contains(err.Error(), "exists but its key schema is (id HASH), the template's (pk HASH)") {
		t.Fatalf("error %v", err)
	}
}

func TestUpUnreachable(t *testing.T) {
	t.Parallel()
	port, err := awstest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ep := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := awstest.ConfigFor(t, ep)
	cfg.RetryMaxAttempts = 1
	_, err = stack.Up(context.Background(), load(t), stack.Clients{
		SQS: sqs.NewFromConfig(cfg), DynamoDB: dynamodb.NewFromConfig(cfg), SecretsManager: secretsmanager.NewFromConfig(cfg),
	}, stackName(t), nil)
	var ee *stack.EndpointError
	if !errors.As(err, &ee) || ee.Endpoint != ep || !strings.Contains(err.Error(), "cannot reach the AWS endpoint "+ep) {
		t.Fatalf("error %v, want an EndpointError for %s", err, ep)
	}
}

func TestEventSourceOurTemplate(t *testing.T) {
	t.Parallel()
	es, err := load(t).EventSource()
	if err != nil {
		t.Fatal(err)
	}
	want := stack.EventSource{
		FunctionLogicalID: "ConsumerFunction", EventName: "InputQueueEvent", QueueLogicalID: "InputQueue",
		BatchSize: 10, ReportBatchItemFailures: true, VisibilityTimeout: 180 * time.Second,
	}
	if es != want {
		t.Errorf("EventSource = %+v, want %+v", es, want)
	}
}

func TestReaperPeriod(t *testing.T) {
	t.Parallel()
	tests := []struct {
		schedule string // "" for the template's default
		want     time.Duration
		err      string
	}{
		{"", time.Minute, ""},
		{"rate(5 minutes)", 5 * time.Minute, ""},
		{"rate(1 hour)", time.Hour, ""},
		{"rate(10 seconds)", 10 * time.Second, ""},
		{"cron(0/5 * * * ? *)", 0, "cron expressions are not supported locally"},
		{"rate(5 minute)", 0, "write rate(5 minutes)"},
		{"rate(1 minutes)", 0, "write rate(1 minute)"},
		{"rate(0 minutes)", 0, "positive"},
		{"rate(2 weeks)", 0, "unknown unit weeks"},
		{"every minute", 0, "want rate(N unit)"},
	}
	for _, tt := range tests {
		t.Run(tt.schedule, func(t *testing.T) {
			tm := load(t)
			if tt.schedule != "" {
				if err := tm.SetParameters(map[string]string{"ReaperSchedule": tt.schedule}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := tm.ReaperPeriod()
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "ReaperFunction") {
					t.Fatalf("error %v, want one naming ReaperFunction and saying %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ReaperPeriod() = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestSetParameters(t *testing.T) {
	t.Parallel()
	tests := []struct {
		params map[string]string
		err    string
	}{
		{map[string]string{"RetentionHours": "24", "ScopeName": "orders"}, ""},
		{map[string]string{"Nope": "1"}, "no parameter Nope"},
		{map[string]string{"RetentionHours": "0"}, "below MinValue"},
		{map[string]string{"InflightShards": "257"}, "above MaxValue"},
		{map[string]string{"RetentionHours": "many"}, "not a number"},
		{map[string]string{"ScopeName": "has space"}, "does not match AllowedPattern"},
	}
	for _, tt := range tests {
		err := load(t).SetParameters(tt.params)
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("SetParameters(%v) = %v, want %q", tt.params, err, tt.err)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src, want string
	}{
		{"Resources:\n  Q:\n    Type: AWS::SQS::Queue\n    Properties:\n      X: !Bogus y\n", "line 5: unknown tag !Bogus"},
		{"Resources:\n  Q:\n    Type: AWS::SQS::Queue\n  Q:\n    Type: AWS::SQS::Queue\n", "line 4: duplicate key Q"},
		{"Parameters: {}\n", "no Resources"},
		{"Resources:\n  Q:\n    Properties: {}\n", "resource Q has no Type"},
		{"Resources:\n  Q:\n    Type: AWS::SQS::Queue\n    DependsOn: Missing\n", "DependsOn names unknown resource Missing"},
		{"Resources:\n  Q:\n    Type: AWS::SQS::Queue\n    Properties:\n      X: !GetAtt NoDot\n", "want LogicalId.Attribute"},
	}
	for _, tt := range tests {
		_, err := stack.Parse([]byte(tt.src))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want %q", tt.src, err, tt.want)
		}
	}
	if _, err := stack.Load("no/such/template.yaml"); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file: %v", err)
	}
}

func TestWriteExports(t *testing.T) {
	t.Parallel()
	env := &stack.Env{Vars: []stack.Var{{"A", "plain"}, {"B", "it's $HOME `x`"}}}
	var buf bytes.Buffer
	if err := env.WriteExports(&buf); err != nil {
		t.Fatal(err)
	}
	want := "export A='plain'\nexport B='it'\\''s $HOME `x`'\n"
	if buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
}

// TestUpIdempotencyLayouts: the template's idempotency-table parameters (a single-table
// design's partition and sort key, Powertools' attribute names) create the table the
// functions' environment describes: the key schema, index and TTL attribute that
// persistence.TableInputFor gives for the layout the functions read, and a record written
// through that layout is found there.
func TestUpIdempotencyLayouts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		params    map[string]string
		keys, ttl string
	}{
		{"single-table", map[string]string{"IdempotencyPartitionKey": "PK", "IdempotencySortKey": "SK"}, "PK HASH,SK RANGE", "expires_at"},
		{"powertools", map[string]string{"IdempotencyAttributeNames": "powertools", "IdempotencyPartitionKey": "id"}, "id HASH", "expiration"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			tm := load(t)
			if err := tm.SetParameters(c.params); err != nil {
				t.Fatal(err)
			}
			env, _ := up(t, tm, stackName(t))
			layout := envconf.New(env.Lookup).Layout()
			want, err := persistence.TableInputFor(layout)
			if err != nil {
				t.Fatalf("the functions' layout %+v: %v", layout, err)
			}
			ddb := awstest.DynamoDB(t)
			desc, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(layout.Table)})
			if err != nil {
				t.Fatal(err)
			}
			keys := func(ks []ddbtypes.KeySchemaElement) string {
				var out []string
				for _, k := range ks {
					out = append(out, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
				}
				return strings.Join(out, ",")
			}
			if got := keys(desc.Table.KeySchema); got != c.keys || got != keys(want.KeySchema) {
				t.Errorf("key schema %s, want %s (idem: %s)", got, c.keys, keys(want.KeySchema))
			}
			gsi := desc.Table.GlobalSecondaryIndexes
			if len(gsi) != 1 || aws.ToString(gsi[0].IndexName) != aws.ToString(want.GlobalSecondaryIndexes[0].IndexName) ||
				keys(gsi[0].KeySchema) != keys(want.GlobalSecondaryIndexes[0].KeySchema) ||
				!slices.Equal(gsi[0].Projection.NonKeyAttributes, want.GlobalSecondaryIndexes[0].Projection.NonKeyAttributes) {
				t.Errorf("GSI %+v, want %+v", gsi, want.GlobalSecondaryIndexes)
			}
			ttl, err := ddb.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(layout.Table)})
			if err != nil {
				t.Fatal(err)
			}
			if d := ttl.TimeToLiveDescription; d.TimeToLiveStatus != ddbtypes.TimeToLiveStatusEnabled || aws.ToString(d.AttributeName) != c.ttl {
				t.Errorf("TTL %+v, want %s", d, c.ttl)
			}

			// A record through the layout: acquired, completed, then replayed.
			store, err := persistence.NewDynamoStoreLayout(ddb, layout)
			if err != nil {
				t.Fatal(err)
			}
			client, err := idem.New(idem.Config{Store: store, Scope: "layouts"})
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			for range 2 {
				res, err := client.Do(ctx, &idem.Request{Key: "layout-" + c.name, Payload: []byte("{}")},
					func(context.Context, *idem.Request) (idem.Result, error) {
						runs++
						return idem.Result{Response: []byte("done")}, nil
					})
				if err != nil || string(res.Response) != "done" {
					t.Fatalf("Do: %q, %v", res.Response, err)
				}
			}
			if runs != 1 {
				t.Errorf("handler ran %d times, want 1", runs)
			}
			scan, err := ddb.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(layout.Table)})
			if err != nil {
				t.Fatal(err)
			}
			if len(scan.Items) != 1 {
				t.Fatalf("%d items, want 1", len(scan.Items))
			}
			for _, k := range desc.Table.KeySchema {
				if _, ok := scan.Items[0][aws.ToString(k.AttributeName)]; !ok {
					t.Errorf("record %v has no key attribute %s", scan.Items[0], aws.ToString(k.AttributeName))
				}
			}
			if _, ok := scan.Items[0][c.ttl]; !ok {
				t.Errorf("record %v has no TTL attribute %s", scan.Items[0], c.ttl)
			}
		})
	}
}

// TestQueueVariables: the variables that name the template's queues, where the
// functions send (idemctl redrive honours a dead letter's destination only among them).
func TestQueueVariables(t *testing.T) {
	t.Parallel()
	got := load(t).QueueVariables()
	want := []string{"DLQ_URL", "INPUT_QUEUE_URL"}
	if _, outbound := exampletest.Confirms(wiring.Default()); outbound != "" {
		want = append(want, outbound)
	}
	for _, name := range want {
		if !slices.Contains(got, name) {
			t.Errorf("QueueVariables() = %v, lacks %s", got, name)
		}
	}
	for _, name := range got {
		if !strings.HasSuffix(name, "_URL") {
			t.Errorf("QueueVariables() = %v: %s names no queue", got, name)
		}
	}
}
