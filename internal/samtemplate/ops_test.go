package samtemplate_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
)

// failures are the ways the stack fails (issue 29) and the metric an alarm must watch
// for each: namespace, name and the one dimension with the resource it names (a logical
// id) or its literal value.
var failures = []struct {
	what, namespace, name, dimension, value string
}{
	{"the input queue's oldest message ages", "AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", "InputQueue"},
	{"messages wait in the dead-letter queue", "AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "DeadLetterQueue"},
	{"the consumer errors", "AWS/Lambda", "Errors", "FunctionName", "ConsumerFunction"},
	{"the consumer is throttled", "AWS/Lambda", "Throttles", "FunctionName", "ConsumerFunction"},
	{"the reaper fails", "AWS/Lambda", "Errors", "FunctionName", "ReaperFunction"},
	{"a sweep does not complete", "IdempotentConsumer", "SweepIncomplete", "Service", "reaper"},
	{"leases of dead holders are reaped", "IdempotentConsumer", "StaleLocksReaped", "Service", "reaper"},
	{"the ingress answers 5xx", "AWS/Lambda", "Url5xxCount", "FunctionName", "IngressFunction"},
	{"the ingress answers 503", "IdempotentConsumer", "Unavailable", "Service", "ingress"},
	{"the consumer dead-letters outbound messages", "IdempotentConsumer", "OutboundDeadLettered", "Service", "consumer"},
	{"the reaper dead-letters outbound messages", "IdempotentConsumer", "OutboundDeadLettered", "Service", "reaper"},
}

// TestEveryFailureHasAnAlarm: for each way the stack fails an alarm watches its metric,
// and every alarm notifies AlarmTopicArn, when it is set, of ALARM and of OK.
func TestEveryFailureHasAnAlarm(t *testing.T) {
	tpl := load(t)
	watched, err := tpl.Watched()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range failures {
		found := slices.ContainsFunc(watched, func(m samtemplate.Metric) bool {
			v, ok := m.Dimensions[f.dimension]
			return m.Alarm != "" && m.Namespace == f.namespace && m.Name == f.name && ok && (v.Ref == f.value || v.Ref == "" && v.Literal == f.value)
		})
		if !found {
			t.Errorf("%s: no alarm watches %s %s with %s %s", f.what, f.namespace, f.name, f.dimension, f.value)
		}
	}
	want := `{"Fn::If":["HasAlarmTopic",[{"Ref":"AlarmTopicArn"}],{"Ref":"AWS::NoValue"}]}`
	for _, id := range tpl.OfType("AWS::CloudWatch::Alarm") {
		var p struct {
			AlarmActions, OKActions json.RawMessage
		}
		if err := tpl.Props(id, &p); err != nil {
			t.Fatal(err)
		}
		if string(compact(t, p.AlarmActions)) != want || string(compact(t, p.OKActions)) != want {
			t.Errorf("%s: AlarmActions %s, OKActions %s; want both %s", id, p.AlarmActions, p.OKActions, want)
		}
	}
}

// TestConcurrencyLimits: the event source mapping's MaximumConcurrency is the parameter
// ConsumerMaxConcurrency, bounded as Lambda bounds it, 2 to 1000
// (https://docs.aws.amazon.com/lambda/latest/dg/API_ScalingConfig.html); the ingress's
// reserved concurrency is IngressReservedConcurrency, left unset at its default -1.
func TestConcurrencyLimits(t *testing.T) {
	tpl := load(t)
	p := tpl.Parameters["ConsumerMaxConcurrency"]
	if p.MinValue == nil || *p.MinValue != 2 || p.MaxValue == nil || *p.MaxValue != 1000 {
		t.Errorf("ConsumerMaxConcurrency: MinValue %v, MaxValue %v; want 2 and 1000", p.MinValue, p.MaxValue)
	}
	mappings := tpl.OfType("AWS::Lambda::EventSourceMapping")
	if len(mappings) != 1 {
		t.Fatalf("event source mappings %v, want the consumer's", mappings)
	}
	var esm struct {
		ScalingConfig struct {
			MaximumConcurrency json.RawMessage `json:"MaximumConcurrency"`
		} `json:"ScalingConfig"`
	}
	if err := tpl.Props(mappings[0], &esm); err != nil {
		t.Fatal(err)
	}
	if got := string(compact(t, esm.ScalingConfig.MaximumConcurrency)); got != `{"Ref":"ConsumerMaxConcurrency"}` {
		t.Errorf("%s: MaximumConcurrency %s, want Ref ConsumerMaxConcurrency", mappings[0], got)
	}

	r := tpl.Parameters["IngressReservedConcurrency"]
	if fmt.Sprint(r.Default) != "-1" || r.MinValue == nil || *r.MinValue != -1 {
		t.Errorf("IngressReservedConcurrency: Default %v, MinValue %v; want -1 (unset) for both", r.Default, r.MinValue)
	}
	var fn struct {
		ReservedConcurrentExecutions json.RawMessage
	}
	if err := tpl.Props("IngressFunction", &fn); err != nil {
		t.Fatal(err)
	}
	if got := string(compact(t, fn.ReservedConcurrentExecutions)); got != `{"Fn::If":["HasIngressReservedConcurrency",{"Ref":"IngressReservedConcurrency"},{"Ref":"AWS::NoValue"}]}` {
		t.Errorf("IngressFunction's ReservedConcurrentExecutions %s, want IngressReservedConcurrency under HasIngressReservedConcurrency", got)
	}
	if got := string(compact(t, tpl.Conditions["HasIngressReservedConcurrency"])); got != `{"Fn::Not":[{"Fn::Equals":[{"Ref":"IngressReservedConcurrency"},"-1"]}]}` {
		t.Errorf("HasIngressReservedConcurrency is %s, want IngressReservedConcurrency != -1", got)
	}
	for _, other := range []string{"ConsumerFunction", "ReaperFunction"} {
		var p struct{ ReservedConcurrentExecutions json.RawMessage }
		if err := tpl.Props(other, &p); err != nil {
			t.Fatal(err)
		}
		if p.ReservedConcurrentExecutions != nil {
			t.Errorf("%s has reserved concurrency %s: the consumer is capped by its mapping, the reaper runs once per schedule", other, p.ReservedConcurrentExecutions)
		}
	}
}

// rollback is, for each function, the alarms that stop and roll back its deployments:
// those that a bad version sets off at once. The queues' depth and age, throttles,
// reaped locks and outbound dead letters stay out: they can be in alarm for reasons a
// deployment neither causes nor ends (a parked message waits in the DLQ for a redrive, a
// backlog drains slowly), and CodeDeploy would stop every deployment while they are,
// the one that fixes them too.
var rollback = map[string][]string{
	"ConsumerFunction": {"ConsumerErrorsAlarm"},
	"ReaperFunction":   {"ReaperErrorsAlarm", "SweepIncompleteAlarm"},
	"IngressFunction":  {"IngressServerErrorRateAlarm", "IngressUnavailableRateAlarm"},
}

// TestSafeDeploys: each function is deployed through CodeDeploy on its alias "live", with
// the DeploymentType parameter's configuration and its rollback alarms; its event
// source mapping, schedule and function URL invoke the alias, so that traffic moves with
// it (https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/automating-updates-to-serverless-apps.html).
func TestSafeDeploys(t *testing.T) {
	tpl := load(t)
	if p := tpl.Parameters["DeploymentType"]; !slices.Contains(p.AllowedValues, "AllAtOnce") || !slices.Contains(p.AllowedValues, p.Default.(string)) {
		t.Errorf("DeploymentType: default %v, allowed %v", p.Default, p.AllowedValues)
	}
	aliases := map[string]string{} // function -> its alias
	for _, id := range tpl.OfType("AWS::Lambda::Alias") {
		var p struct {
			Name         string          `json:"Name"`
			FunctionName json.RawMessage `json:"FunctionName"`
		}
		if err := tpl.Props(id, &p); err != nil {
			t.Fatal(err)
		}
		fn, err := tpl.FunctionOf(p.FunctionName)
		if err != nil {
			t.Fatal(err)
		}
		if p.Name != "live" {
			t.Errorf("alias %s of %s is %q, want live", id, fn, p.Name)
		}
		aliases[fn] = id
	}
	if got := slices.Sorted(maps.Keys(aliases)); !slices.Equal(got, slices.Sorted(maps.Keys(rollback))) {
		t.Fatalf("functions with an alias: %v, want %v", got, slices.Sorted(maps.Keys(rollback)))
	}
	for fn, alarms := range rollback {
		group := fn + "DeploymentGroup"
		var g struct {
			DeploymentConfigName json.RawMessage
			AlarmConfiguration   struct {
				Enabled bool
				Alarms  []struct{ Name json.RawMessage }
			}
			AutoRollbackConfiguration struct {
				Enabled bool
				Events  []string
			}
		}
		if err := tpl.Props(group, &g); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, a := range g.AlarmConfiguration.Alarms {
			names = append(names, refName(t, a.Name))
		}
		slices.Sort(names)
		if !g.AlarmConfiguration.Enabled || !slices.Equal(names, alarms) {
			t.Errorf("%s: rollback alarms %v (enabled %t), want %v", group, names, g.AlarmConfiguration.Enabled, alarms)
		}
		if !g.AutoRollbackConfiguration.Enabled || !slices.Contains(g.AutoRollbackConfiguration.Events, "DEPLOYMENT_STOP_ON_ALARM") {
			t.Errorf("%s: auto rollback %+v, want it on DEPLOYMENT_STOP_ON_ALARM", group, g.AutoRollbackConfiguration)
		}
		// The transform ran with DeploymentType's default.
		if got := string(compact(t, g.DeploymentConfigName)); !strings.Contains(got, `"ConfigName":"`+tpl.Parameters["DeploymentType"].Default.(string)+`"`) {
			t.Errorf("%s: DeploymentConfigName %s, want DeploymentType's", group, got)
		}
	}
	// What invokes the functions invokes their alias.
	for _, id := range tpl.OfType("AWS::Lambda::EventSourceMapping") {
		var p struct{ FunctionName json.RawMessage }
		if err := tpl.Props(id, &p); err != nil {
			t.Fatal(err)
		}
		if got := refName(t, p.FunctionName); got != aliases["ConsumerFunction"] {
			t.Errorf("event source mapping %s invokes %s, want the consumer's alias %s", id, got, aliases["ConsumerFunction"])
		}
	}
	for _, id := range tpl.OfType("AWS::Lambda::Url") {
		var p struct{ TargetFunctionArn json.RawMessage }
		if err := tpl.Props(id, &p); err != nil {
			t.Fatal(err)
		}
		if got := refName(t, p.TargetFunctionArn); got != aliases["IngressFunction"] {
			t.Errorf("function URL %s targets %s, want the ingress's alias %s", id, got, aliases["IngressFunction"])
		}
	}
	for _, id := range tpl.OfType("AWS::Events::Rule") {
		var p struct {
			Targets []struct{ Arn json.RawMessage }
		}
		if err := tpl.Props(id, &p); err != nil {
			t.Fatal(err)
		}
		for _, target := range p.Targets {
			if got := refName(t, target.Arn); got != aliases["ReaperFunction"] {
				t.Errorf("rule %s targets %s, want the reaper's alias %s", id, got, aliases["ReaperFunction"])
			}
		}
	}
}

// sub is the text of a Fn::Sub, as the transformed template has it.
func sub(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var fn struct {
		Sub string `json:"Fn::Sub"`
	}
	if err := json.Unmarshal(raw, &fn); err != nil || fn.Sub == "" {
		t.Fatalf("%s is not a Fn::Sub of a string (%v)", raw, err)
	}
	return fn.Sub
}

// TestDLQTakesTheInputQueueOnly (issue 38, finding 1): the DLQ's redrive allow policy is
// byQueue, and its one source is the input queue's ARN, built from the same name the
// input queue gets; the input queue is the only queue that names the DLQ as its
// dead-letter queue. Without it any queue of the account could (allowAll, SQS's
// default: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html),
// and SQS would move its messages in. moto ignores the policy: this is checked on the
// template as CloudFormation receives it.
func TestDLQTakesTheInputQueueOnly(t *testing.T) {
	eachExample(t, func(t *testing.T, _ example.Example, tpl *samtemplate.Template) {
		var dlq struct {
			RedriveAllowPolicy struct {
				RedrivePermission string            `json:"redrivePermission"`
				SourceQueueArns   []json.RawMessage `json:"sourceQueueArns"`
			} `json:"RedriveAllowPolicy"`
		}
		if err := tpl.Props("DeadLetterQueue", &dlq); err != nil {
			t.Fatal(err)
		}
		if p := dlq.RedriveAllowPolicy; p.RedrivePermission != "byQueue" || len(p.SourceQueueArns) != 1 {
			t.Fatalf("DLQ redrive allow policy %+v, want byQueue with the input queue alone", p)
		}
		var in struct {
			QueueName json.RawMessage `json:"QueueName"`
		}
		if err := tpl.Props("InputQueue", &in); err != nil {
			t.Fatal(err)
		}
		arn, name := sub(t, dlq.RedriveAllowPolicy.SourceQueueArns[0]), sub(t, in.QueueName)
		if arn != "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:"+name || !strings.Contains(name, "${AWS::StackName}") || !strings.HasSuffix(name, ".fifo") {
			t.Errorf("the DLQ's source %s is not the ARN of the input queue named %s", arn, name)
		}
		for _, id := range tpl.OfType("AWS::SQS::Queue") {
			var q struct {
				RedrivePolicy struct {
					DeadLetterTargetArn json.RawMessage `json:"deadLetterTargetArn"`
				} `json:"RedrivePolicy"`
			}
			if err := tpl.Props(id, &q); err != nil {
				t.Fatal(err)
			}
			if target := q.RedrivePolicy.DeadLetterTargetArn; target != nil && refName(t, target) == "DeadLetterQueue" && id != "InputQueue" {
				t.Errorf("queue %s names the DLQ as its dead-letter queue, but the DLQ takes the input queue's only", id)
			}
		}
	})
}

// TestRecordsOutliveTheirDeadLetters (issue 37, hole 5): the consumer keeps a FAILED record
// that holds steps as long as the dead-letter queue keeps its message
// (idem.Config.DLQRetention), which it takes from DLQ_RETENTION, by default
// consumerapp.DefaultDLQRetention: the template sets no DLQ_RETENTION, so its
// DeadLetterQueue must keep messages no longer than that default, or a redrive would
// find no record and call a step's service again.
func TestRecordsOutliveTheirDeadLetters(t *testing.T) {
	eachExample(t, func(t *testing.T, _ example.Example, tpl *samtemplate.Template) {
		var dlq struct {
			MessageRetentionPeriod float64 `json:"MessageRetentionPeriod"`
		}
		if err := tpl.Props("DeadLetterQueue", &dlq); err != nil {
			t.Fatal(err)
		}
		kept := time.Duration(dlq.MessageRetentionPeriod) * time.Second
		if kept <= 0 || kept > consumerapp.DefaultDLQRetention {
			t.Errorf("the DLQ keeps messages %s, the consumer its records %s past it by default (DLQ_RETENTION)", kept, consumerapp.DefaultDLQRetention)
		}
	})
}
