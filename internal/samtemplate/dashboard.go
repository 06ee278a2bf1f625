package samtemplate

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Line is one metric a dashboard widget draws, with the options CloudWatch takes for it
// (https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/CloudWatch-Dashboard-Body-Structure.html#CloudWatch-Dashboard-Properties-Metric-Widget-Object).
// Every metric is written in full (no "." shorthand), so that
// TestEveryWatchedMetricIsEmitted checks each like an alarm's.
type Line struct {
	Namespace, Name, DimName, DimValue string
	Label                              string
	Stat                               string // "" : the widget's
	RightAxis                          bool
	Unstacked                          bool // drawn as a line in a stacked widget
}

// Widget is one metric widget of the dashboard, on CloudWatch's grid of 24 columns.
type Widget struct {
	X, Y, Width, Height int
	Title               string
	Stacked             bool
	Stat                string // "" : each line gives its own
	Lines               []Line
}

// The dimensions the dashboard's lines use most.
const (
	nsIdem   = "IdempotentConsumer"
	nsSQS    = "AWS/SQS"
	nsLambda = "AWS/Lambda"
)

func idemLine(name, service, label string) Line {
	return Line{Namespace: nsIdem, Name: name, DimName: "Service", DimValue: service, Label: label}
}

func percentiles(name, service string) []Line {
	var out []Line
	for _, p := range []string{"p50", "p90", "p99"} {
		l := idemLine(name, service, p)
		l.Stat = p
		out = append(out, l)
	}
	return out
}

func fnLine(name, fn, label string) Line {
	return Line{Namespace: nsLambda, Name: name, DimName: "FunctionName", DimValue: "${" + fn + "}", Label: label}
}

func queueLine(name, queue, label string, right bool) Line {
	return Line{Namespace: nsSQS, Name: name, DimName: "QueueName", DimValue: "${" + queue + ".QueueName}", Label: label, RightAxis: right}
}

// Dashboard is the stack's dashboard, in template.yaml's order: the consumer's outcomes
// and latency, the outbox and the reaper, the queues, the ingress's answers and latency,
// the functions' errors; the widget of the alarms (every one of Alarms) comes last.
var Dashboard = []Widget{
	{X: 0, Y: 0, Width: 12, Height: 6, Title: "Consumer: outcomes per minute", Stat: "Sum", Lines: []Line{
		idemLine("Acquired", "consumer", "applied"),
		idemLine("DuplicateSuppressed", "consumer", "replayed (stored result)"),
		idemLine("GuardedDuplicate", "consumer", "replayed after expiry (guard write)"),
		idemLine("DeadLettered", "consumer", "dead-lettered"),
		idemLine("RetryableFailure", "consumer", "retried"),
	}},
	{X: 12, Y: 0, Width: 12, Height: 6, Title: "Consumer: time per record (ms)", Lines: percentiles("HandlerDuration", "consumer")},
	{X: 0, Y: 6, Width: 12, Height: 6, Title: "Outbox and reaper per minute", Stat: "Sum", Lines: []Line{
		idemLine("OutboundUnsent", "consumer", "records with outbound messages pending"),
		idemLine("OutboundSentByReaper", "reaper", "pending outboxes sent by the reaper"),
		idemLine("OutboundDeadLettered", "consumer", "outbound dead-lettered (consumer)"),
		idemLine("OutboundDeadLettered", "reaper", "outbound dead-lettered (reaper)"),
		idemLine("StaleLocksReaped", "reaper", "reaped locks"),
		idemLine("SweepIncomplete", "reaper", "incomplete sweeps"),
	}},
	{X: 12, Y: 6, Width: 12, Height: 6, Title: "Queues: depth and oldest message (s)", Stat: "Maximum", Lines: []Line{
		queueLine("ApproximateNumberOfMessagesVisible", "InputQueue", "input: visible", false),
		queueLine("ApproximateNumberOfMessagesVisible", "DeadLetterQueue", "dead-letter: visible", false),
		queueLine("ApproximateAgeOfOldestMessage", "InputQueue", "input: oldest (s)", true),
		queueLine("ApproximateAgeOfOldestMessage", "DeadLetterQueue", "dead-letter: oldest (s)", true),
	}},
	{X: 0, Y: 12, Width: 12, Height: 6, Title: "Ingress: answers per minute", Stacked: true, Stat: "Sum", Lines: []Line{
		idemLine("Accepted", "ingress", "202 accepted"),
		idemLine("Replayed", "ingress", "200/202 replayed"),
		idemLine("StatusRead", "ingress", "200 status"),
		idemLine("Rejected", "ingress", "400/403/405 rejected"),
		idemLine("NotFound", "ingress", "404 not found"),
		idemLine("Conflict", "ingress", "409 conflict"),
		idemLine("Mismatch", "ingress", "422 mismatch"),
		idemLine("Unavailable", "ingress", "503 unavailable"),
		{Namespace: nsLambda, Name: "Url5xxCount", DimName: "FunctionName", DimValue: "${IngressFunction}", Label: "5xx at the function URL (all)", Unstacked: true},
	}},
	{X: 12, Y: 12, Width: 12, Height: 6, Title: "Ingress: time per request (ms)", Lines: percentiles("IngressDuration", "ingress")},
	{X: 0, Y: 18, Width: 12, Height: 6, Title: "Functions: errors and throttles per minute", Stat: "Sum", Lines: []Line{
		fnLine("Errors", "ConsumerFunction", "consumer errors"),
		fnLine("Throttles", "ConsumerFunction", "consumer throttles"),
		fnLine("Errors", "ReaperFunction", "reaper errors"),
		fnLine("Errors", "IngressFunction", "ingress errors"),
		fnLine("Throttles", "IngressFunction", "ingress throttles"),
	}},
}

// alarmsWidget places the alarms' widget: beside the last metric widget.
var alarmsWidget = struct{ X, Y, Width, Height int }{12, 18, 12, 6}

// jsonText is s as a JSON string.
func jsonText(s string) string {
	b, _ := json.Marshal(s) // a string always encodes
	return string(b)
}

// RenderDashboard returns the template's Dashboard resource for widgets and the alarms'
// widget of alarms, between (not including) the generated markers.
func RenderDashboard(widgets []Widget, alarms []Alarm) string {
	var b strings.Builder
	b.WriteString("  Dashboard:\n    Type: AWS::CloudWatch::Dashboard\n    Properties:\n")
	b.WriteString("      DashboardName: !Sub \"${AWS::StackName}-consumer\"\n      DashboardBody: !Sub |\n")
	b.WriteString("        {\n          \"widgets\": [\n")
	for _, w := range widgets {
		fmt.Fprintf(&b, "            {\"type\": \"metric\", \"x\": %d, \"y\": %d, \"width\": %d, \"height\": %d, \"properties\": {\n", w.X, w.Y, w.Width, w.Height)
		fmt.Fprintf(&b, "              \"title\": %s, \"region\": \"${AWS::Region}\", \"view\": \"timeSeries\", \"stacked\": %t, \"period\": 60", jsonText(w.Title), w.Stacked)
		if w.Stat != "" {
			fmt.Fprintf(&b, ", \"stat\": %s", jsonText(w.Stat))
		}
		b.WriteString(",\n              \"metrics\": [\n")
		for i, l := range w.Lines {
			opts := []string{}
			if l.Stat != "" {
				opts = append(opts, "\"stat\": "+jsonText(l.Stat))
			}
			opts = append(opts, "\"label\": "+jsonText(l.Label))
			if l.RightAxis {
				opts = append(opts, "\"yAxis\": \"right\"")
			}
			if l.Unstacked {
				opts = append(opts, "\"stacked\": false")
			}
			fmt.Fprintf(&b, "                [%s, %s, %s, %s, {%s}]", jsonText(l.Namespace), jsonText(l.Name), jsonText(l.DimName), jsonText(l.DimValue), strings.Join(opts, ", "))
			if i < len(w.Lines)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString("              ]}},\n")
	}
	a := alarmsWidget
	fmt.Fprintf(&b, "            {\"type\": \"alarm\", \"x\": %d, \"y\": %d, \"width\": %d, \"height\": %d, \"properties\": {\n", a.X, a.Y, a.Width, a.Height)
	b.WriteString("              \"title\": \"Alarms\",\n              \"alarms\": [\n")
	for i, al := range alarms {
		if i%4 == 0 {
			b.WriteString("                ")
		}
		b.WriteString(jsonText("${" + al.ID + ".Arn}"))
		switch {
		case i == len(alarms)-1:
			b.WriteString("\n")
		case i%4 == 3:
			b.WriteString(",\n")
		default:
			b.WriteString(", ")
		}
	}
	b.WriteString("              ]}}\n          ]\n        }\n")
	return b.String()
}

// WithDashboard returns template with the region between its generated dashboard
// markers replaced by RenderDashboard(widgets, alarms).
func WithDashboard(template []byte, widgets []Widget, alarms []Alarm) ([]byte, error) {
	return withRegion(template, "dashboard", "dashboard.go", RenderDashboard(widgets, alarms))
}
