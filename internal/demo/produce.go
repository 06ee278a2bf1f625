package demo

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/runner"
)

// Message is one message the demo's producer sends to the FIFO input queue.
type Message struct {
	Body    string
	Key     string // idempotency-key attribute ("" = none)
	Group   string
	DedupID string
}

// Sender is the part of the SQS client the producer uses.
type Sender interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// send sends msgs in batches of 10, a few batches at once, retrying failed entries; it
// returns how many SQS accepted. SQS accepts a FIFO duplicate (same dedup id within five
// minutes) and then drops it: accepted is not delivered.
func send(ctx context.Context, api Sender, url string, msgs []Message, concurrency int) (int, error) {
	var accepted atomic.Int64
	var firstErr error
	var mu sync.Mutex
	sem := make(chan struct{}, max(concurrency, 1))
	var wg sync.WaitGroup
	for start := 0; start < len(msgs); start += 10 {
		batch := msgs[start:min(start+10, len(msgs))]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			n, err := sendBatch(ctx, api, url, batch)
			accepted.Add(int64(n))
			if err != nil {
				mu.Lock()
				firstErr = cmp.Or(firstErr, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return int(accepted.Load()), firstErr
}

func sendBatch(ctx context.Context, api Sender, url string, batch []Message) (int, error) {
	pending := map[string]Message{}
	for i, m := range batch {
		pending[strconv.Itoa(i)] = m
	}
	accepted := 0
	for try := 1; len(pending) > 0; try++ {
		in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(url)}
		for id, m := range pending {
			e := sqstypes.SendMessageBatchRequestEntry{
				Id: aws.String(id), MessageBody: aws.String(m.Body),
				MessageGroupId: aws.String(m.Group), MessageDeduplicationId: aws.String(m.DedupID),
			}
			if m.Key != "" {
				e.MessageAttributes = map[string]sqstypes.MessageAttributeValue{
					idem.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(m.Key)},
				}
			}
			in.Entries = append(in.Entries, e)
		}
		out, err := api.SendMessageBatch(ctx, in)
		if err != nil {
			if try == 3 {
				return accepted, fmt.Errorf("demo: send %d messages: %w", len(pending), err)
			}
			continue
		}
		for _, ok := range out.Successful {
			delete(pending, aws.ToString(ok.Id))
			accepted++
		}
		if len(out.Failed) > 0 && try == 3 {
			return accepted, fmt.Errorf("demo: %d messages refused: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
		}
	}
	return accepted, nil
}

// DepthAPI is what sendPaced reads the queue's depth with.
type DepthAPI interface {
	Sender
	runner.SQSAPI
}

// sendPaced sends msgs in chunks, each once the queue holds at most maxDepth messages
// (visible and in flight): a producer that keeps up with the consumers instead of
// burying the emulator under its whole backlog at once (moto's receives slow down with
// the queue's length).
func sendPaced(ctx context.Context, api DepthAPI, url string, msgs []Message, maxDepth int) (int, error) {
	const chunk = 100
	sent := 0
	for start := 0; start < len(msgs); start += chunk {
		for {
			visible, inflight, err := runner.Depth(ctx, api, url)
			if err != nil {
				return sent, err
			}
			if visible+inflight <= maxDepth {
				break
			}
			select {
			case <-ctx.Done():
				return sent, fmt.Errorf("demo: paced send: %w", ctx.Err())
			case <-time.After(500 * time.Millisecond):
			}
		}
		n, err := send(ctx, api, url, msgs[start:min(start+chunk, len(msgs))], 4)
		sent += n
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}
