package reliability_test

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/runner"
)

// stalledPastLease is a consumer frozen at its commit (a long GC pause, a network
// partition) that wakes up after its lease: every completion transaction waits d, then
// goes to DynamoDB whatever its invocation's deadline says, as a process that resumes
// would send it.
type stalledPastLease struct {
	idem.DynamoDBAPI
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
// commits: every one must be refused by the fence, and with them their receipts.
// Counted: commits of A that went through (overwrites), 0 expected, the ledger, and the
// receipts (one per payment).
func TestFencingUnderRealTiming(t *testing.T) {
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
	store, err := idem.NewDynamoStore(w.ddb, cfg.IdempotencyTable)
	if err != nil {
		t.Fatal(err)
	}
	reaper := &idem.Reaper{Store: store, Shards: cfg.Shards, Grace: 500 * time.Millisecond}

	var all []ledger.Payment
	var reaped, takenOver, refused, overwrites int64
	start := time.Now()
	for round := range rounds {
		ps := make([]ledger.Payment, 10)
		entries := make([]sqstypes.SendMessageBatchRequestEntry, len(ps))
		for i := range ps {
			ps[i] = ledger.Payment{PaymentID: fmt.Sprintf("fence-%d-%d", round, i), AccountID: fmt.Sprintf("fence-acct-%d", i),
				AmountCents: int64(100*round + i + 1), Currency: "EUR"}
			body := mustJSON(t, ps[i])
			entries[i] = sqstypes.SendMessageBatchRequestEntry{
				Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(body),
				MessageGroupId: aws.String(ps[i].AccountID), MessageDeduplicationId: aws.String(ps[i].PaymentID),
				MessageAttributes: map[string]sqstypes.MessageAttributeValue{
					idem.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(ledger.Key(ps[i]))},
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

	accts, err := ledger.Accounts(context.Background(), w.ddb, cfg.LedgerTable)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.ExpectedBalances(all)
	var diffs []string
	for acct, bal := range want {
		if accts[acct].BalanceCents != bal || accts[acct].Payments != int64(rounds) {
			diffs = append(diffs, fmt.Sprintf("%s: %+v, want balance %d over %d payments", acct, accts[acct], bal, rounds))
		}
	}
	if len(diffs) > 0 {
		t.Errorf("ledger:\n%s", strings.Join(diffs, "\n"))
	}
	if overwrites != 0 || refused != int64(len(all)) {
		t.Errorf("stalled holder: %d writes went through, %d commits refused; want 0 and %d", overwrites, refused, len(all))
	}
	if reaped == 0 {
		t.Errorf("the reaper failed no lock: the takeovers did not go through the reaper")
	}
	receipts := map[string]int{}
	for {
		out, err := w.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(w.vars["RECEIPTS_QUEUE_URL"]), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			var r ledger.Receipt
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &r); err != nil {
				t.Fatalf("receipt %q: %v", aws.ToString(m.Body), err)
			}
			receipts[r.PaymentID]++
			if _, err := w.sqs.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(w.vars["RECEIPTS_QUEUE_URL"]), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range all {
		if receipts[p.PaymentID] != 1 {
			t.Errorf("payment %s: %d receipts, want 1", p.PaymentID, receipts[p.PaymentID])
		}
	}
	if len(receipts) != len(all) {
		t.Errorf("receipts for %d payments, want %d", len(receipts), len(all))
	}
	report(t, "fencing under real timing",
		"rounds × payments", fmtInts(rounds, 10),
		"invocation / lease grace / stall / visibility", fmt.Sprintf("%s / %s / %s / %s", functionTimeout, cfg.LeaseGrace, stall, visibility),
		"locks failed by the reaper (every 500ms, grace 500ms)", reaped,
		"records completed by consumer B after the takeover", takenOver,
		"stalled commits refused by the fence", refused,
		"receipts (one per payment expected)", fmt.Sprintf("%d for %d payments", len(receipts), len(all)),
		"writes of the stalled holder that went through (overwrites)", overwrites,
		"ledger", fmt.Sprintf("%d accounts, each balance the sum of its payments: %v", len(want), len(diffs) == 0),
		"time", elapsed(time.Since(start)))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
