package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
)

// visQueue is a FIFO queue with a dead-letter queue on moto, and a poller that plays
// the event source mapping for it: receive, run the batch, delete the successes.
type visQueue struct {
	t        *testing.T
	api      *sqs.Client
	url, dlq string
	arn      string
	receives atomic.Int32
	batches  sync.WaitGroup // the invocations poll started
}

func newVisQueue(t *testing.T, visibility, maxReceives int) *visQueue {
	t.Helper()
	ctx := context.Background()
	q := &visQueue{t: t, api: awstest.SQS(t)}
	mk := func(name string, attrs map[string]string) string {
		return awstest.FIFOQueue(ctx, t, q.api, name, attrs)
	}
	arnOf := func(url string) string {
		out, err := q.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	}
	q.dlq = mk("vdlq", map[string]string{})
	redrive, _ := json.Marshal(map[string]string{"deadLetterTargetArn": arnOf(q.dlq), "maxReceiveCount": strconv.Itoa(maxReceives)})
	q.url = mk("vq", map[string]string{"VisibilityTimeout": strconv.Itoa(visibility), "RedrivePolicy": string(redrive)})
	q.arn = arnOf(q.url)
	return q
}

func (q *visQueue) send(key, group string) {
	q.t.Helper()
	if _, err := q.api.SendMessage(context.Background(), &sqs.SendMessageInput{
		QueueUrl: aws.String(q.url), MessageBody: aws.String(`{"n":1}`), MessageGroupId: aws.String(group),
		MessageDeduplicationId: aws.String(key),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			idem.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(key)},
		},
	}); err != nil {
		q.t.Fatal(err)
	}
}

// poll receives one batch (waiting up to a second) and runs it with the invocation
// timeout; it deletes the records that succeeded and returns how many it received. A
// record that hangs keeps its invocation running: poll returns without waiting for it.
func (q *visQueue) poll(p *sqsbatch.BatchProcessor, timeout time.Duration) int {
	q.t.Helper()
	out, err := q.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(q.url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		q.t.Fatal(err)
	}
	if len(out.Messages) == 0 {
		return 0
	}
	q.receives.Add(int32(len(out.Messages)))
	ev := events.SQSEvent{}
	for _, m := range out.Messages {
		rec := events.SQSMessage{
			MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
			Attributes: m.Attributes, EventSource: "aws:sqs", EventSourceARN: q.arn, AWSRegion: awstest.Region,
			MessageAttributes: map[string]events.SQSMessageAttribute{},
		}
		for k, v := range m.MessageAttributes {
			rec.MessageAttributes[k] = events.SQSMessageAttribute{DataType: aws.ToString(v.DataType), StringValue: v.StringValue}
		}
		ev.Records = append(ev.Records, rec)
	}
	q.batches.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		resp, err := p.Process(ctx, ev)
		if err != nil {
			q.t.Error(err)
			return
		}
		failed := map[string]bool{}
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		for _, r := range ev.Records {
			if !failed[r.MessageId] {
				_, _ = q.api.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(q.url), ReceiptHandle: aws.String(r.ReceiptHandle)})
			}
		}
	})
	return len(out.Messages)
}

// depth is how many messages q (visible or not) holds.
func (q *visQueue) depth(url string) int {
	q.t.Helper()
	out, err := q.api.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		q.t.Fatal(err)
	}
	a, _ := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	b, _ := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	return a + b
}

// crashScenario sends one message whose first delivery hangs holding its lease (a
// crashed or frozen invocation: no completion, no failure, no delete), then plays the
// event source mapping until the message is applied or parked. It returns the
// application count, the receives, and whether the message ended in the dead-letter queue.
func crashScenario(t *testing.T, visibility, maxReceives int, timeout, grace time.Duration, vis bool) (applied int32, receives int32, parked bool) {
	t.Helper()
	q := newVisQueue(t, visibility, maxReceives)
	ddb := awstest.DynamoDB(t)
	table := awstest.Name(t, "vis")
	if err := persistence.CreateTable(context.Background(), ddb, table); err != nil {
		t.Fatal(err)
	}
	store, err := persistence.NewDynamoStore(ddb, table)
	if err != nil {
		t.Fatal(err)
	}
	client, err := idem.New(idem.Config{Store: store, Scope: "vis", LeaseGrace: grace, Owner: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	hang := make(chan struct{})
	// The hung invocation ends with the test, before the test's last word.
	t.Cleanup(func() { close(hang); q.batches.Wait() })
	var calls, done atomic.Int32
	handler := idem.HandlerFunc(func(ctx context.Context, req *idem.Request) (idem.Result, error) {
		if calls.Add(1) == 1 {
			<-hang // the first invocation never finishes
			return idem.Result{}, errors.New("crashed")
		}
		done.Add(1)
		return idem.Result{Response: []byte("ok")}, nil
	})
	cfg := sqsbatch.SQSConfig{Client: client, Handler: handler}
	if vis {
		cfg.Visibility = &sqsbatch.Visibility{API: q.api}
	}
	record, err := sqsbatch.NewSQSHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: record, DeadlineMargin: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	q.send("crash-key", "g1")
	// Until applied and deleted, or parked: at most maxReceives redeliveries of the lease's
	// length, with room for a loaded machine.
	limit := time.Now().Add(time.Duration(maxReceives+2)*(time.Duration(visibility)*time.Second+timeout+grace) + 30*time.Second)
	for time.Now().Before(limit) {
		q.poll(p, timeout)
		if done.Load() > 0 && q.depth(q.url) == 0 {
			break
		}
		if q.depth(q.dlq) > 0 {
			parked = true
			break
		}
	}
	return done.Load(), q.receives.Load(), parked
}

// TestCrashWithLargestGraceIsApplied runs a crash with the template's largest allowed
// FunctionTimeout and LeaseGraceSeconds against its visibility timeout and
// maxReceiveCount, in seconds scaled down by the same factor, on moto: the message is
// applied by a later delivery, not parked in the dead-letter queue.
func TestCrashWithLargestGraceIsApplied(t *testing.T) {
	t.Parallel()
	tpl, err := samtemplate.Transform(context.Background(), "../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	q, err := tpl.Queue("InputQueue")
	if err != nil {
		t.Fatal(err)
	}
	// 180 s of visibility become 6 s (moto counts whole seconds).
	scale := 6 / q.VisibilityTimeout
	sec := func(v float64) time.Duration { return time.Duration(v * scale * float64(time.Second)) }
	timeout, grace := sec(*tpl.Parameters["FunctionTimeout"].MaxValue), sec(*tpl.Parameters["LeaseGraceSeconds"].MaxValue)
	t.Logf("scaled: visibility 6s, timeout %s, grace %s, maxReceiveCount %v", timeout, grace, q.RedrivePolicy.MaxReceiveCount)
	applied, receives, parked := crashScenario(t, 6, int(q.RedrivePolicy.MaxReceiveCount), timeout, grace, true)
	if parked || applied != 1 {
		t.Fatalf("applied %d times, parked %v, after %d receives", applied, parked, receives)
	}
	t.Logf("applied once after %d receives", receives)
}

// TestWaitingOnLeaseBurnsNoReceive: a lease far longer than the visibility timeout (a
// handler that extended it, or a grace outside the template's bounds). Without
// Visibility each redelivery finds the live lease and burns a receive, and SQS parks
// the message unapplied; with it, the first redelivery hides the message until the
// lease ends, and the next one applies it.
func TestWaitingOnLeaseBurnsNoReceive(t *testing.T) {
	t.Parallel()
	for _, vis := range []bool{true, false} {
		t.Run("visibility="+strconv.FormatBool(vis), func(t *testing.T) {
			t.Parallel()
			// Lease 1 s + 9 s = 10 s; visibility 2 s; 3 receives allowed.
			applied, receives, parked := crashScenario(t, 2, 3, time.Second, 9*time.Second, vis)
			switch {
			case vis && (parked || applied != 1):
				t.Fatalf("with Visibility: applied %d, parked %v, after %d receives", applied, parked, receives)
			case !vis && (!parked || applied != 0):
				t.Fatalf("without Visibility: applied %d, parked %v, after %d receives; the control shows nothing", applied, parked, receives)
			}
			t.Logf("applied %d, parked %v, %d receives", applied, parked, receives)
		})
	}
}

// visCalls records ChangeMessageVisibility calls.
type visCalls struct {
	mu    sync.Mutex
	calls []sqs.ChangeMessageVisibilityInput
}

func (v *visCalls) ChangeMessageVisibility(_ context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.calls = append(v.calls, *in)
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

// TestExtendMovesVisibility: a handler that extends its lease moves its message's
// visibility to the new lease end (plus the margin), on the queue of its eventSourceARN.
func TestExtendMovesVisibility(t *testing.T) {
	now := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	client, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "vis", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	api := &visCalls{}
	record, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{
		Client: client, Visibility: &sqsbatch.Visibility{API: api, Clock: clock},
		Handler: idem.HandlerFunc(func(ctx context.Context, req *idem.Request) (idem.Result, error) {
			return idem.Result{}, req.Attempt.Extend(ctx, 10*time.Minute)
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	msg := events.SQSMessage{MessageId: "m1", ReceiptHandle: "rh-1", Body: `{}`,
		EventSourceARN:    "arn:aws:sqs:eu-west-1:123456789012:in.fifo",
		MessageAttributes: map[string]events.SQSMessageAttribute{idem.KeyAttribute: {DataType: "String", StringValue: aws.String("k")}}}
	if err := record(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	if len(api.calls) != 1 {
		t.Fatalf("%d ChangeMessageVisibility calls, want 1", len(api.calls))
	}
	c := api.calls[0]
	if aws.ToString(c.QueueUrl) != "https://sqs.eu-west-1.amazonaws.com/123456789012/in.fifo" || aws.ToString(c.ReceiptHandle) != "rh-1" || c.VisibilityTimeout != 601 {
		t.Errorf("call %s %s %d, want the queue of the ARN, rh-1, 601 s", aws.ToString(c.QueueUrl), aws.ToString(c.ReceiptHandle), c.VisibilityTimeout)
	}
	// A message without a receipt handle (played by hand, not received) has no
	// visibility to move.
	msg.MessageId, msg.ReceiptHandle = "m2", ""
	msg.MessageAttributes[idem.KeyAttribute] = events.SQSMessageAttribute{DataType: "String", StringValue: aws.String("k2")}
	if err := record(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	if len(api.calls) != 1 {
		t.Errorf("%d ChangeMessageVisibility calls after a message without a receipt handle, want still 1", len(api.calls))
	}
	// A handler run by a RecordFunc without Visibility inside one with it (a message that
	// carries others): its extension keeps the outer message, still in flight, hidden.
	inner, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: client, Handler: idem.HandlerFunc(func(ctx context.Context, req *idem.Request) (idem.Result, error) {
		return idem.Result{}, req.Attempt.Extend(ctx, 10*time.Minute)
	})})
	if err != nil {
		t.Fatal(err)
	}
	keyed := func(id, key string) events.SQSMessage {
		return events.SQSMessage{MessageId: id, ReceiptHandle: "rh-" + id, Body: `{}`, EventSourceARN: msg.EventSourceARN,
			MessageAttributes: map[string]events.SQSMessageAttribute{idem.KeyAttribute: {DataType: "String", StringValue: aws.String(key)}}}
	}
	outer, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: client, Visibility: &sqsbatch.Visibility{API: api, Clock: clock},
		Handler: idem.HandlerFunc(func(ctx context.Context, _ *idem.Request) (idem.Result, error) {
			return idem.Result{}, inner(ctx, keyed("inner", "k-inner"))
		})})
	if err != nil {
		t.Fatal(err)
	}
	if err := outer(context.Background(), keyed("outer", "k-outer")); err != nil {
		t.Fatal(err)
	}
	if len(api.calls) != 2 || aws.ToString(api.calls[1].ReceiptHandle) != "rh-outer" {
		t.Errorf("after a nested extension: %d calls, the last %+v; want the outer message moved", len(api.calls), api.calls[len(api.calls)-1])
	}
}

func TestQueueURLFromARN(t *testing.T) {
	for arn, want := range map[string]string{
		"arn:aws:sqs:us-east-1:123456789012:q.fifo":   "https://sqs.us-east-1.amazonaws.com/123456789012/q.fifo",
		"arn:aws-cn:sqs:cn-north-1:123456789012:q":    "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q",
		"arn:aws:sns:us-east-1:123456789012:topic":    "",
		"arn:aws:sqs:us-east-1:123456789012":          "",
		"https://sqs.us-east-1.amazonaws.com/1/queue": "",
	} {
		got, err := sqsbatch.QueueURLFromARN(arn)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("QueueURLFromARN(%q) = %q, %v; want %q", arn, got, err, want)
		}
	}
}
