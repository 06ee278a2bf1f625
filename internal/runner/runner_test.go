package runner_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/lambdaenv"
	"github.com/idemgo/sqs-lambda-consumer/internal/runner"
)

// fnBin is internal/lambdaenv/testdata/fn, a Lambda bootstrap that does what its
// records say, built once for this test binary (environments_test.go).
var fnBin string

func TestMain(m *testing.M) {
	dir, bins, err := lambdaenv.BuildTemp(context.Background(), "../lambdaenv", "./testdata/fn")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fnBin = bins[0]
	code := awstest.Main(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func fifoQueue(t *testing.T, api *sqs.Client) string {
	return awstest.FIFOQueue(context.Background(), t, api, "in", map[string]string{"VisibilityTimeout": "30"})
}

func send(t *testing.T, api *sqs.Client, url string, n int) {
	t.Helper()
	for i := range n {
		_, err := api.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl: aws.String(url), MessageBody: aws.String(fmt.Sprintf(`{"n":%d}`, i)),
			MessageGroupId:         aws.String(fmt.Sprintf("g%d", i%3)),
			MessageDeduplicationId: aws.String(fmt.Sprintf("d%d", i)),
			MessageAttributes: map[string]sqstypes.MessageAttributeValue{
				"idempotency-key": {DataType: aws.String("String"), StringValue: aws.String(fmt.Sprintf("k%d", i))},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestRunPlaysTheEventSourceMapping: records arrive as Lambda builds them, failures are
// redelivered (soon, with RetryAfter), successes deleted, and the run stops when idle.
func TestRunPlaysTheEventSourceMapping(t *testing.T) {
	t.Parallel()
	api := awstest.SQS(t)
	url := fifoQueue(t, api)
	send(t, api, url, 12)

	var mu sync.Mutex
	deliveries := map[string]int{} // body -> deliveries
	var order []string
	var bad []string
	h := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		lc, ok := lambdacontext.FromContext(ctx)
		dl, hasDeadline := ctx.Deadline()
		mu.Lock()
		defer mu.Unlock()
		var resp events.SQSEventResponse
		for _, r := range ev.Records {
			if !ok || lc.AwsRequestID == "" || !hasDeadline || time.Until(dl) > 5*time.Second ||
				r.EventSource != "aws:sqs" || !strings.HasSuffix(r.EventSourceARN, ".fifo") || r.AWSRegion == "" ||
				r.Attributes["MessageGroupId"] == "" || r.Attributes["ApproximateReceiveCount"] == "" ||
				r.MessageAttributes["idempotency-key"].StringValue == nil || r.Md5OfBody == "" || r.Md5OfMessageAttributes == "" {
				bad = append(bad, r.MessageId)
			}
			deliveries[r.Body]++
			order = append(order, r.Attributes["MessageGroupId"]+":"+r.Body)
			if r.Body == `{"n":4}` && deliveries[r.Body] == 1 {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
			}
		}
		return resp, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stats, err := runner.Run(ctx, runner.Config{
		SQS: api, QueueURL: url, Consumers: 2, BatchSize: 5, FunctionTimeout: 5 * time.Second,
		WaitTime: time.Second, RetryAfter: time.Second, UntilIdle: 2 * time.Second,
		NewHandler: func(int) (runner.Handler, error) { return h, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("run did not stop when idle")
	}
	if len(bad) > 0 {
		t.Fatalf("records not built as Lambda builds them: %v", bad)
	}
	if len(deliveries) != 12 || deliveries[`{"n":4}`] != 2 {
		t.Fatalf("deliveries %v", deliveries)
	}
	if stats.Succeeded != 12 || stats.Failed != 1 || stats.Received != 13 || stats.Distinct != 12 {
		t.Fatalf("stats %+v", stats)
	}
	if v, f, _ := runner.Depth(context.Background(), api, url); v+f != 0 {
		t.Fatalf("queue not empty: %d visible, %d in flight", v, f)
	}
}

// TestIdleStopAbandonsNoReceive: a run that stops because the queue went idle lets its
// pollers' long polls finish instead of cutting them short: a long poll the client gave
// up on goes on in the queue, and would hide a message sent right after the stop for the
// visibility timeout (the storm's next phase waited 10 s for its messages that way).
func TestIdleStopAbandonsNoReceive(t *testing.T) {
	t.Parallel()
	api := awstest.SQS(t)
	url := fifoQueue(t, api)
	h := func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
		return events.SQSEventResponse{}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := runner.Run(ctx, runner.Config{
		SQS: api, QueueURL: url, Consumers: 4, WaitTime: 2 * time.Second, UntilIdle: time.Second,
		NewHandler: func(int) (runner.Handler, error) { return h, nil },
	}); err != nil || ctx.Err() != nil {
		t.Fatalf("run: %v (ctx %v)", err, ctx.Err())
	}
	send(t, api, url, 1)
	out, err := api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 {
		v, f, _ := runner.Depth(context.Background(), api, url)
		t.Fatalf("the message sent after the run stopped was not received (%d visible, %d in flight): a receive of the run took it", v, f)
	}
}

// TestInvocationErrorRetriesWholeBatch: a handler error leaves every record.
func TestInvocationErrorRetriesWholeBatch(t *testing.T) {
	t.Parallel()
	api := awstest.SQS(t)
	url := fifoQueue(t, api)
	send(t, api, url, 3)
	var mu sync.Mutex
	calls := 0
	h := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return events.SQSEventResponse{}, fmt.Errorf("init failed")
		}
		return events.SQSEventResponse{}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stats, err := runner.Run(ctx, runner.Config{
		SQS: api, QueueURL: url, WaitTime: time.Second, RetryAfter: time.Second, UntilIdle: 2 * time.Second,
		NewHandler: func(int) (runner.Handler, error) { return h, nil },
	})
	if err != nil || stats.InvokeErrors != 1 || stats.Succeeded != 3 || stats.Received < 6 {
		t.Fatalf("stats %+v err %v", stats, err)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	h := func(int) (runner.Handler, error) { return nil, nil }
	for name, cfg := range map[string]runner.Config{
		"no queue":    {SQS: awstest.SQS(t), NewHandler: h},
		"batch of 11": {SQS: awstest.SQS(t), QueueURL: "u", NewHandler: h, BatchSize: 11},
		"reap no period": {SQS: awstest.SQS(t), QueueURL: "u", NewHandler: h,
			Reap: func(context.Context) (reaper.SweepResult, error) { return reaper.SweepResult{}, nil }},
	} {
		if _, err := runner.Run(context.Background(), cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestSQSCallsPerBatch counts the SQS requests of a run, as Lambda's event source
// mapping makes them: one receive per batch of up to 10 and one DeleteMessageBatch per
// batch, never a delete per message; the idle polls at the end come on top.
func TestSQSCallsPerBatch(t *testing.T) {
	t.Parallel()
	calls := awstest.NewCalls()
	api := awstest.SQS(t, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, calls.APIOption) })
	url := fifoQueue(t, api)
	const n = 100
	var entries []sqstypes.SendMessageBatchRequestEntry
	for i := range n {
		entries = append(entries, sqstypes.SendMessageBatchRequestEntry{
			Id: aws.String(fmt.Sprint(i % 10)), MessageBody: aws.String(fmt.Sprintf(`{"n":%d}`, i)),
			MessageGroupId: aws.String(fmt.Sprintf("g%d", i%10)), MessageDeduplicationId: aws.String(fmt.Sprintf("d%d", i)),
		})
		if len(entries) == 10 {
			if _, err := api.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
				t.Fatal(err)
			}
			entries = nil
		}
	}
	calls.Reset()
	h := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		return events.SQSEventResponse{}, nil
	}
	stats, err := runner.Run(context.Background(), runner.Config{
		SQS: api, QueueURL: url, Consumers: 1, BatchSize: 10, FunctionTimeout: 5 * time.Second,
		WaitTime: time.Second, UntilIdle: 2 * time.Second,
		NewHandler: func(int) (runner.Handler, error) { return h, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	ops := calls.Ops()
	batches := int(stats.Invocations)
	t.Logf("%d messages in %d batches: %v", stats.Received, batches, ops)
	if stats.Succeeded != n || batches > n/5 {
		t.Fatalf("stats %+v: want %d messages in full batches", stats, n)
	}
	if ops["DeleteMessageBatch"] != batches || ops["DeleteMessage"] != 0 {
		t.Errorf("deletes: %v, want one DeleteMessageBatch per batch (%d)", ops, batches)
	}
	if got := ops["ReceiveMessage"]; got < batches || got > batches+5 {
		t.Errorf("%d receives for %d batches, want one per batch plus the idle polls (at most 5)", got, batches)
	}
}
