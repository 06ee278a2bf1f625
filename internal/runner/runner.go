// Package runner plays Lambda's SQS event source mapping on a local machine: it
// long-polls a queue, builds events.SQSEvent exactly as Lambda does, invokes the
// consumer's handler with a deadline and a Lambda context, deletes the records that
// succeeded and leaves the batch item failures to the visibility timeout. It also runs
// the reaper on its schedule. `idemctl run` and the demo use it.
package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/internal/lambdaenv"
	"github.com/idemgo/sqs-lambda-consumer/internal/syncw"
)

// SQSAPI is the part of the SQS client the runner uses.
type SQSAPI interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// Handler is the consumer's Lambda handler.
type Handler func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// Config configures Run. SQS, QueueURL and NewHandler are required.
type Config struct {
	SQS      SQSAPI
	QueueURL string
	Region   string // for the records' awsRegion (default us-east-1)
	// NewHandler builds the handler of one consumer instance, as a Lambda container's
	// init does; each instance has its own (warm) state.
	NewHandler func(instance int) (Handler, error)
	// Consumers is the number of concurrent pollers, like Lambda instances (default 1).
	Consumers int
	// BatchSize is the most records per invocation, 1 to 10 (default 10).
	BatchSize int
	// VisibilityTimeout overrides the queue's for received messages (0: the queue's).
	VisibilityTimeout time.Duration
	// FunctionTimeout is each invocation's deadline (default 30s, the template's).
	FunctionTimeout time.Duration
	// WaitTime is the long-poll wait of each receive (default 2s).
	WaitTime time.Duration
	// RetryAfter, when set, makes failed records visible again after this long, doubled
	// with each earlier receive of the record (capped by VisibilityTimeout), instead of
	// after the visibility timeout: a local shortcut, Lambda does not do it.
	RetryAfter time.Duration
	// Reap runs the reaper once; it is called every ReapEvery (both or neither).
	Reap      func(ctx context.Context) (reaper.SweepResult, error)
	ReapEvery time.Duration
	// UntilIdle stops the run once the queue has had no visible and no in-flight
	// messages for this long (0: run until ctx ends).
	UntilIdle time.Duration
	// Progress receives a status line every ProgressEvery (default 2s); nil: none.
	Progress      io.Writer
	ProgressEvery time.Duration
	// FunctionARN names the function in the Lambda context.
	FunctionARN string
	// OnReceive, when set, is called with the id of every record received.
	OnReceive func(messageID string)
}

// Stats counts what a run did.
type Stats struct {
	Invocations  int64 // handler calls
	InvokeErrors int64 // handler calls that returned an error (whole batch retried)
	Received     int64 // records received, redeliveries included
	Succeeded    int64 // records deleted after success
	Failed       int64 // records reported as batch item failures (left for redelivery)
	DeleteErrors int64 // successes whose delete failed (they will be redelivered)
	Sweeps       int64
	Reaped       int64
	SweepErrors  int64
	Distinct     int64 // distinct message ids received
	Timeouts     int64 // invocations past their deadline (whole batch failed)
	// MaxConcurrent is the most invocations that ran at once: at most Consumers.
	MaxConcurrent int64
	// GroupOverlaps counts FIFO message groups received while an invocation of another
	// consumer still held the same group: SQS FIFO never allows it, so it stays 0.
	GroupOverlaps int64
}

// Run polls until ctx ends or the queue is idle for UntilIdle. On ctx's end it stops
// receiving and lets running invocations finish and delete their successes (Ctrl-C
// stops cleanly). When the queue went idle, the receives already waiting are not cut
// short: what they get is handled before the pollers stop. (A long poll cut short on the
// client side goes on in the queue, and would hide what it gets, sent meanwhile, for
// the visibility timeout.) The error is nil unless the configuration is wrong or the
// queue cannot be polled at all.
func Run(ctx context.Context, cfg Config) (Stats, error) {
	if err := cfg.defaults(); err != nil {
		return Stats{}, err
	}
	if cfg.Progress != nil {
		cfg.Progress = syncw.New(cfg.Progress)
	}
	arn, err := queueARN(ctx, cfg.SQS, cfg.QueueURL)
	if err != nil {
		return Stats{}, err
	}
	handlers := make([]Handler, cfg.Consumers)
	for i := range handlers {
		if handlers[i], err = cfg.NewHandler(i); err != nil {
			return Stats{}, fmt.Errorf("runner: init consumer %d: %w", i, err)
		}
	}
	r := &run{cfg: cfg, arn: arn, seen: map[string]bool{}, groups: map[string]bool{}, idle: make(chan struct{})}
	ctx, stop := context.WithCancel(ctx)
	defer stop()

	var wg sync.WaitGroup
	errs := make(chan error, cfg.Consumers)
	for _, h := range handlers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.poll(ctx, h); err != nil {
				errs <- err
				stop()
			}
		}()
	}
	var bg sync.WaitGroup
	if cfg.Reap != nil {
		bg.Add(1)
		go func() { defer bg.Done(); r.reapLoop(ctx) }()
	}
	if cfg.UntilIdle > 0 || cfg.Progress != nil {
		bg.Add(1)
		go func() { defer bg.Done(); r.watch(ctx) }()
	}
	wg.Wait()
	stop()
	bg.Wait()
	if ctx.Err() == nil {
		// Stopped idle: every receive returned, but one the SDK retried (moto resets a
		// kept-alive connection now and then under load) may have left its first
		// attempt waiting in the queue, which would take a message sent after the run.
		// That attempt ends WaitTime after the call began.
		time.Sleep(time.Until(time.Unix(0, r.lastReceive.Load()).Add(r.cfg.WaitTime)))
	}
	r.report("done")
	close(errs)
	return r.stats(), errors.Join(collect(errs)...)
}

func collect(ch <-chan error) []error {
	var out []error
	for e := range ch {
		out = append(out, e)
	}
	return out
}

func (c *Config) defaults() error {
	switch {
	case c.SQS == nil:
		return errors.New("runner: SQS client is nil")
	case c.QueueURL == "":
		return errors.New("runner: queue URL is empty")
	case c.NewHandler == nil:
		return errors.New("runner: NewHandler is nil")
	case c.BatchSize < 0 || c.BatchSize > 10:
		return fmt.Errorf("runner: batch size %d is not between 1 and 10", c.BatchSize)
	case c.Consumers < 0 || c.Consumers > 100:
		return fmt.Errorf("runner: %d consumers is not between 1 and 100", c.Consumers)
	case (c.Reap == nil) != (c.ReapEvery <= 0):
		return errors.New("runner: Reap and ReapEvery go together")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.Consumers == 0 {
		c.Consumers = 1
	}
	if c.BatchSize == 0 {
		c.BatchSize = 10
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	def(&c.FunctionTimeout, 30*time.Second)
	def(&c.WaitTime, 2*time.Second)
	def(&c.ProgressEvery, 2*time.Second)
	if c.FunctionARN == "" {
		c.FunctionARN = "arn:aws:lambda:" + c.Region + ":000000000000:function:local-consumer"
	}
	return nil
}

func queueARN(ctx context.Context, api SQSAPI, url string) (string, error) {
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", fmt.Errorf("runner: queue %s: %w", url, err)
	}
	return out.Attributes[string(sqstypes.QueueAttributeNameQueueArn)], nil
}

type run struct {
	cfg Config
	arn string

	invocations, invokeErrors, received, succeeded, failed, deleteErrors atomic.Int64
	sweeps, reaped, sweepErrors                                          atomic.Int64
	timeouts, running, maxRunning, overlaps                              atomic.Int64
	lastReceive                                                          atomic.Int64 // when the latest receive call began (unix ns)
	mu                                                                   sync.Mutex
	seen                                                                 map[string]bool
	groups                                                               map[string]bool // FIFO groups of running invocations
	idle                                                                 chan struct{}   // closed when the queue has been idle for UntilIdle
}

func (r *run) stats() Stats {
	r.mu.Lock()
	distinct := int64(len(r.seen))
	r.mu.Unlock()
	return Stats{
		Invocations: r.invocations.Load(), InvokeErrors: r.invokeErrors.Load(), Received: r.received.Load(),
		Succeeded: r.succeeded.Load(), Failed: r.failed.Load(), DeleteErrors: r.deleteErrors.Load(),
		Sweeps: r.sweeps.Load(), Reaped: r.reaped.Load(), SweepErrors: r.sweepErrors.Load(), Distinct: distinct,
		Timeouts: r.timeouts.Load(), MaxConcurrent: r.maxRunning.Load(), GroupOverlaps: r.overlaps.Load(),
	}
}

// poll is one consumer instance: receive, invoke, delete, until ctx ends.
func (r *run) poll(ctx context.Context, h Handler) error {
	failures := 0
	for ctx.Err() == nil {
		select {
		case <-r.idle:
			return nil
		default:
		}
		in := &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(r.cfg.QueueURL),
			MaxNumberOfMessages:         int32(r.cfg.BatchSize),
			WaitTimeSeconds:             int32(r.cfg.WaitTime / time.Second),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		}
		if r.cfg.VisibilityTimeout > 0 {
			in.VisibilityTimeout = int32(r.cfg.VisibilityTimeout / time.Second)
		}
		msgs, err := r.receive(ctx, in)
		switch {
		case ctx.Err() != nil:
			return nil //nolint:nilerr // stopping: a receive cut short by the stop is not an error
		case err != nil:
			if failures++; failures >= 5 {
				return fmt.Errorf("runner: receive from %s failed %d times in a row: %w", r.cfg.QueueURL, failures, err)
			}
			time.Sleep(time.Duration(failures) * 200 * time.Millisecond)
			continue
		}
		failures = 0
		if len(msgs) == 0 {
			continue
		}
		// An invocation is not cancelled by Ctrl-C: it finishes and its successes are
		// deleted, as a Lambda invocation would run to completion.
		r.invoke(context.WithoutCancel(ctx), h, msgs)
	}
	return nil
}

func (r *run) receive(ctx context.Context, in *sqs.ReceiveMessageInput) ([]sqstypes.Message, error) {
	r.lastReceive.Store(time.Now().UnixNano())
	out, err := r.cfg.SQS.ReceiveMessage(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("runner: receive: %w", err)
	}
	return out.Messages, nil
}

func (r *run) invoke(ctx context.Context, h Handler, msgs []sqstypes.Message) {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(msgs))}
	r.mu.Lock()
	for i, m := range msgs {
		ev.Records[i] = toRecord(m, r.arn, r.cfg.Region)
		r.seen[ev.Records[i].MessageId] = true
	}
	r.mu.Unlock()
	if r.cfg.OnReceive != nil {
		for _, rec := range ev.Records {
			r.cfg.OnReceive(rec.MessageId)
		}
	}
	r.received.Add(int64(len(msgs)))
	r.invocations.Add(1)
	release := r.hold(ev)

	deadline := time.Now().Add(r.cfg.FunctionTimeout)
	ictx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	ictx = lambdacontext.NewContext(ictx, &lambdacontext.LambdaContext{AwsRequestID: requestID(), InvokedFunctionArn: r.cfg.FunctionARN})
	resp, err := h(ictx, ev)
	// The invocation is over: SQS may hand its groups to another consumer as soon as
	// their records are deleted below.
	release()
	if err == nil && time.Now().After(deadline) {
		// Lambda ends an invocation at its timeout, whatever the handler would have
		// answered: the whole batch fails, nothing is deleted
		// (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html).
		err = errTimedOut
	}
	if errors.Is(err, errTimedOut) || errors.Is(err, lambdaenv.ErrTimeout) {
		r.timeouts.Add(1)
	}

	failed := map[string]bool{}
	if err != nil {
		r.invokeErrors.Add(1)
		r.logf("invocation failed, its %d records come back: %v", len(msgs), err)
		for _, rec := range ev.Records {
			failed[rec.MessageId] = true
		}
	} else {
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		// Lambda treats a failure id that is not in the batch as a failure of the whole batch.
		for id := range failed {
			if !contains(ev.Records, id) {
				for _, rec := range ev.Records {
					failed[rec.MessageId] = true
				}
				break
			}
		}
	}
	var ok, bad []sqstypes.Message
	for _, m := range msgs {
		if failed[aws.ToString(m.MessageId)] {
			bad = append(bad, m)
		} else {
			ok = append(ok, m)
		}
	}
	r.failed.Add(int64(len(bad)))
	r.delete(ctx, ok)
	if r.cfg.RetryAfter > 0 && len(bad) > 0 {
		r.retrySoon(ctx, bad)
	}
}

var errTimedOut = errors.New("runner: the handler returned after the function timeout")

// hold counts a running invocation and marks its FIFO groups as held; the returned
// func releases them.
func (r *run) hold(ev events.SQSEvent) func() {
	n := r.running.Add(1)
	for m := r.maxRunning.Load(); n > m && !r.maxRunning.CompareAndSwap(m, n); m = r.maxRunning.Load() {
	}
	var mine []string
	r.mu.Lock()
	for _, rec := range ev.Records {
		g := rec.Attributes["MessageGroupId"]
		if g == "" || slices.Contains(mine, g) {
			continue
		}
		if r.groups[g] {
			r.overlaps.Add(1)
			r.logf("FIFO group %s received while another invocation holds it", g)
			continue
		}
		r.groups[g] = true
		mine = append(mine, g)
	}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		for _, g := range mine {
			delete(r.groups, g)
		}
		r.mu.Unlock()
		r.running.Add(-1)
	}
}

func contains(recs []events.SQSMessage, id string) bool {
	for _, r := range recs {
		if r.MessageId == id {
			return true
		}
	}
	return false
}

func (r *run) delete(ctx context.Context, msgs []sqstypes.Message) {
	if len(msgs) == 0 {
		return
	}
	entries := make([]sqstypes.DeleteMessageBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
	}
	out, err := r.cfg.SQS.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(r.cfg.QueueURL), Entries: entries})
	if err != nil {
		r.deleteErrors.Add(int64(len(msgs)))
		r.logf("delete of %d messages failed (they will be redelivered): %v", len(msgs), err)
		return
	}
	r.succeeded.Add(int64(len(out.Successful)))
	r.deleteErrors.Add(int64(len(out.Failed)))
}

// retryDelay is RetryAfter doubled with every receive of the message so far, capped
// by the visibility timeout when one is set: deployed, a failed record comes back after
// the visibility timeout (minutes), long enough for a lease held elsewhere to end; a
// fixed short delay would burn maxReceiveCount on a key in progress in seconds.
func (r *run) retryDelay(m sqstypes.Message) time.Duration {
	n, _ := strconv.Atoi(m.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)])
	d := r.cfg.RetryAfter << min(max(n-1, 0), 10)
	if r.cfg.VisibilityTimeout > 0 {
		d = min(d, r.cfg.VisibilityTimeout)
	}
	return d
}

func (r *run) retrySoon(ctx context.Context, msgs []sqstypes.Message) {
	entries := make([]sqstypes.ChangeMessageVisibilityBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = sqstypes.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle,
			VisibilityTimeout: int32(max(r.retryDelay(m)/time.Second, 1)),
		}
	}
	if _, err := r.cfg.SQS.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{
		QueueUrl: aws.String(r.cfg.QueueURL), Entries: entries,
	}); err != nil {
		r.logf("change visibility of %d failed messages: %v", len(msgs), err)
	}
}

func (r *run) reapLoop(ctx context.Context) {
	Periodically(ctx, r.cfg.ReapEvery, r.cfg.FunctionTimeout, func(sctx context.Context) {
		res, err := r.cfg.Reap(sctx)
		r.sweeps.Add(1)
		r.reaped.Add(int64(res.Reaped))
		if err != nil && ctx.Err() == nil {
			r.sweepErrors.Add(1)
			r.logf("reaper sweep failed: %v", err)
		}
	})
}

// Periodically calls fn every period until ctx ends, as a scheduled rule invokes a
// function: each call under a context that ends after timeout (the function's), the
// next at the ticker's first tick after it returned.
func Periodically(ctx context.Context, every, timeout time.Duration, fn func(ctx context.Context)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			sctx, cancel := context.WithTimeout(ctx, timeout)
			fn(sctx)
			cancel()
		}
	}
}

// watch prints progress and ends the run once the queue has been idle long enough: it
// closes r.idle, and the pollers stop after their current receive.
func (r *run) watch(ctx context.Context) {
	tick := time.Second
	t := time.NewTicker(tick)
	defer t.Stop()
	var idleSince time.Time
	lastReport := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if r.cfg.Progress != nil && time.Since(lastReport) >= r.cfg.ProgressEvery {
			r.report("progress")
			lastReport = time.Now()
		}
		if r.cfg.UntilIdle <= 0 {
			continue
		}
		visible, inflight, err := Depth(ctx, r.cfg.SQS, r.cfg.QueueURL)
		if err != nil {
			continue
		}
		if visible+inflight > 0 {
			idleSince = time.Time{}
			continue
		}
		if idleSince.IsZero() {
			idleSince = time.Now()
		}
		if time.Since(idleSince) >= r.cfg.UntilIdle {
			r.logf("queue idle for %s: stopping", r.cfg.UntilIdle)
			close(r.idle)
			return
		}
	}
}

// Depth returns a queue's visible and in-flight (received, not yet deleted) messages,
// delayed ones counted as visible.
func Depth(ctx context.Context, api SQSAPI, url string) (visible, inflight int, err error) {
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	if err != nil {
		return 0, 0, fmt.Errorf("runner: queue depth of %s: %w", url, err)
	}
	n := func(name sqstypes.QueueAttributeName) int {
		v, _ := strconv.Atoi(out.Attributes[string(name)])
		return v
	}
	return n(sqstypes.QueueAttributeNameApproximateNumberOfMessages) + n(sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed),
		n(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible), nil
}

func (r *run) report(what string) {
	if r.cfg.Progress == nil {
		return
	}
	s := r.stats()
	reaper := "" // a run without a reaper does not report one
	if r.cfg.Reap != nil {
		reaper = fmt.Sprintf(", %d sweeps, %d locks reaped", s.Sweeps, s.Reaped)
	}
	fmt.Fprintf(r.cfg.Progress, "run %s: %d invocations (%d timed out), %d records received (%d distinct), %d ok, %d failed (retried), %d delete errors%s\n",
		what, s.Invocations, s.Timeouts, s.Received, s.Distinct, s.Succeeded, s.Failed, s.DeleteErrors, reaper)
}

func (r *run) logf(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "run: "+format+"\n", args...)
	}
}

func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Event builds the Lambda event of received messages, as the event source mapping does.
func Event(msgs []sqstypes.Message, queueARN, region string) events.SQSEvent {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(msgs))}
	for i, m := range msgs {
		ev.Records[i] = toRecord(m, queueARN, region)
	}
	return ev
}
