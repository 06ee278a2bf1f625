package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
)

// Limits of send.
const (
	maxBatch        = 10 // SendMessageBatch takes at most 10 entries
	maxEntryRetries = 3  // retries of an entry SendMessageBatch reports failed
	maxConcurrency  = 64
	maxShownErrors  = 10 // failures and invalid lines printed one by one
)

// runSend is the producer: it sends the example's messages to the input queue as a
// correct producer does, with the idempotency key as message attribute and FIFO
// deduplication id, and the example's group (the ledger's account) as message group.
func runSend(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	flags := newFlags("send", stderr)
	exName := exampleFlag(flags)
	count := flags.Int("count", 100, "number of messages to generate")
	groups := flags.Int("groups", 5, "number of FIFO groups the generated messages go to (the ledger's accounts)")
	flags.IntVar(groups, "accounts", 5, "the same as --groups")
	duplicates := flags.Float64("duplicates", 0, "fraction `F` (0..1) of the messages sent a second time with the same deduplication id (SQS drops such a copy within its 5-minute window)")
	late := flags.Float64("duplicates-past-window", 0, "fraction `F` (0..1) of the messages sent a second time with a new deduplication id, as a copy sent past SQS's 5-minute window: it reaches a consumer, and the idempotency record answers it")
	fromFile := flags.String("from-file", "", "send the message bodies of this JSON-lines `file` (one body per line, validated as the consumer does) instead of generating them")
	skipInvalid := flags.Bool("skip-invalid", false, "with --from-file: skip invalid lines instead of sending nothing")
	prepare := flags.Bool("prepare", true, "first write what the messages need in the example's tables (its example.Preparer: the inventory's stock); "+
		"default true for generated messages, false with --from-file")
	seed := flags.Uint64("seed", 0, "random seed: business ids carry it (default: a random seed, printed)")
	concurrency := flags.Int("concurrency", 4, "SendMessageBatch calls in flight")
	queueURL := flags.String("queue-url", "", "input queue URL (default $QUEUE_URL)")
	record := flags.String("record", "", "write the bodies sent to this `file` as JSON lines, for `idemctl check`")
	if code, ok := parseNoArgs(flags, args, stderr); !ok {
		return code
	}
	switch {
	case *count < 1:
		return usageError(flags, stderr, "--count must be at least 1")
	case *groups < 1:
		return usageError(flags, stderr, "--groups must be at least 1")
	case !(*duplicates >= 0 && *duplicates <= 1) || !(*late >= 0 && *late <= 1):
		return usageError(flags, stderr, "--duplicates and --duplicates-past-window must be from 0 to 1")
	case *concurrency < 1 || *concurrency > maxConcurrency:
		return usageError(flags, stderr, "--concurrency must be from 1 to %d", maxConcurrency)
	case *skipInvalid && *fromFile == "":
		return usageError(flags, stderr, "--skip-invalid needs --from-file")
	}
	if *fromFile != "" {
		var conflict string
		flags.Visit(func(f *flag.Flag) {
			if f.Name == "count" || f.Name == "groups" || f.Name == "accounts" || f.Name == "seed" {
				conflict = f.Name
			}
		})
		if conflict != "" {
			return usageError(flags, stderr, "--%s generates messages: it cannot go with --from-file", conflict)
		}
	}
	ex, err := pickExample(*exName, env)
	if err != nil {
		return usageError(flags, stderr, "%v", err)
	}
	var gen example.Traffic
	if *fromFile == "" {
		if gen, err = example.TrafficOf(ex); err != nil {
			return exampleError(flags, stderr, err, "; send your own messages with --from-file")
		}
	}
	url := setting(*queueURL, env, "QUEUE_URL")
	if url == "" {
		return fail(stderr, "send", errNotSet("QUEUE_URL", "queue-url"))
	}
	if *seed == 0 {
		*seed = uint64(rand.Uint32()) + 1
	}
	rng := rand.New(rand.NewPCG(*seed, 0x1de))

	var traffic []example.Message
	if *fromFile != "" {
		if traffic, err = readMessages(ex, *fromFile, *skipInvalid, stderr); err != nil {
			return fail(stderr, "send", err)
		}
	} else {
		traffic = gen.Traffic(rng, strconv.FormatUint(*seed, 10), *count, *groups)
	}

	cfg, err := LoadAWSEnv(ctx, env)
	if err != nil {
		return fail(stderr, "send", err)
	}
	// What the messages need in the example's tables first (the inventory's stock): for
	// generated traffic unless --prepare=false; for a file's messages only with --prepare,
	// since they may be meant to meet the tables as they are.
	doPrepare := *prepare
	if *fromFile != "" {
		doPrepare = false
		flags.Visit(func(f *flag.Flag) {
			if f.Name == "prepare" {
				doPrepare = *prepare
			}
		})
	}
	// The queue first: a missing one stops the command before anything is written.
	api := sqs.NewFromConfig(cfg)
	fifo, err := isFIFO(ctx, api, url)
	if err != nil {
		return fail(stderr, "send", err)
	}
	if doPrepare {
		if err := example.Prepare(ctx, ex, dynamodb.NewFromConfig(cfg), example.Lookup(env), traffic); err != nil {
			return fail(stderr, "send", fmt.Errorf("prepare the %s example's tables: %w", ex.Name(), err))
		}
	}
	msgs, err := messages(traffic, copies{same: *duplicates, late: *late, run: strconv.FormatUint(*seed, 10)}, fifo, rng)
	if err != nil {
		return fail(stderr, "send", err)
	}

	start := time.Now()
	s := &sender{api: api, queueURL: url, concurrency: *concurrency, retryDelay: 100 * time.Millisecond}
	stop := startProgress(stderr, time.Second, func() string {
		n := s.sent.Load()
		return fmt.Sprintf("send: %d/%d sent (%.0f msg/s)", n, len(msgs), float64(n)/time.Since(start).Seconds())
	})
	failures, sendErr := s.send(ctx, msgs)
	stop()
	elapsed := time.Since(start)

	if *record != "" {
		if err := writeRecord(*record, msgs); err != nil {
			return fail(stderr, "send", err)
		}
	}
	if sendErr != nil {
		return fail(stderr, "send", fmt.Errorf("%w (sent %d of %d messages before)", queueError(url, sendErr), s.sent.Load(), len(msgs)))
	}
	dups := len(msgs) - len(traffic)
	rate := float64(s.sent.Load()) / max(elapsed.Seconds(), 1e-3)
	fmt.Fprintf(stdout, "sent %d of %d messages (%d %s messages, %d duplicates) in %d batches to %s: %d failed, %s (%.0f msg/s), seed %d\n",
		s.sent.Load(), len(msgs), len(traffic), ex.Name(), dups, s.batches.Load(), url, len(failures), elapsed.Round(time.Millisecond), rate, *seed)
	if len(failures) > 0 {
		for i, f := range failures {
			if i == maxShownErrors {
				fmt.Fprintf(stderr, "idemctl send: ... and %d more failures\n", len(failures)-i)
				break
			}
			fmt.Fprintf(stderr, "idemctl send: message %s (key %s): %s\n", f.msg.msg.ID, f.msg.key, f.reason)
		}
		return fail(stderr, "send", fmt.Errorf("%d of %d messages were not sent (entries retried %d times; sender faults not retried)", len(failures), len(msgs), maxEntryRetries))
	}
	return exitOK
}

// readMessages reads one message body per line, validated as the consumer validates
// (the example's Decode). Blank lines are skipped. Invalid lines make it return an error
// naming them, unless skip is set: then they are reported on warn and left out.
func readMessages(ex example.Example, path string, skip bool, warn io.Writer) ([]example.Message, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck // read only: Close cannot lose data
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	var (
		out     []example.Message
		invalid []string
		line    int
	)
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		p, err := ex.Decode(b)
		if err != nil {
			invalid = append(invalid, fmt.Sprintf("%s:%d: %v", path, line, err))
			continue
		}
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: line %d: %w", path, line+1, err)
	}
	if len(invalid) > 0 {
		shown := invalid[:min(len(invalid), maxShownErrors)]
		more := ""
		if len(invalid) > len(shown) {
			more = fmt.Sprintf("\n  ... and %d more", len(invalid)-len(shown))
		}
		if !skip {
			return nil, fmt.Errorf("%d invalid lines, nothing sent (--skip-invalid sends the valid ones):\n  %s%s",
				len(invalid), strings.Join(shown, "\n  "), more)
		}
		fmt.Fprintf(warn, "idemctl send: skipping %d invalid lines:\n  %s%s\n", len(invalid), strings.Join(shown, "\n  "), more)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no messages to send", path)
	}
	return out, nil
}

// outgoing is one message to send: the example's, or a duplicate of one.
type outgoing struct {
	msg   example.Message
	dup   bool
	body  string
	key   string
	group string // FIFO only
	dedup string // FIFO only
	sent  atomic.Bool
}

// copies says which messages are sent twice: a fraction same of them with the same
// deduplication id, a fraction late with a new one, made of run.
type copies struct {
	same, late float64
	run        string
}

// messages builds the messages, then the duplicates: round(c.same*n) of them, chosen at
// random, once more, identical (same deduplication id: SQS drops them within its
// 5-minute window; the idempotency record catches them after it), then round(c.late*n),
// chosen at random, once more with a new deduplication id (as after the window: SQS
// delivers them, and the idempotency record answers them).
func messages(traffic []example.Message, c copies, fifo bool, rng *rand.Rand) ([]*outgoing, error) {
	out := make([]*outgoing, 0, len(traffic))
	for _, p := range traffic {
		if !json.Valid([]byte(p.Body)) {
			return nil, fmt.Errorf("message %s: the body is not JSON", p.ID)
		}
		m := &outgoing{msg: p, body: p.Body, key: p.Key}
		if fifo {
			// Both must be 1-128 printable ASCII characters; DeduplicationID hashes
			// anything else, and always the same way.
			m.group = outbox.DeduplicationID(p.Group)
			m.dedup = outbox.DeduplicationID(m.key)
		}
		out = append(out, m)
	}
	originals := out
	n := int(math.Round(c.same * float64(len(traffic))))
	for _, i := range rng.Perm(len(traffic))[:n] {
		o := originals[i]
		out = append(out, &outgoing{msg: o.msg, dup: true, body: o.body, key: o.key, group: o.group, dedup: o.dedup})
	}
	n = int(math.Round(c.late * float64(len(traffic))))
	for _, i := range rng.Perm(len(traffic))[:n] {
		o := originals[i]
		d := &outgoing{msg: o.msg, dup: true, body: o.body, key: o.key, group: o.group}
		if fifo {
			d.dedup = outbox.DeduplicationID("again-" + c.run + "-" + o.key)
		}
		out = append(out, d)
	}
	return out, nil
}

// batchSender is the SQS call send makes; *sqs.Client satisfies it.
type batchSender interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// sender sends messages in batches of 10 with bounded concurrency.
type sender struct {
	api         batchSender
	queueURL    string
	concurrency int
	retryDelay  time.Duration // before the first retry of failed entries; doubles

	sent, batches atomic.Int64
}

// entryFailure is a message SendMessageBatch did not accept after the retries.
type entryFailure struct {
	msg    *outgoing
	reason string
}

// send sends msgs. Messages of one FIFO group go through one worker, in order, so the
// queue receives each group in the order given. Entries the batch call reports failed
// are retried up to maxEntryRetries times (sender faults, which cannot succeed, are
// not); those that still fail are returned. An error of a whole call (after the SDK's
// own retries) stops everything and is returned.
func (s *sender) send(ctx context.Context, msgs []*outgoing) ([]entryFailure, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lanes := make([][]*outgoing, s.concurrency)
	for i, m := range msgs {
		lane := i % s.concurrency
		if m.group != "" {
			h := fnv.New32a()
			h.Write([]byte(m.group))
			lane = int(h.Sum32() % uint32(s.concurrency))
		}
		lanes[lane] = append(lanes[lane], m)
	}
	var (
		mu       sync.Mutex
		failures []entryFailure
		wg       sync.WaitGroup
	)
	for _, lane := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < len(lane) && ctx.Err() == nil; i += maxBatch {
				failed, err := s.sendBatch(ctx, lane[i:min(i+maxBatch, len(lane))])
				if err != nil {
					cancel(err)
					return
				}
				mu.Lock()
				failures = append(failures, failed...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return failures, err
	}
	return failures, nil
}

func (s *sender) sendBatch(ctx context.Context, batch []*outgoing) ([]entryFailure, error) {
	var failures []entryFailure
	pending := batch
	delay := s.retryDelay
	for attempt := 0; len(pending) > 0; attempt++ {
		entries := make([]types.SendMessageBatchRequestEntry, len(pending))
		for i, m := range pending {
			entries[i] = types.SendMessageBatchRequestEntry{
				Id:          aws.String(strconv.Itoa(i)),
				MessageBody: aws.String(m.body),
				MessageAttributes: map[string]types.MessageAttributeValue{
					idem.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(m.key)},
				},
			}
			if m.group != "" {
				entries[i].MessageGroupId = aws.String(m.group)
				entries[i].MessageDeduplicationId = aws.String(m.dedup)
			}
		}
		s.batches.Add(1)
		out, err := s.api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(s.queueURL), Entries: entries})
		if err != nil {
			return nil, err
		}
		for _, ok := range out.Successful {
			if i, err := strconv.Atoi(aws.ToString(ok.Id)); err == nil && i >= 0 && i < len(pending) {
				pending[i].sent.Store(true)
				s.sent.Add(1)
			}
		}
		var retry []*outgoing
		for _, f := range out.Failed {
			i, err := strconv.Atoi(aws.ToString(f.Id))
			if err != nil || i < 0 || i >= len(pending) {
				continue
			}
			if f.SenderFault || attempt == maxEntryRetries {
				failures = append(failures, entryFailure{msg: pending[i], reason: aws.ToString(f.Code) + ": " + aws.ToString(f.Message)})
				continue
			}
			retry = append(retry, pending[i])
		}
		pending = retry
		if len(pending) > 0 {
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-time.After(delay):
			}
			delay *= 2
		}
	}
	return failures, nil
}

// writeRecord writes the body of each message of which at least one copy was sent, once,
// as a JSON line: what `idemctl check` gives the example's Expect.
func writeRecord(path string, msgs []*outgoing) error {
	sent := map[string]bool{}
	for _, m := range msgs {
		if m.sent.Load() {
			sent[m.msg.ID] = true
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, m := range msgs {
		if m.dup || !sent[m.msg.ID] {
			continue
		}
		delete(sent, m.msg.ID) // once, even if the file listed it twice
		if err := enc.Encode(json.RawMessage(m.body)); err != nil {
			return err
		}
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	return nil
}

// queueAttributes is the SQS call isFIFO makes; *sqs.Client satisfies it.
type queueAttributes interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// isFIFO reads whether the queue is FIFO, which also checks that it exists.
func isFIFO(ctx context.Context, api queueAttributes, queueURL string) (bool, error) {
	fifo, _, err := queueFacts(ctx, api, queueURL)
	return fifo, err
}

// queueFacts reads whether the queue is FIFO, and its ARN.
func queueFacts(ctx context.Context, api queueAttributes, queueURL string) (fifo bool, arn string, err error) {
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(queueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameFifoQueue, types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return false, "", queueError(queueURL, err)
	}
	return out.Attributes["FifoQueue"] == "true", out.Attributes["QueueArn"], nil
}
