package samtemplate

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// AlarmsCommand rewrites template.yaml's generated alarms from Alarms.
const AlarmsCommand = "go run ./internal/samtemplate/genalarms"

// Stat is one metric an alarm watches, with the statistic and period it is read with.
// DimValue is YAML: a literal or a !Ref / !GetAtt.
type Stat struct {
	Namespace, Name, DimName, DimValue string
	Statistic                          string
	Period                             int
}

// Query is one metric of an alarm's metric math, named ID in its expression.
type Query struct {
	ID string
	Stat
}

// Alarm is one failure mode of the stack and the CloudWatch alarm that watches it: one
// metric (Metric), or metric math (Expression over Queries).
type Alarm struct {
	ID          string
	Comment     string // the comment above the alarm, without "# "; "" for none
	Description string
	Metric      *Stat
	Result      string // the id of the metric math's result
	Expression  string
	Label       string
	Queries     []Query
	Threshold   int // the alarm goes off above it, in one evaluation period
}

// Alarms are the stack's alarms, in template.yaml's order. What each means and what to do
// about it: docs/operations.md.
var Alarms = []Alarm{
	{
		ID:          "DeadLetterQueueDepthAlarm",
		Description: "Messages are waiting in the dead-letter queue (permanent failures or exhausted retries).",
		Metric:      &Stat{"AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "!GetAtt DeadLetterQueue.QueueName", "Maximum", 60},
	},
	{
		ID: "InputQueueAgeAlarm",
		Comment: `A message that keeps failing is received 5 times, 180 s apart (the redrive policy and
the visibility timeout), then moved to the DLQ: 900 s. A message older than that is
not one bad message but consumers that do not keep up, or do not run.`,
		Description: "The input queue's oldest message is more than 15 minutes old (the consumer is behind, stopped or throttled).",
		Metric:      &Stat{"AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", "!GetAtt InputQueue.QueueName", "Maximum", 300},
		Threshold:   900,
	},
	{
		ID: "ConsumerErrorsAlarm",
		Comment: `The consumer answers failed records with a partial batch response, not an error: an
error is an invocation that failed whole (an init failure, a timeout, a crash).
A rollback trigger of the consumer's deployments.`,
		Description: "Consumer invocations failed whole (init error, timeout or crash); their batches come back after the visibility timeout.",
		Metric:      &Stat{"AWS/Lambda", "Errors", "FunctionName", "!Ref ConsumerFunction", "Sum", 60},
	},
	{
		ID:          "ConsumerThrottlesAlarm",
		Description: "Consumer invocations were throttled (the account's or the function's concurrency is used up).",
		Metric:      &Stat{"AWS/Lambda", "Throttles", "FunctionName", "!Ref ConsumerFunction", "Sum", 300},
	},
	{
		ID:          "ReaperErrorsAlarm",
		Comment:     "A rollback trigger of the reaper's deployments.",
		Description: "Reaper invocations failed (its init, or a sweep that stopped on an error); dead leases and pending outboxes wait.",
		Metric:      &Stat{"AWS/Lambda", "Errors", "FunctionName", "!Ref ReaperFunction", "Sum", 300},
	},
	{
		ID: "SweepIncompleteAlarm",
		Comment: `Emitted by reaperapp on every sweep: 1 when it stopped at its deadline margin or on
an error, 0 when it went through every shard. A rollback trigger of the reaper's
deployments.`,
		Description: "A reaper sweep did not go through every shard of the inflight index (it ran out of time or failed).",
		Metric:      &Stat{"IdempotentConsumer", "SweepIncomplete", "Service", "reaper", "Sum", 300},
	},
	{
		ID:          "StaleLocksReapedAlarm",
		Comment:     `Emitted by the reaper as an EMF metric with dimension set [["Service"]], Service=reaper.`,
		Description: "The reaper found idempotency leases that expired (a consumer crashed or timed out).",
		Metric:      &Stat{"IdempotentConsumer", "StaleLocksReaped", "Service", "reaper", "Sum", 300},
	},
	{
		ID: "OutboundDeadLetteredAlarm",
		Comment: `Outbound messages SQS refused for good, dead-lettered with the reason, counted by
whichever sent them: the consumer or the reaper. FILL(…, 0): a minute in which one of
them sent nothing still adds up.
(https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-cloudwatch-alarm-metricdataquery.html)`,
		Description: "Outbound messages were refused by their queue for good and dead-lettered (too large, invalid characters); their receivers never got them.",
		Result:      "total",
		Expression:  "FILL(consumer, 0) + FILL(reaper, 0)",
		Label:       "OutboundDeadLettered",
		Queries: []Query{
			{"consumer", Stat{"IdempotentConsumer", "OutboundDeadLettered", "Service", "consumer", "Sum", 300}},
			{"reaper", Stat{"IdempotentConsumer", "OutboundDeadLettered", "Service", "reaper", "Sum", 300}},
		},
	},
	{
		ID: "IngressServerErrorRateAlarm",
		Comment: `Every 5xx the function URL answered, in percent of its requests: the ingress's own
503s and what it cannot count itself, a crash, a timeout or a failed init
(https://docs.aws.amazon.com/lambda/latest/dg/urls-monitoring.html). 5 % over 5
minutes: a single 503 (a throttled table, answered with Retry-After) is not an outage.
A rollback trigger of the ingress's deployments.`,
		Description: "More than 5 % of the ingress's requests got a 5xx over 5 minutes (503 from a store or queue failure, or the function failing).",
		Result:      "rate",
		Expression:  "100 * errors / requests",
		Label:       "Url5xxCount in % of UrlRequestCount",
		Queries: []Query{
			{"errors", Stat{"AWS/Lambda", "Url5xxCount", "FunctionName", "!Ref IngressFunction", "Sum", 300}},
			{"requests", Stat{"AWS/Lambda", "UrlRequestCount", "FunctionName", "!Ref IngressFunction", "Sum", 300}},
		},
		Threshold: 5,
	},
	{
		ID: "IngressUnavailableRateAlarm",
		Comment: `The ingress's own 503s (Unavailable: its table, the consumer's table or the input
queue failed), in percent of the requests it answered: IngressDuration is observed
once per request, so its SampleCount counts them. Its log lines name the failure.
A rollback trigger of the ingress's deployments.`,
		Description: "More than 5 % of the ingress's requests were answered 503 over 5 minutes (its table, the consumer's table or the input queue failed).",
		Result:      "rate",
		Expression:  "100 * unavailable / answered",
		Label:       "Unavailable in % of requests",
		Queries: []Query{
			{"unavailable", Stat{"IdempotentConsumer", "Unavailable", "Service", "ingress", "Sum", 300}},
			{"answered", Stat{"IdempotentConsumer", "IngressDuration", "Service", "ingress", "SampleCount", 300}},
		},
		Threshold: 5,
	},
}

// RenderAlarms writes alarms as template.yaml's Resources hold them.
func RenderAlarms(alarms []Alarm) string {
	var b strings.Builder
	for i, a := range alarms {
		if i > 0 {
			b.WriteString("\n")
		}
		if a.Comment != "" {
			for line := range strings.SplitSeq(a.Comment, "\n") {
				b.WriteString("  # " + line + "\n")
			}
		}
		fmt.Fprintf(&b, "  %s:\n    Type: AWS::CloudWatch::Alarm\n    Properties:\n", a.ID)
		fmt.Fprintf(&b, "      AlarmDescription: %s\n", a.Description)
		if m := a.Metric; m != nil {
			writeMetric(&b, "      ", m)
			fmt.Fprintf(&b, "      Statistic: %s\n      Period: %d\n", m.Statistic, m.Period)
		} else {
			fmt.Fprintf(&b, "      Metrics:\n        - Id: %s\n          Expression: %s\n", a.Result, a.Expression)
			fmt.Fprintf(&b, "          Label: %s\n          ReturnData: true\n", a.Label)
			for _, q := range a.Queries {
				fmt.Fprintf(&b, "        - Id: %s\n          ReturnData: false\n          MetricStat:\n            Metric:\n", q.ID)
				writeMetric(&b, "              ", &q.Stat)
				fmt.Fprintf(&b, "            Period: %d\n            Stat: %s\n", q.Period, q.Statistic)
			}
		}
		fmt.Fprintf(&b, "      EvaluationPeriods: 1\n      Threshold: %d\n", a.Threshold)
		b.WriteString("      ComparisonOperator: GreaterThanThreshold\n      TreatMissingData: notBreaching\n")
		b.WriteString("      AlarmActions: !If [HasAlarmTopic, [!Ref AlarmTopicArn], !Ref AWS::NoValue]\n")
		b.WriteString("      OKActions: !If [HasAlarmTopic, [!Ref AlarmTopicArn], !Ref AWS::NoValue]\n")
	}
	return b.String()
}

// writeMetric writes m's Namespace, MetricName and Dimensions at indent.
func writeMetric(b *strings.Builder, indent string, m *Stat) {
	fmt.Fprintf(b, "%sNamespace: %s\n%sMetricName: %s\n%sDimensions:\n", indent, m.Namespace, indent, m.Name, indent)
	fmt.Fprintf(b, "%s  - Name: %s\n%s    Value: %s\n", indent, m.DimName, indent, m.DimValue)
}

// ErrNoGeneratedRegion is returned for a template without a generated block's markers
// (the alarms', the dashboard's).
var ErrNoGeneratedRegion = errors.New("samtemplate: no generated region")

// WithAlarms returns template with the region between its generated alarms markers
// replaced by RenderAlarms(alarms).
func WithAlarms(template []byte, alarms []Alarm) ([]byte, error) {
	return withRegion(template, "alarms", "alarms.go", RenderAlarms(alarms))
}

// withRegion returns template with the text between the lines around its generated
// block name (written from internal/samtemplate/source) replaced by body: the one
// rewrite for every generated block of template.yaml.
func withRegion(template []byte, name, source, body string) ([]byte, error) {
	begin := "  # generated:begin " + name + " (" + AlarmsCommand + "; edit internal/samtemplate/" + source + ")\n"
	end := "  # generated:end " + name + "\n"
	before, rest, ok := bytes.Cut(template, []byte(begin))
	if !ok {
		return nil, fmt.Errorf("%w: no line %q", ErrNoGeneratedRegion, begin)
	}
	_, after, ok := bytes.Cut(rest, []byte(end))
	if !ok {
		return nil, fmt.Errorf("%w: no line %q", ErrNoGeneratedRegion, end)
	}
	var out bytes.Buffer
	out.Write(before)
	out.WriteString(begin)
	out.WriteString(body)
	out.WriteString(end)
	out.Write(after)
	return out.Bytes(), nil
}
