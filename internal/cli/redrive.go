package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/envconf"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
	"github.com/idemgo/sqs-lambda-consumer/internal/stacksecret"
	"github.com/idemgo/sqs-lambda-consumer/internal/syncw"
)

// Settings of redrive.
const (
	// redriveDedupPrefix starts the deduplication id of a redriven message, derived from
	// the dead-letter message's id, so a repeated redrive of the same message (after a
	// crash between send and delete) is dropped by SQS within its 5-minute window.
	// The original key cannot serve: the original send may be within the window too.
	// The consumer never takes such an id for a key (sqsmsg.DedupIDIsKey).
	redriveDedupPrefix = sqsmsg.RedriveDedupPrefix
	// redriveVisibility hides a received message from other readers while it moves.
	redriveVisibility = 60
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
// the cause of their failure is fixed; an outbound message the consumer or the reaper
// dead-lettered goes back to its own queue, when that is one of the stack's.
func runRedrive(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	flags := newFlags("redrive", stderr)
	dlqURL := flags.String("dlq-url", "", "dead-letter queue URL (default $DLQ_URL)")
	queueURL := flags.String("queue-url", "", "input queue URL (default $QUEUE_URL)")
	maxN := flags.Int("max", 0, "move at most `N` messages (default: all)")
	dryRun := flags.Bool("dry-run", false, "list the messages that would move and where, move nothing")
	template := flags.String("template", "template.yaml", "the SAM template: the queues its functions' variables name (their values from the environment) are the stack's queues an outbound dead letter may go back to")
	var outbound stringList
	flags.Var(&outbound, "outbound-queue", "a `URL` of the stack's an outbound dead letter may go back to, besides the template's (repeatable)")
	if code, ok := parseNoArgs(flags, args, stderr); !ok {
		return code
	}
	switch {
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
	if r.keys, err = stacksecret.Keys(ctx, env, cfg); err != nil {
		return fail(stderr, "redrive", err)
	}
	if r.keys == nil {
		return fail(stderr, "redrive", fmt.Errorf("%s is not set: redrive tells the consumer's and the reaper's dead letters from forged ones "+
			"with the stack's secret: run eval \"$(idemctl up)\" first, or export the stack's output StackSecretArn as %s", envconf.SecretARNVar, envconf.SecretARNVar))
	}
	if r.queues, err = stackQueues(*template, outbound, env); err != nil {
		return fail(stderr, "redrive", err)
	}
	r.api = sqs.NewFromConfig(cfg)
	if _, err := isFIFO(ctx, r.api, r.dlq); err != nil {
		return fail(stderr, "redrive", err)
	}
	if r.fifo, r.queueARN, err = queueFacts(ctx, r.api, r.queue); err != nil {
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
	queueARN       string // the input queue's: the one source SQS may move a dead letter from
	fifo           bool   // the input queue is FIFO
	max            int    // 0: all
	stdout, stderr io.Writer
	keys           *sqsmsg.Keys    // verify the dead letters' signatures
	queues         map[string]bool // the stack's queues an outbound dead letter may go back to
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// stackQueues is the set of the stack's queues an outbound dead letter may go back to:
// the values of the variables the template gives its functions that name its queues
// (stack.Template.QueueVariables), and extra. A template that is not there gives none.
func stackQueues(path string, extra []string, env lookupEnv) (map[string]bool, error) {
	queues := map[string]bool{}
	for _, q := range extra {
		queues[q] = true
	}
	t, err := stack.Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		return queues, nil
	}
	if err != nil {
		return nil, err
	}
	for _, name := range t.QueueVariables() {
		if v, ok := env(name); ok && v != "" {
			queues[v] = true
		}
	}
	return queues, nil
}

// destination is where m goes back to: the queue its dlq-outbound-queue names, when m
// is a dead letter the consumer or the reaper signed (sqsmsg.Keys.VerifyDeadLetter) and
// that queue is one of the stack's; otherwise the input queue, as an input message, with
// why a destination it named is not honoured (ignored; "" when it named none).
func (r *redriver) destination(m types.Message) (dest string, outbound bool, ignored string) {
	claim := aws.ToString(m.MessageAttributes[sqsmsg.DLQOutboundQueueAttribute].StringValue)
	switch {
	case claim == "":
		return r.queue, false, ""
	case r.keys.VerifyDeadLetter(m) != nil:
		return r.queue, false, fmt.Sprintf("its %s %s is ignored: the dead letter is not signed by the stack's consumer or reaper", sqsmsg.DLQOutboundQueueAttribute, claim)
	case !r.queues[claim] || claim == r.dlq:
		return r.queue, false, fmt.Sprintf("its %s %s is ignored: not one of the stack's queues", sqsmsg.DLQOutboundQueueAttribute, claim)
	}
	return claim, true, ""
}

// foreignSource is the queue SQS moved m from (its DeadLetterQueueSourceArn, which
// ReceiveMessage returns when asked: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html)
// when that is not the input queue, or "". A message the consumer or the reaper sent
// has none, and nobody else may send to the dead-letter queue; the template's redrive
// allow policy names the input queue alone, but an older stack's allowed any queue of
// the account: a message moved from another one is a stranger's, and stays.
func (r *redriver) foreignSource(m types.Message) string {
	src := m.Attributes[string(types.MessageSystemAttributeNameDeadLetterQueueSourceArn)]
	if src == "" || src == r.queueARN {
		return ""
	}
	return src
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

// eachNew receives batches from the dead-letter queue and calls f on each message whose
// id skip does not hold, until handled() reaches max or a batch brings nothing new.
func (r *redriver) eachNew(ctx context.Context, handled func() int, skip map[string]bool, f func(id string, m types.Message)) error {
	for {
		n := r.batch(handled())
		if n == 0 {
			return nil
		}
		msgs, err := r.receive(ctx, n)
		if err != nil {
			return err
		}
		fresh := 0
		for _, m := range msgs {
			if id := aws.ToString(m.MessageId); !skip[id] {
				fresh++
				f(id, m)
			}
		}
		if fresh == 0 {
			return nil
		}
	}
}

// move receives, sends to the input queue, and deletes from the dead-letter queue only
// after the send succeeded, until the dead-letter queue has nothing visible or max
// messages were handled.
func (r *redriver) move(ctx context.Context) error {
	var moved, failed, refused atomic.Int64
	failedIDs := map[string]bool{}
	to := map[string]int{}        // messages moved, by destination
	stderr := syncw.New(r.stderr) // shared with the progress goroutine
	stop := startProgress(stderr, time.Second, func() string {
		return fmt.Sprintf("redrive: %d moved, %d failed, %d refused", moved.Load(), failed.Load(), refused.Load())
	})
	defer stop()
	handled := func() int { return int(moved.Load() + failed.Load() + refused.Load()) }
	// A message that failed already and came back is skipped: stop rather than loop.
	err := r.eachNew(ctx, handled, failedIDs, func(id string, m types.Message) {
		if src := r.foreignSource(m); src != "" {
			refused.Add(1)
			failedIDs[id] = true
			fmt.Fprintf(stderr, "idemctl redrive: message %s refused: SQS moved it from %s, not from the input queue; it stays in the dead-letter queue\n", id, src)
			return
		}
		dest, ignored, err := r.moveOne(ctx, m)
		if ignored != "" {
			fmt.Fprintf(stderr, "idemctl redrive: message %s goes to the input queue: %s\n", id, ignored)
		}
		if err != nil {
			failed.Add(1)
			failedIDs[id] = true
			fmt.Fprintf(stderr, "idemctl redrive: message %s: %v\n", id, err)
			return
		}
		moved.Add(1)
		to[dest]++
	})
	if err != nil {
		return err
	}
	stop()
	fmt.Fprintf(r.stdout, "moved %d messages from %s%s: %d failed, %d refused\n", moved.Load(), r.dlq, r.destinations(to), failed.Load(), refused.Load())
	if !r.fifo && moved.Load() > 0 {
		fmt.Fprintln(r.stdout, "note: the input queue is not FIFO: a message redriven twice arrives twice; its idempotency record makes the second a replay")
	}
	if n := failed.Load() + refused.Load(); n > 0 {
		return fmt.Errorf("%d messages not moved: they stay in the dead-letter queue", n)
	}
	return nil
}

// destinations says where the messages counted in to went, the input queue first:
// " to URL" for one, " (N to URL, M to URL)" for several.
func (r *redriver) destinations(to map[string]int) string {
	if len(to) == 0 {
		return " to " + r.queue
	}
	if len(to) == 1 && to[r.queue] > 0 {
		return " to " + r.queue
	}
	dests := make([]string, 0, len(to))
	for d := range to {
		dests = append(dests, d)
	}
	slices.SortFunc(dests, func(a, b string) int {
		switch {
		case a == r.queue:
			return -1
		case b == r.queue:
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(dests))
	for i, d := range dests {
		parts[i] = fmt.Sprintf("%d to %s", to[d], d)
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// redriveInput is the message to send back for m: to its destination (destination). To
// the input queue: its body, its own attributes (sqsmsg.OriginalAttributes: without the
// dlq-* ones), its group, and a
// deduplication id derived from its id in the dead-letter queue. An outbound message
// the consumer or the reaper dead-lettered goes back to its queue instead, with its own
// key as its deduplication id: it is not an input message.
func (r *redriver) redriveInput(m types.Message) (*sqs.SendMessageInput, error) {
	dest, outbound, _ := r.destination(m)
	return r.inputTo(m, dest, outbound)
}

// inputTo is redriveInput for m going to dest, as an outbound message or not.
func (r *redriver) inputTo(m types.Message, dest string, outbound bool) (*sqs.SendMessageInput, error) {
	if cut, ok := m.MessageAttributes[sqsmsg.DLQBodyCutAttribute]; ok {
		return nil, fmt.Errorf("its body was cut to fit the dead-letter queue (%s: the whole body was %s): redriven, it would be another message; "+
			"send the whole message again from its producer, then delete this one", sqsmsg.DLQBodyCutAttribute, aws.ToString(cut.StringValue))
	}
	if outbound {
		attrs, err := sqsmsg.OriginalAttributes(m.MessageAttributes)
		if err != nil {
			return nil, err
		}
		return outboundInput(m, attrs, dest), nil
	}
	attrs, key, err := redriveAttributes(m)
	if err != nil {
		return nil, err
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(r.queue), MessageBody: m.Body}
	if len(attrs) > 0 {
		in.MessageAttributes = attrs
	}
	if r.fifo {
		group := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		if group == "" { // from a standard dead-letter queue: one group per key
			group = outbox.DeduplicationID(key)
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
// outbound message: its body, its own attributes attrs (sqsmsg.OriginalAttributes), its
// group, and the deduplication id its key gives.
func outboundInput(m types.Message, attrs map[string]types.MessageAttributeValue, dest string) *sqs.SendMessageInput {
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
		in.MessageDeduplicationId = aws.String(outbox.DeduplicationID(aws.ToString(attrs[idem.KeyAttribute].StringValue)))
	}
	return in
}

// moveOne sends m back (to its destination) and deletes it from the dead-letter queue;
// it returns where it went, and why a destination m named was not honoured.
func (r *redriver) moveOne(ctx context.Context, m types.Message) (dest, ignored string, err error) {
	dest, outbound, ignored := r.destination(m)
	in, err := r.inputTo(m, dest, outbound)
	if err != nil {
		return "", ignored, err
	}
	if _, err := r.api.SendMessage(ctx, in); err != nil {
		return "", ignored, fmt.Errorf("send to %s: %w (left in the dead-letter queue)", dest, queueError(dest, err))
	}
	if _, err := r.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(r.dlq), ReceiptHandle: m.ReceiptHandle}); err != nil {
		return "", ignored, fmt.Errorf("sent to %s, but not deleted from the dead-letter queue: %w (a later redrive sends it again; a FIFO queue drops that copy within 5 minutes)", dest, err)
	}
	return dest, ignored, nil
}

// redriveDedupID is "redrive-" and the SHA-256 of the message id: 72 characters, under
// SQS's 128.
func redriveDedupID(messageID string) string {
	sum := sha256.Sum256([]byte(messageID))
	return redriveDedupPrefix + hex.EncodeToString(sum[:])
}

// redriveAttributes is sqsmsg.RedriveAttributes for the dead letter m: the attributes it
// goes back with, and the key it carries.
func redriveAttributes(m types.Message) (map[string]types.MessageAttributeValue, string, error) {
	dedup := m.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)]
	return sqsmsg.RedriveAttributes(aws.ToString(m.Body), dedup, m.MessageAttributes)
}

// messageKey is the key the dead letter m carries back to the consumer, "" for none.
func messageKey(m types.Message) string {
	_, key, _ := redriveAttributes(m)
	return key
}

// list prints what move would move and makes the messages visible again.
func (r *redriver) list(ctx context.Context) error {
	seen := map[string]bool{}
	var handles []*string
	tw := tabwriter.NewWriter(r.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MESSAGE ID\tGROUP\tKEY HASH\tFROM\tTO\tREASON")
	to := map[string]int{}
	var ignored []string
	refused := 0
	defer func() {
		// Visible again at once, for the real redrive or the consumer's operator.
		for _, h := range handles {
			_, _ = r.api.ChangeMessageVisibility(context.WithoutCancel(ctx), &sqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(r.dlq), ReceiptHandle: h, VisibilityTimeout: 0,
			})
		}
	}()
	err := r.eachNew(ctx, func() int { return len(seen) }, seen, func(id string, m types.Message) {
		seen[id] = true
		handles = append(handles, m.ReceiptHandle)
		keyHash := "-"
		if k := messageKey(m); k != "" {
			keyHash = r.keys.LogHash(k) // as the functions log it
		}
		group := "-"
		if g := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]; g != "" {
			group = r.keys.LogHash(g)
		}
		from := orDash(m.Attributes[string(types.MessageSystemAttributeNameDeadLetterQueueSourceArn)])
		dest, _, why := r.destination(m)
		if src := r.foreignSource(m); src != "" {
			dest, why = "refused: stays", ""
			refused++
			ignored = append(ignored, fmt.Sprintf("message %s is refused: SQS moved it from %s, not from the input queue", id, src))
		} else {
			to[dest]++
		}
		if why != "" {
			ignored = append(ignored, fmt.Sprintf("message %s goes to the input queue: %s", id, why))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", id, group, keyHash, from, dest, dlqReason(m))
	})
	if err != nil {
		return err
	}
	_ = tw.Flush()
	for _, line := range ignored {
		fmt.Fprintln(r.stdout, "note: "+line)
	}
	fmt.Fprintf(r.stdout, "dry run: %d messages would move from %s%s, %d refused; nothing moved\n", len(seen)-refused, r.dlq, r.destinations(to), refused)
	if strings.HasSuffix(r.dlq, ".fifo") && len(seen) > 0 {
		fmt.Fprintln(r.stdout, "note: a FIFO queue holds back the rest of a group while its first messages are received, so more may be behind these")
	}
	return nil
}

// dlqReason says why the message is in the dead-letter queue, shortened for a listing.
func dlqReason(m types.Message) string {
	reason := ""
	if v, ok := m.MessageAttributes[sqsmsg.DLQReasonAttribute]; ok && v.StringValue != nil {
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
