package awstest

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// QueueReader is the part of the SQS client Drain uses.
type QueueReader interface {
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// drainVisibility is how long a message Drain received stays hidden: long enough for
// its deletion, short enough that one a lost answer hid comes back soon.
const drainVisibility = 5

// drainPatience is how long Drain waits for messages that are in flight (or delayed)
// while it receives nothing new, before it gives up with an error.
const drainPatience = 30 * time.Second

// Drain receives and deletes every message of the queue at url, with all their message
// and system attributes, and returns them in the order received, each SQS message once.
// The queue must have no other reader while it runs.
//
// It short-polls, and stops when a receive comes back empty and the queue's counters
// say nothing is visible, in flight or delayed: a FIFO group's later messages are handed out only
// after its first are deleted, and a receive whose answer moto lost (the SDK then sends
// it again) leaves its messages in flight. Those are received with a visibility timeout
// of 5 s, so they come back within that; a message received twice that way (same
// message id) is returned once.
func Drain(ctx context.Context, api QueueReader, url string) ([]sqstypes.Message, error) {
	var all []sqstypes.Message
	seen := map[string]bool{}
	progress := time.Now()
	for {
		out, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
			VisibilityTimeout:           drainVisibility,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		})
		if err != nil {
			return all, fmt.Errorf("drain %s: receive: %w", url, err)
		}
		if len(out.Messages) > 0 {
			progress = time.Now()
			var del []sqstypes.DeleteMessageBatchRequestEntry
			for i, m := range out.Messages {
				if id := aws.ToString(m.MessageId); !seen[id] {
					seen[id] = true
					all = append(all, m)
				}
				del = append(del, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
			}
			// Deleting unlocks the FIFO groups, so the next receive gets their later messages.
			if _, err := api.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: del}); err != nil {
				return all, fmt.Errorf("drain %s: delete: %w", url, err)
			}
			continue
		}
		left, err := queueHolds(ctx, api, url)
		if err != nil {
			return all, err
		}
		if left == 0 {
			return all, nil
		}
		if time.Since(progress) > drainPatience {
			return all, fmt.Errorf("drain %s: %d messages still in flight or delayed after %v without a new one", url, left, drainPatience)
		}
		select {
		case <-ctx.Done():
			return all, fmt.Errorf("drain %s: %d messages left: %w", url, left, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// queueHolds returns how many messages the queue holds: visible, in flight or delayed.
func queueHolds(ctx context.Context, api QueueReader, url string) (int, error) {
	names := []sqstypes.QueueAttributeName{
		sqstypes.QueueAttributeNameApproximateNumberOfMessages,
		sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed,
	}
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
	if err != nil {
		return 0, fmt.Errorf("drain %s: queue attributes: %w", url, err)
	}
	n := 0
	for _, name := range names {
		v, err := strconv.Atoi(out.Attributes[string(name)])
		if err != nil {
			return 0, fmt.Errorf("drain %s: attribute %s = %q: %w", url, name, out.Attributes[string(name)], err)
		}
		n += v
	}
	return n, nil
}
