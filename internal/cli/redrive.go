package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/syncw"
)

// Settings of redrive.
const (
	// dlqAttributePrefix starts the names of the attributes the consumer adds when it
	// dead-letters a message (idem.DLQReasonAttribute, ...); redrive strips them.
	dlqAttributePrefix = "dlq-"
	// redriveDedupPrefix starts the deduplication id of a redriven message, derived from
	// the dead-letter message's id, so a repeated redrive of the same message (after a
	// crash between send and delete) is dropped by SQS within its 5-minute window.
	// The original key cannot serve: the original send may be within the window too.
	redriveDedupPrefix = "redrive-"
	// redriveVisibility hides a received message from other readers while it moves.
	redriveVisibility = 60
	// maxMessageAttributes is SQS's limit per message.
	maxMessageAttributes = 10
)

// redriveAPI is the part of the SQS client redrive uses; *sqs.Client satisfies it.
type redriveAPI interface {
	queueAttributes
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

// runRedrive moves messages from the dead-letter queue back to the input queue, after
// the cause of their failure is fixed.
func runRedrive(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	flags := newFlags("redrive", stderr)
	dlqURL := flags.String("dlq-url", "", "dead-letter queue URL (default $DLQ_URL)")
	queueURL := flags.String("queue-url", "", "input queue URL (default $QUEUE_URL)")
	maxN := flags.Int("max", 0, "move at most `N` messages (default: all)")
	dryRun := flags.Bool("dry-run", false, "list the messages that would move, move nothing")
	pos, code, ok := parseArgs(flags, args)
	if !ok {
		return code
	}
	switch {
	case len(pos) > 0:
		return usageError(flags, stderr, "unexpected argument %q", pos[0])
	case *maxN < 0:
		return usageError(flags, stderr, "--max must not be negative")
	}
	r := &redriver{dlq: setting(*dlqURL, env, "DLQ_URL"), queue: setting(*queueURL, env, "QUEUE_URL"), max: *maxN, stdout: stdout, stderr: stderr}
	switch {
	case r.dlq == "":
		return fail(stderr, "redrive", errNotSet("DLQ_URL", "dlq-url"))
	case r.queue == "":
		return fail(stderr, "redrive", errNotSet("QUEUE_URL", "queue-url"))
	case r.dlq == r.queue:
		return fail(stderr, "redrive", fmt.Errorf("the dead-letter queue and the input queue are the same queue %s", r.dlq))
	}
	cfg, err := LoadAWSEnv(ctx, env)
	if err != nil {
		return fail(stderr, "redrive", err)
	}
	r.api = sqs.NewFromConfig(cfg)
	if _, err := isFIFO(ctx, r.api, r.dlq); err != nil {
		return fail(stderr, "redrive", err)
	}
	if r.fifo, err = isFIFO(ctx, r.api, r.queue); err != nil {
		return fail(stderr, "redrive", err)
	}
	if *dryRun {
		err = r.list(ctx)
	} else {
		err = r.move(ctx)
	}
	if err != nil {
		return fail(stderr, "redrive", err)
	}
	return exitOK
}

type redriver struct {
	api            redriveAPI
	dlq, queue     string
	fifo           bool // the input queue is FIFO
	max            int  // 0: all
	stdout, stderr io.Writer
}

func (r *redriver) receive(ctx context.Context, n int) ([]types.Message, error) {
	out, err := r.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(r.dlq),
		MaxNumberOfMessages:         int32(n),
		WaitTimeSeconds:             1,
		VisibilityTimeout:           redriveVisibility,
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		return nil, fmt.Errorf("receive from %s: %w", r.dlq, queueError(r.dlq, err))
	}
	return out.Messages, nil
}

// batch returns how many messages to receive next, or 0 when max is reached.
func (r *redriver) batch(done int) int {
	if r.max == 0 {
		return 10
	}
	return min(10, r.max-done)
}

// move receives, sends to the input queue, and deletes from the dead-letter queue only
// after the send succeeded, until the dead-letter queue has nothing visible or max
// messages were handled.
func (r *redriver) move(ctx context.Context) error {
	var moved, failed atomic.Int64
	failedIDs := map[string]bool{}
	stderr := syncw.New(r.stderr) // shared with the progress goroutine
	stop := startProgress(stderr, time.Second, func() string {
		return fmt.Sprintf("redrive: %d moved, %d failed", moved.Load(), failed.Load())
	})
	defer stop()
	for {
		n := r.batch(int(moved.Load() + failed.Load()))
		if n == 0 {
			break
		}
		msgs, err := r.receive(ctx, n)
		if err != nil {
			return err
		}
		fresh := 0
		for _, m := range msgs {
			id := aws.ToString(m.MessageId)
			if failedIDs[id] { // it failed already and came back: stop rather than loop
				continue
			}
			fresh++
			if err := r.moveOne(ctx, m); err != nil {
				failed.Add(1)
				failedIDs[id] = true
				fmt.Fprintf(stderr, "idemctl redrive: message %s: %v\n", id, err)
				continue
			}
			moved.Add(1)
		}
		if fresh == 0 {
			break
		}
	}
	stop()
	fmt.Fprintf(r.stdout, "moved %d messages from %s to %s: %d failed\n", moved.Load(), r.dlq, r.queue, failed.Load())
	if !r.fifo && moved.Load() > 0 {
		fmt.Fprintln(r.stdout, "note: the input queue is not FIFO: a message redriven twice arrives twice; its idempotency record makes the second a replay")
	}
	if failed.Load() > 0 {
		return fmt.Errorf("%d messages not moved: they stay in the dead-letter queue", failed.Load())
	}
	return nil
}

// redriveInput is the message to send to the input queue for m: its body, its
// attributes without the dlq-* ones, its group, and a deduplication id derived from its
// id in the dead-letter queue. An outbound message a queue refused for good
// (idem.DLQOutboundQueueAttribute) goes back to that queue instead, with its own key as
// its deduplication id: it is not an input message.
func (r *redriver) redriveInput(m types.Message) (*sqs.SendMessageInput, error) {
	if dest := aws.ToString(m.MessageAttributes[idem.DLQOutboundQueueAttribute].StringValue); dest != "" {
		return outboundInput(m, dest), nil
	}
	attrs := map[string]types.MessageAttributeValue{}
	for name, v := range m.MessageAttributes {
		if strings.HasPrefix(name, dlqAttributePrefix) {
			continue
		}
		attrs[name] = types.MessageAttributeValue{DataType: v.DataType, StringValue: v.StringValue, BinaryValue: v.BinaryValue}
	}
	key := messageKey(m)
	if _, ok := attrs[idem.KeyAttribute]; !ok && key != "" {
		// Keyed by its FIFO deduplication id: that id changes now, so the key must
		// travel as the attribute the consumer reads first.
		if len(attrs) == maxMessageAttributes {
			return nil, fmt.Errorf("cannot add the %s attribute: the message has %d attributes already", idem.KeyAttribute, len(attrs))
		}
		attrs[idem.KeyAttribute] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(key)}
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(r.queue), MessageBody: m.Body}
	if len(attrs) > 0 {
		in.MessageAttributes = attrs
	}
	if r.fifo {
		group := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		if group == "" { // from a standard dead-letter queue: one group per key
			group = idem.DeduplicationID(key)
			if key == "" {
				group = "redrive"
			}
		}
		in.MessageGroupId = aws.String(group)
		in.MessageDeduplicationId = aws.String(redriveDedupID(aws.ToString(m.MessageId)))
	}
	return in, nil
}

// outboundInput is the message to send again to dest for the dead letter m of an
// outbound message: its body and attributes without the dlq-* ones, its group, and the
// deduplication id its key gives.
func outboundInput(m types.Message, dest string) *sqs.SendMessageInput {
	attrs := map[string]types.MessageAttributeValue{}
	for name, v := range m.MessageAttributes {
		if !strings.HasPrefix(name, dlqAttributePrefix) {
			attrs[name] = types.MessageAttributeValue{DataType: v.DataType, StringValue: v.StringValue, BinaryValue: v.BinaryValue}
		}
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(dest), MessageBody: m.Body}
	if len(attrs) > 0 {
		in.MessageAttributes = attrs
	}
	if strings.HasSuffix(dest, ".fifo") {
		group := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		if group == "" {
			group = "redrive"
		}
		in.MessageGroupId = aws.String(group)
		in.MessageDeduplicationId = aws.String(idem.DeduplicationID(aws.ToString(attrs[idem.KeyAttribute].StringValue)))
	}
	return in
}

func (r *redriver) moveOne(ctx context.Context, m types.Message) error {
	in, err := r.redriveInput(m)
	if err != nil {
		return err
	}
	if _, err := r.api.SendMessage(ctx, in); err != nil {
		dest := aws.ToString(in.QueueUrl)
		return fmt.Errorf("send to %s: %w (left in the dead-letter queue)", dest, queueError(dest, err))
	}
	if _, err := r.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(r.dlq), ReceiptHandle: m.ReceiptHandle}); err != nil {
		return fmt.Errorf("sent, but not deleted from the dead-letter queue: %w (a later redrive sends it again; a FIFO queue drops that copy within 5 minutes)", err)
	}
	return nil
}

// redriveDedupID is "redrive-" and the SHA-256 of the message id: 72 characters, under
// SQS's 128.
func redriveDedupID(messageID string) string {
	sum := sha256.Sum256([]byte(messageID))
	return redriveDedupPrefix + hex.EncodeToString(sum[:])
}

// messageKey is the message's idempotency key as the consumer reads it: the key
// attribute, else the FIFO deduplication id.
func messageKey(m types.Message) string {
	if v, ok := m.MessageAttributes[idem.KeyAttribute]; ok && v.StringValue != nil {
		return *v.StringValue
	}
	return m.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)]
}

// list prints what move would move and makes the messages visible again.
func (r *redriver) list(ctx context.Context) error {
	seen := map[string]bool{}
	var handles []*string
	tw := tabwriter.NewWriter(r.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MESSAGE ID\tGROUP\tKEY HASH\tREASON")
	defer func() {
		// Visible again at once, for the real redrive or the consumer's operator.
		for _, h := range handles {
			_, _ = r.api.ChangeMessageVisibility(context.WithoutCancel(ctx), &sqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(r.dlq), ReceiptHandle: h, VisibilityTimeout: 0,
			})
		}
	}()
	for {
		n := r.batch(len(seen))
		if n == 0 {
			break
		}
		msgs, err := r.receive(ctx, n)
		if err != nil {
			return err
		}
		fresh := 0
		for _, m := range msgs {
			id := aws.ToString(m.MessageId)
			if seen[id] {
				continue
			}
			seen[id], fresh = true, fresh+1
			handles = append(handles, m.ReceiptHandle)
			keyHash := "-"
			if k := messageKey(m); k != "" {
				keyHash = idem.HashKey(k)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", id, orDash(m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]), keyHash, dlqReason(m))
		}
		if fresh == 0 {
			break
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(r.stdout, "dry run: %d messages would move from %s to %s; nothing moved\n", len(seen), r.dlq, r.queue)
	if strings.HasSuffix(r.dlq, ".fifo") && len(seen) > 0 {
		fmt.Fprintln(r.stdout, "note: a FIFO queue holds back the rest of a group while its first messages are received, so more may be behind these")
	}
	return nil
}

// dlqReason says why the message is in the dead-letter queue, shortened for a listing.
func dlqReason(m types.Message) string {
	reason := ""
	if v, ok := m.MessageAttributes[idem.DLQReasonAttribute]; ok && v.StringValue != nil {
		reason = *v.StringValue
	} else if src := m.Attributes[string(types.MessageSystemAttributeNameDeadLetterQueueSourceArn)]; src != "" {
		reason = "receive count exceeded the redrive policy of " + src
	}
	reason = strings.Join(strings.Fields(reason), " ")
	if r := []rune(reason); len(r) > 100 {
		reason = string(r[:100]) + "…"
	}
	return orDash(reason)
}
