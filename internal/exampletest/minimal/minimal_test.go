package minimal_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest/minimal"
)

func TestMain(m *testing.M) { os.Exit(awstest.Main(m)) }

var ex = minimal.Example{}

// The reasons every tool gives for what a four-method example lacks.
const (
	noTraffic = `example "minimal" has no traffic generator (implement example.Traffic)`
	noChecker = `example "minimal" has no check of its tables (implement example.Checker)`
	noReader  = `example "minimal" has no reader of its outbound messages (implement example.Confirmer)`
)

// TestConsumerRunsIt: the template with the minimal block is created as idemctl up
// creates it, and the consumer is built from its environment as main.go builds it
// (consumerapp.FromEnvOf, New). A note is put once however often it is delivered, and
// an invalid body is dead-lettered with Decode's reason.
func TestConsumerRunsIt(t *testing.T) {
	st := exampletest.Up(t, ex)
	cfg, err := consumerapp.FromEnvOf([]example.Example{ex}, st.Lookup)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Example.Name() != "minimal" {
		t.Fatalf("the consumer runs example %s", cfg.Example.Name())
	}
	h, err := consumerapp.New(cfg, consumerapp.Deps{DynamoDB: st.DynamoDB, SQS: st.SQS, Logs: &strings.Builder{}, Metrics: &strings.Builder{}, Owner: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	inputARN := ""
	for _, r := range st.Env.Resources {
		if r.URL == st.Must(t, "QUEUE_URL") {
			inputARN = r.ARN
		}
	}
	record := func(id, body, key string) events.SQSMessage {
		r := exampletest.FIFORecord(id, "notes", body, map[string]events.SQSMessageAttribute{
			idem.KeyAttribute: {DataType: "String", StringValue: aws.String(key)},
		})
		r.Attributes["MessageDeduplicationId"] = outbox.DeduplicationID(key)
		r.EventSourceARN = inputARN
		return r
	}
	note := `{"note_id":"n-1"}`
	for i := range 2 { // the second delivery is a duplicate: answered, not applied again
		recs := []events.SQSMessage{record(fmt.Sprintf("m-%d", i), note, "note:n-1")}
		if i == 0 {
			recs = append(recs, record("bad", `{"note":"n-2"}`, "note:bad"))
		}
		if failed := exampletest.Invoke(t, lambda.NewHandler(h), context.Background(), exampletest.Encode(t, recs)); len(failed) != 0 {
			t.Fatalf("delivery %d: batch item failures %v", i+1, failed)
		}
	}
	out, err := st.DynamoDB.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(st.Must(t, minimal.TableVar))})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 1 {
		t.Errorf("the notes table holds %d items, want the one note", len(out.Items))
	}
	dlq := exampletest.ReceiveAll(t, st.SQS, st.Must(t, "DLQ_URL"))
	if len(dlq) != 1 || !strings.Contains(aws.ToString(dlq[0].MessageAttributes[sqsmsg.DLQReasonAttribute].StringValue), `"note": unknown field`) {
		t.Errorf("dead letters %+v, want the invalid body's, for its unknown field", dlq)
	}
}

// TestToolsSayWhatIsMissing: what needs an optional interface the example lacks says
// which, in the same words everywhere: the test suites skip (exampletest.Traffic,
// exampletest.Checker), and what is merely optional is left out without a word (nothing
// to prepare, no outbound message to count). The development tools refuse with an error
// in the same words: the demo and the sample events (TestRefusesAnExampleWithoutTraffic
// in internal/demo and internal/sampleevents, which a team may delete: docs/tooling.md).
func TestToolsSayWhatIsMissing(t *testing.T) {
	_, errT := example.TrafficOf(ex)
	_, errC := example.CheckerOf(ex)
	_, errO := example.ConfirmerOf(ex)
	for _, c := range []struct {
		err  error
		want string
	}{{errT, noTraffic}, {errC, noChecker}, {errO, noReader}} {
		var missing *example.MissingError
		if c.err == nil || c.err.Error() != c.want || !errors.As(c.err, &missing) {
			t.Errorf("error %v, want a *example.MissingError %q", c.err, c.want)
		}
	}

	for _, c := range []struct {
		need func(testing.TB)
		want string
	}{
		{func(tb testing.TB) { exampletest.Traffic(tb, ex) }, noTraffic},
		{func(tb testing.TB) { exampletest.Checker(tb, ex) }, noChecker},
	} {
		rec := &skipRecorder{TB: t}
		c.need(rec)
		if rec.skipped != c.want {
			t.Errorf("the suites skip with %q, want %q", rec.skipped, c.want)
		}
	}
	if confirms, name := exampletest.Confirms(ex); confirms != nil || name != "" {
		t.Errorf("outbound messages to count in %q", name)
	}
	if err := example.Prepare(context.Background(), ex, nil, nil, []example.Message{{ID: "n-1"}}); err != nil {
		t.Errorf("nothing to prepare, yet: %v", err)
	}
}

// skipRecorder records the reason of a Skip instead of skipping.
type skipRecorder struct {
	testing.TB
	skipped string
}

func (r *skipRecorder) Skip(args ...any) { r.skipped = fmt.Sprint(args...) }
