package reliability_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/runner"
)

// stalledPastLease is a consumer frozen at its commit (a long GC pause, a network
// partition) that wakes up after its lease: every completion transaction waits d, then
// goes to DynamoDB whatever its invocation's deadline says, as a process that resumes
// would send it.
type stalledPastLease struct {
	persistence.DynamoDBAPI
	d                time.Duration
	stalled          chan struct{}
	once             sync.Once
	awake            atomic.Bool
	refused, applied atomic.Int64
}

func (s *stalledPastLease) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	s.once.Do(func() { close(s.stalled) })
	time.Sleep(s.d)
	s.awake.Store(true)
	out, err := s.DynamoDBAPI.TransactWriteItems(context.WithoutCancel(ctx), in, o...)
	if err != nil {
		s.refused.Add(1)
	} else {
		s.applied.Add(1)
	}
	return out, err
}

// UpdateItem counts, as overwrites, the record writes that succeed once A has woken up
// past its lease (a completion without business writes, a release): every one of them
// would have replaced the new holder's outcome.
func (s *stalledPastLease) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	awake := s.awake.Load()
	if awake {
		ctx = context.WithoutCancel(ctx)
	}
	out, err := s.DynamoDBAPI.UpdateItem(ctx, in, o...)
	if awake && err == nil {
		s.applied.Add(1)
	}
	return out, err
}

// TestFencingUnderRealTiming: consumer A receives a batch, acquires every key and
// stalls before its commits, past its lease. The reaper fails its locks, the messages
// come back, consumer B takes the keys over and commits. Then A wakes up and sends its
// commits: every one must be refused by the fence, and with them their outbound messages.
// Counted: commits of A that went through (overwrites), 0 expected, the example's tables,
// and the outbound messages (one per message).
func TestFencingUnderRealTiming(t *testing.T) {
	parallel(t, 1)
	rounds := size(1, 5)
	w := newWorld(t)
	cfg, err := consumerapp.FromEnv(func(k string) (string, bool) { v, ok := w.vars[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	// A 3 s invocation: the lease ends 1 s after its deadline, the reaper may fail it
	// 0.5 s later, and the messages come back 6 s after A received them.
	const functionTimeout, visibility, stall = 3 * time.Second, 6 * time.Second, 9 * time.Second
	cfg.LeaseGrace, cfg.DeadlineMargin = time.Second, 500*time.Millisecond
	queueURL := w.vars["QUEUE_URL"]
	attrs, err := w.sqs.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(queueURL), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatal(err)
	}
	arn := attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	store, err := persistence.NewDynamoStore(w.ddb, cfg.IdempotencyTable)
	if err != nil {
		t.Fatal(err)
	}
	reaper := &reaper.Reaper{Store: store, Shards: cfg.Shards, Grace: 500 * time.Millisecond}

	ex := cfg.Example
	lookup := func(k string) (string, bool) { v, ok := w.vars[k]; return v, ok }
	var all []example.Message
	var reaped, takenOver, refused, overwrites int64
	start := time.Now()
	for round := range rounds {
		// Ten messages in ten groups: one batch, every key held by A at once.
		ps := w.gen.Traffic(rand.New(rand.NewPCG(uint64(round), 7)), fmt.Sprintf("fence%d", round), 10, 10)
		if err := example.Prepare(context.Background(), ex, w.ddb, lookup, ps); err != nil {
			t.Fatal(err)
		}
		entries := make([]sqstypes.SendMessageBatchRequestEntry, len(ps))
		for i, p := range ps {
			entries[i] = sqstypes.SendMessageBatchRequestEntry{
				Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(p.Body),
				// One group per message, so that no message waits behind another's retry.
				MessageGroupId: aws.String(fmt.Sprintf("fence-%d", i)), MessageDeduplicationId: aws.String(outbox.DeduplicationID(p.Key)),
				MessageAttributes: map[string]sqstypes.MessageAttributeValue{
					idem.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(p.Key)},
				},
			}
		}
		all = append(all, ps...)
		if out, err := w.sqs.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(queueURL), Entries: entries}); err != nil || len(out.Failed) > 0 {
			t.Fatalf("send round %d: %v %+v", round, err, out)
		}

		// Consumer A: one invocation of the real handler, stalled at its commits.
		slow := &stalledPastLease{DynamoDBAPI: w.ddb, d: stall, stalled: make(chan struct{})}
		a, err := consumerapp.New(cfg, consumerapp.Deps{DynamoDB: slow, SQS: w.sqs, Logs: discard{}, Metrics: discard{}, Owner: "consumer-a"})
		if err != nil {
			t.Fatal(err)
		}
		var msgs []sqstypes.Message
		for len(msgs) < len(ps) {
			out, err := w.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
				QueueUrl: aws.String(queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
				VisibilityTimeout: int32(visibility / time.Second), MessageAttributeNames: []string{"All"},
				MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
			})
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, out.Messages...)
		}
		aDone := make(chan int, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), functionTimeout)
			defer cancel()
			ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: fmt.Sprintf("a-%d", round)})
			resp, err := a(ctx, runner.Event(msgs, arn, "us-east-1"))
			if err != nil {
				t.Errorf("consumer A: %v", err)
			}
			aDone <- len(resp.BatchItemFailures)
		}()
		<-slow.stalled

		// Consumer B and the reaper, until the queue is empty.
		stats, err := runner.Run(context.Background(), runner.Config{
			SQS: w.sqs, QueueURL: queueURL, Consumers: 2, BatchSize: 10, VisibilityTimeout: visibility,
			FunctionTimeout: 10 * time.Second, WaitTime: time.Second, UntilIdle: 2 * time.Second,
			Reap: reaper.Sweep, ReapEvery: 500 * time.Millisecond,
			NewHandler: func(i int) (runner.Handler, error) {
				h, err := consumerapp.New(cfg, consumerapp.Deps{DynamoDB: w.ddb, SQS: w.sqs, Logs: discard{}, Metrics: discard{}, Owner: "consumer-b"})
				return runner.Handler(h), err
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		failures := <-aDone
		if failures != len(ps) {
			t.Errorf("round %d: consumer A reported %d failures, want all %d (lease lost)", round, failures, len(ps))
		}
		reaped += stats.Reaped
		takenOver += stats.Succeeded
		refused += slow.refused.Load()
		overwrites += slow.applied.Load()
	}

	got, err := w.checker.Read(context.Background(), w.ddb, lookup)
	if err != nil {
		t.Fatal(err)
	}
	want, err := w.checker.Expect(all, all)
	if err != nil {
		t.Fatal(err)
	}
	diffs := demo.CompareState(want, got.State)
	if got.Applied != len(all) {
		diffs = append(diffs, fmt.Sprintf("effects counted in the tables: %d, want %d", got.Applied, len(all)))
	}
	if len(diffs) > 0 {
		t.Errorf("%s tables:\n%s", ex.Name(), strings.Join(diffs, "\n"))
	}
	if overwrites != 0 || refused != int64(len(all)) {
		t.Errorf("stalled holder: %d writes went through, %d commits refused; want 0 and %d", overwrites, refused, len(all))
	}
	if reaped == 0 {
		t.Errorf("the reaper failed no lock: the takeovers did not go through the reaper")
	}
	// The outbound messages, when the example says which message each confirms
	// (example.Confirmer): one per message, none from the stalled holder.
	receipts := map[string]int{}
	confirms, outboundVar := exampletest.Confirms(ex)
	for confirms != nil {
		out, err := w.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(w.vars[outboundVar]), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			id, ok := confirms(aws.ToString(m.Body))
			if !ok {
				t.Fatalf("outbound message %q confirms no message", aws.ToString(m.Body))
			}
			receipts[id]++
			if _, err := w.sqs.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(w.vars[outboundVar]), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range all {
		if confirms != nil && receipts[p.ID] != 1 {
			t.Errorf("message %s: %d outbound messages, want 1", p.ID, receipts[p.ID])
		}
	}
	if confirms != nil && len(receipts) != len(all) {
		t.Errorf("outbound messages for %d messages, want %d", len(receipts), len(all))
	}
	report(t, "fencing under real timing",
		"example", ex.Name(),
		"rounds × messages", fmtInts(rounds, 10),
		"invocation / lease grace / stall / visibility", fmt.Sprintf("%s / %s / %s / %s", functionTimeout, cfg.LeaseGrace, stall, visibility),
		"locks failed by the reaper (every 500ms, grace 500ms)", reaped,
		"records completed by consumer B after the takeover", takenOver,
		"stalled commits refused by the fence", refused,
		"outbound messages (one per message expected)", fmt.Sprintf("%d for %d messages", len(receipts), len(all)),
		"writes of the stalled holder that went through (overwrites)", overwrites,
		"tables = what the messages leave", fmt.Sprintf("%d values compared: %v", len(want), len(diffs) == 0),
		"time", elapsed(time.Since(start)))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
