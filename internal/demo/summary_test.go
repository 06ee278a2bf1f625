package demo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest/minimal"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

func TestMain(m *testing.M) { os.Exit(awstest.Main(m)) }

// watched counts, on the SQS client the demo uses, what the summary claims from outside:
// the messages SQS accepted on the input queue and the message ids received from it.
type watched struct {
	demo.SQSAPI
	url      string
	mu       sync.Mutex
	accepted int
	received map[string]bool
}

func (w *watched) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, o ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out, err := w.SQSAPI.SendMessageBatch(ctx, in, o...)
	if err == nil && aws.ToString(in.QueueUrl) == w.url {
		w.mu.Lock()
		w.accepted += len(out.Successful)
		w.mu.Unlock()
	}
	return out, err
}

func (w *watched) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := w.SQSAPI.ReceiveMessage(ctx, in, o...)
	if err == nil && aws.ToString(in.QueueUrl) == w.url {
		w.mu.Lock()
		for _, m := range out.Messages {
			w.received[aws.ToString(m.MessageId)] = true
		}
		w.mu.Unlock()
	}
	return out, err
}

// outcomes counts the consumers' record lines in logs by outcome, and the distinct
// messages the lines of each outcome name.
func outcomes(t *testing.T, logs *exampletest.Buffer) (lines, messages map[string]int) {
	t.Helper()
	lines, messages = map[string]int{}, map[string]int{}
	seen := map[[2]string]bool{}
	for line := range strings.Lines(logs.String()) {
		var rec struct {
			Msg, Outcome string
			MessageID    string `json:"message_id"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("consumer log line %q: %v", line, err)
		}
		if rec.Msg != "sqs record" {
			continue
		}
		lines[rec.Outcome]++
		if k := [2]string{rec.Outcome, rec.MessageID}; !seen[k] {
			seen[k] = true
			messages[rec.Outcome]++
		}
	}
	return lines, messages
}

// TestSummaryLinesTraceToEvents plays a small demo (no crash) and checks each summary
// line against the events it counts, observed independently: SendMessageBatch answers
// and received message ids on the input queue, the consumers' record log lines, the
// example's tables, the DLQ reasons.
func TestSummaryLinesTraceToEvents(t *testing.T) {
	ex := exampletest.Example(t)
	exampletest.Traffic(t, ex)
	exampletest.Checker(t, ex) // the tables' line and the check's verdict
	st := exampletest.Up(t, ex)
	sqsAPI, ddb := st.SQS, st.DynamoDB
	vars := st.Vars()
	w := &watched{SQSAPI: sqsAPI, url: vars["QUEUE_URL"], received: map[string]bool{}}
	var outbound []string // the example's queues: the stack's but the input and dead-letter queues
	for _, r := range st.Env.Resources {
		if r.Type == stack.TypeQueue && r.URL != vars["QUEUE_URL"] && r.URL != vars["DLQ_URL"] {
			outbound = append(outbound, r.URL)
		}
	}
	logs := &exampletest.Buffer{}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := demo.Run(ctx, demo.Options{
		Env: vars, Outbound: outbound, SQS: w, DynamoDB: ddb, Messages: 40, Groups: 4, Consumers: 2, Seed: 5, Out: &out, Logs: logs,
	})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	var printed bytes.Buffer
	s.Print(&printed)
	t.Log(printed.String())
	lines, messages := outcomes(t, logs)
	dlq := 0
	for _, n := range s.DeadLettered {
		dlq += n
	}
	// A message dead-lettered again (its batch failed whole after it, at a timeout under
	// load, and SQS delivered it again) is one dead letter on a FIFO queue, which drops
	// the second as a duplicate of its deduplication id (dlq- and the message id), and
	// two on a standard one.
	deadLettered := lines["dead_lettered"]
	if strings.HasSuffix(vars["DLQ_URL"], ".fifo") {
		deadLettered = messages["dead_lettered"]
	}

	checks := []struct {
		label string // the summary line
		shown string // what it must show
		event int    // the count of the events it stands for, observed here
		value int    // the summary's figure
	}{
		{"messages sent (accepted by SQS)", fmt.Sprint(w.accepted), w.accepted, s.Sent},
		// The run's only repeats of a dedup id are its in-window duplicates: all dropped.
		{"  sent with a dedup id already sent (SQS drops them)", fmt.Sprint(s.DedupRepeats), w.accepted - len(w.received), s.DedupRepeats},
		{"delivered to consumers (distinct message ids)", fmt.Sprint(len(w.received)), len(w.received), s.Delivered},
		{"  not delivered (computed: sent - delivered)", fmt.Sprint(w.accepted - len(w.received)), w.accepted - len(w.received), s.SuppressedBySQS},
		{"answered from the stored result (duplicates)", fmt.Sprint(lines["duplicate"]), lines["duplicate"], s.SuppressedByDynamo},
		{"refused while another consumer held the key", fmt.Sprint(lines["in_progress"]), lines["in_progress"], s.InProgress},
		{"business effects applied (counted in its tables)", fmt.Sprintf("%d (distinct valid messages: 40)", s.Applied), 40, s.Applied},
		{"  reported applied by the local consumers", fmt.Sprint(lines["applied"]), lines["applied"], s.AppliedByMetrics},
		{"dead-lettered by the consumer (bad messages sent)", fmt.Sprintf("%d (%d)", deadLettered, s.BadSent), deadLettered, dlq},
		{"runs stopped by the guard write", fmt.Sprintf("%d (at most 0 expected)", lines["guarded_duplicate"]), lines["guarded_duplicate"], s.Guarded},
		{"commits refused: lease lost", fmt.Sprint(lines["lease_lost"]), lines["lease_lost"], s.LeaseLost},
		{"consumers killed (SIGKILL)", "0", 0, s.Killed},
	}
	for _, c := range checks {
		if c.value != c.event {
			t.Errorf("%q: summary %d, counted events %d", c.label, c.value, c.event)
		}
		if v, ok := shows(printed.String(), c.label, c.shown); !ok {
			t.Errorf("%q: printed %q, want %q", c.label, v, c.shown)
		}
	}
	// Every outbound queue is counted and printed.
	if len(s.OutboundQueues) != len(outbound) {
		t.Errorf("outbound queues counted %+v, want %v", s.OutboundQueues, outbound)
	}
	for _, q := range s.OutboundQueues {
		name := q.URL[strings.LastIndex(q.URL, "/")+1:]
		if v, ok := shows(printed.String(), "  on "+name, fmt.Sprintf("%d messages, %d idempotency-keys", q.Messages, q.Keys)); !ok || !q.OK() {
			t.Errorf("%s: printed %q, OK %v", name, v, q.OK())
		}
	}
	// The example's check prints its verdict; the run must be OK.
	if v, _ := summaryValue(printed.String(), ex.Name()+" check: tables = what the applied messages leave"); v != "OK" || !s.OK {
		t.Errorf("%s check or verdict not OK: %+v", ex.Name(), s)
	}
	// Each bad message is dead-lettered once for its reason, printed in the example's own
	// words: a truncated body is "body is not valid JSON", with no field named.
	if dlq != s.BadSent || len(s.BadMissing) > 0 || s.DeadLettered["body is not valid JSON"] != 1 {
		t.Errorf("dead-lettered %v (%d), want the %d bad messages, one of them as not valid JSON; missing reasons %v", s.DeadLettered, dlq, s.BadSent, s.BadMissing)
	}
	for r, n := range s.DeadLettered {
		if !strings.Contains(printed.String(), fmt.Sprintf("      %d × %s\n", n, r)) {
			t.Errorf("reason %q (%d) not printed", r, n)
		}
	}
	// No consumer process ran: no line may speak of them.
	if _, ok := summaryValue(printed.String(), "  reported applied by the consumer processes"); ok || strings.Contains(printed.String(), "consumer process") {
		t.Errorf("the summary speaks of consumer processes in a run without them:\n%s", printed.String())
	}
	// An effect no local consumer reported is printed, as computed, only when there is one.
	_, shown := summaryValue(printed.String(), "  unreported effects (computed: effects - reports)")
	if shown != (s.Applied != lines["applied"]) {
		t.Errorf("the unreported-effects line is shown=%v with %d effects and %d applied lines", shown, s.Applied, lines["applied"])
	}
}

// summaryValue returns the value printed after label on its summary line, and whether
// there is one.
func summaryValue(out, label string) (string, bool) {
	for line := range strings.Lines(out) {
		if rest, ok := strings.CutPrefix(line, "  "+label+" "); ok {
			return strings.TrimSpace(rest), true
		}
	}
	return "", false
}

// shows reports whether the summary line that begins with label ends with value.
func shows(out, label, value string) (string, bool) {
	v, ok := summaryValue(out, label)
	if !ok {
		return "", false
	}
	return v, v == value || strings.HasSuffix(v, " "+value)
}

// TestSummaryPrintsCountedLinesOnly: the lines about consumer processes and about
// credits nobody reported appear only when there is something counted to show, and
// the explanation fits the run.
func TestSummaryPrintsCountedLinesOnly(t *testing.T) {
	const procs, unreported = "  reported applied by the consumer processes", "  unreported effects (computed: effects - reports)"
	cases := []struct {
		name                 string
		s                    demo.Summary
		wantProcs, wantUnrep string // "" = the line must be absent
	}{
		{"all reported", demo.Summary{Applied: 10, AppliedByMetrics: 10}, "", ""},
		{"reaped, no processes", demo.Summary{Applied: 10, AppliedByMetrics: 10, Killed: 1, Reaped: 3}, "", ""},
		{"an answer lost, no processes", demo.Summary{Applied: 10, AppliedByMetrics: 9}, "",
			"1 (a commit whose answer its consumer did not get; the redelivery found it completed)"},
		{"processes", demo.Summary{Applied: 10, AppliedByMetrics: 7, AppliedByChildren: 3, ChildConsumers: true}, "3", ""},
		{"processes, one killed after its commit", demo.Summary{Applied: 10, AppliedByMetrics: 7, AppliedByChildren: 2, ChildConsumers: true}, "2",
			"1 (a consumer process killed after its commit, or a commit whose answer was lost)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			c.s.Print(&b)
			for _, l := range []struct{ label, want string }{{procs, c.wantProcs}, {unreported, c.wantUnrep}} {
				got, ok := summaryValue(b.String(), l.label)
				if ok != (l.want != "") || got != l.want {
					t.Errorf("%q: printed %q (present %v), want %q:\n%s", l.label, got, ok, l.want, b.String())
				}
			}
			if !c.s.ChildConsumers && strings.Contains(b.String(), "consumer process") {
				t.Errorf("a summary without consumer processes speaks of them:\n%s", b.String())
			}
		})
	}
}

// TestSummaryPrintsSkippedChecks: a check the example cannot have (no example.Checker,
// no example.Confirmer) is printed as skipped with its reason, and its figures are not
// printed as if counted.
func TestSummaryPrintsSkippedChecks(t *testing.T) {
	const noChecker = `example "x" has no check of its tables (implement example.Checker)`
	const noReader = `example "x" has no reader of its outbound messages (implement example.Confirmer)`
	var b bytes.Buffer
	demo.Summary{Example: "x", Distinct: 10, AppliedByMetrics: 10, StateSkipped: noChecker, OutboundSkipped: noReader, OK: true}.Print(&b)
	for _, l := range []struct{ label, want string }{
		{"business effects applied (counted in its tables)", "not counted (distinct valid messages: 10)"},
		{"outbound messages received downstream", "not counted: " + noReader},
		{"x check: tables = what the applied messages leave", "skipped: " + noChecker},
	} {
		if got, _ := summaryValue(b.String(), l.label); got != l.want {
			t.Errorf("%q: printed %q, want %q:\n%s", l.label, got, l.want, b.String())
		}
	}
	if _, ok := summaryValue(b.String(), "  unreported effects (computed: effects - reports)"); ok || !strings.HasSuffix(b.String(), "demo: OK\n") {
		t.Errorf("summary:\n%s", b.String())
	}
}

// TestRefusesAnExampleWithoutTraffic: the demo refuses the smallest example the contract
// allows (internal/exampletest/minimal: no example.Traffic) with the reason every tool
// gives (TestToolsSayWhatIsMissing in minimal).
func TestRefusesAnExampleWithoutTraffic(t *testing.T) {
	ex := minimal.Example{}
	const want = `demo: example "minimal" has no traffic generator (implement example.Traffic)`
	_, err := demo.Run(context.Background(), demo.Options{Env: map[string]string{example.Var: "minimal"}, Examples: []example.Example{ex}})
	if err == nil || err.Error() != want {
		t.Errorf("demo: %v, want %q", err, want)
	}
}
