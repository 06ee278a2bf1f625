package sqsbatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/emf"
	"github.com/idemgo/sqs-lambda-consumer/idem/internal/handoff"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"go.opentelemetry.io/otel/trace"
)

// RecordFunc handles one SQS record. nil is success; an error for which IsPermanent is
// true is dead-lettered; any other error makes the record a batch item failure, so SQS
// delivers it again later.
type RecordFunc func(ctx context.Context, msg events.SQSMessage) error

// DeadLetterer moves a message that failed permanently out of the way, so that it is
// kept (with its reason) without being retried or blocking its FIFO group.
// SQSDeadLetter implements it.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, msg events.SQSMessage, cause error) error
}

// BatchConfig configures a BatchProcessor. Handle is required; zero values of the other
// fields take the defaults documented on them.
type BatchConfig struct {
	// Handle handles one record (required). It must be safe for concurrent use.
	Handle RecordFunc
	// DeadLetter receives records whose error is permanent. When it succeeds the record
	// is acknowledged. When nil, permanent errors are reported as batch item failures
	// like any other, and the queue's redrive policy eventually moves them.
	DeadLetter DeadLetterer
	// Concurrency is how many FIFO groups (or, on a standard queue, records) run at
	// once (default 10).
	Concurrency int
	// DeadlineMargin: no record starts when the context deadline is closer than this
	// (default 2s), so a record never starts without the time to finish and record its
	// outcome.
	DeadlineMargin time.Duration
	// Logger receives one line per record (default: discard).
	Logger *slog.Logger
	// Metrics counts records by outcome (optional). The processor does not flush it: the
	// caller flushes once per invocation, after Process.
	Metrics *emf.Metrics
	// Keys name a record's FIFO group in its log line by its keyed hash, group_hash
	// (Keys.LogHash): a group is often a business id (the ledger's account). Without them
	// the group is left out.
	Keys *sqsmsg.Keys
	// Outbox sends the outbound messages that the records' handlers committed (the
	// *Client whose middleware Handle runs). With it, the messages of the whole batch go
	// out together once every record has run, with SendMessageBatch, and a record is
	// acknowledged only once its messages were sent. Without it, the middleware sends
	// each record's messages as soon as its commit succeeded.
	Outbox Deliverer
	// Tracer, when set, records a span per record (SpanProcess) in the trace its message
	// carries, linked to the invocation's span in the context Process gets; nil records
	// nothing.
	Tracer trace.TracerProvider
}

// Deliverer sends committed outbound messages; *Client implements it.
type Deliverer interface {
	Deliver(ctx context.Context, pendings []*outbox.Pending) []error
}

// BatchProcessor runs the records of an SQS event through a RecordFunc and returns a
// partial batch response (the function's event source mapping must enable
// ReportBatchItemFailures). It is safe for concurrent use.
//
// Records with the system attribute MessageGroupId (FIFO queues) run in event order
// within their group, one at a time; the first failure in a group stops it, and the
// group's remaining records are reported failed without running, so SQS redelivers
// them in order. Different groups, and records without a group (standard queues), run
// concurrently up to Concurrency at once.
type BatchProcessor struct {
	handle      RecordFunc
	deadLetter  DeadLetterer
	concurrency int
	margin      time.Duration
	log         *slog.Logger
	metrics     *emf.Metrics
	outbox      Deliverer
	tr          telemetry.Tracer
	keys        *sqsmsg.Keys
}

// NewBatchProcessor validates cfg and returns a BatchProcessor.
func NewBatchProcessor(cfg BatchConfig) (*BatchProcessor, error) {
	if cfg.Handle == nil {
		return nil, errors.New("idem: BatchConfig.Handle is nil")
	}
	if cfg.Concurrency < 0 {
		return nil, fmt.Errorf("idem: BatchConfig.Concurrency must be at least 1, got %d", cfg.Concurrency)
	}
	if cfg.DeadlineMargin < 0 {
		return nil, fmt.Errorf("idem: BatchConfig.DeadlineMargin is negative (%s)", cfg.DeadlineMargin)
	}
	p := &BatchProcessor{
		handle: cfg.Handle, deadLetter: cfg.DeadLetter, concurrency: cfg.Concurrency,
		margin: cfg.DeadlineMargin, log: cfg.Logger, metrics: cfg.Metrics, outbox: cfg.Outbox, tr: telemetry.NewTracer(cfg.Tracer),
		keys: cfg.Keys,
	}
	if p.concurrency == 0 {
		p.concurrency = 10
	}
	if p.margin == 0 {
		p.margin = 2 * time.Second
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p, nil
}

// outcome is what became of one record.
type outcome int

const (
	outcomeOK outcome = iota
	outcomeRetry
	outcomeDeadLettered
	outcomeSkippedGroup
	outcomeSkippedDeadline
	outcomeInvalid
)

func (o outcome) String() string {
	switch o {
	case outcomeOK:
		return "ok"
	case outcomeRetry:
		return "retry"
	case outcomeDeadLettered:
		return "dead_lettered"
	case outcomeSkippedGroup:
		return "skipped_after_group_failure"
	case outcomeSkippedDeadline:
		return "skipped_deadline"
	default:
		return "invalid_record"
	}
}

// failed reports whether the record goes back to SQS.
func (o outcome) failed() bool { return o != outcomeOK && o != outcomeDeadLettered }

// Process runs the records of ev and returns the ids of the records to redeliver, in
// the order of the records in ev; an empty list means every record was handled
// (completed, or dead-lettered). A record's failure never fails the invocation.
//
// Process returns a non-nil error only for a malformed event: records without a
// messageId. Such a record cannot be acknowledged or reported on its own, so it is not
// run, it counts as a failure of its FIFO group, the other records are processed, and
// the response still lists their failures; the error makes Lambda retry the whole batch
// (records that completed are then replayed as duplicates, not run again).
//
// When ctx is done, or its deadline is closer than DeadlineMargin, records that have
// not started are reported as failures without running; running records finish.
func (p *BatchProcessor) Process(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	outcomes := make([]outcome, len(ev.Records))
	var slots []pendingSlot
	if p.outbox != nil {
		slots = make([]pendingSlot, len(ev.Records))
		ctx = handoff.WithBatch(ctx)
	}
	sem := make(chan struct{}, p.concurrency)
	var wg sync.WaitGroup
	units := plan(ev.Records)
	for i, unit := range units {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			// Nothing can start any more: report every unit that has not started.
			for _, u := range units[i:] {
				p.skip(ctx, ev.Records, u, outcomes, outcomeSkippedDeadline, p.lateErr(ctx))
			}
			wg.Wait()
			p.flush(ctx, ev.Records, units, outcomes, slots)
			return p.response(ev.Records, outcomes)
		}
		wg.Go(func() {
			defer func() { <-sem }()
			p.runUnit(ctx, ev.Records, unit, outcomes, slots)
		})
	}
	wg.Wait()
	p.flush(ctx, ev.Records, units, outcomes, slots)
	return p.response(ev.Records, outcomes)
}

// flush sends the batch's outbound messages (see send), then writes the line of every
// record that ran, with its final outcome.
func (p *BatchProcessor) flush(ctx context.Context, recs []events.SQSMessage, units [][]int, outcomes []outcome, slots []pendingSlot) {
	causes := p.send(ctx, recs, units, outcomes, slots)
	for i := range slots {
		if slots[i].log != nil {
			slots[i].log(outcomes[i], causes[i])
		}
	}
}

// send sends the outbound messages the batch's records committed, in one go, and turns
// each record whose messages were not sent into a failure, so SQS delivers it again and
// the redelivery sends what is pending. In a FIFO group, the records after such a record
// are failed too, so the group's order holds. It returns why each record it failed was.
func (p *BatchProcessor) send(ctx context.Context, recs []events.SQSMessage, units [][]int, outcomes []outcome, slots []pendingSlot) map[int]error {
	causes := map[int]error{}
	var idx []int
	var pendings []*outbox.Pending
	for i := range slots {
		if slots[i].p != nil && outcomes[i] == outcomeOK {
			idx = append(idx, i)
			pendings = append(pendings, slots[i].p)
		}
	}
	if len(pendings) == 0 {
		return causes
	}
	errs := p.outbox.Deliver(ctx, pendings)
	failed := map[int]error{}
	for n, err := range errs {
		p.metrics.Add(emf.MetricOutboundDeadLettered, len(pendings[n].Dead))
		if err != nil {
			failed[idx[n]] = err
			p.metrics.Add(emf.MetricOutboundUnsent, 1)
		} else {
			p.metrics.Add(emf.MetricOutboundSent, len(pendings[n].Messages)-len(pendings[n].Dead))
		}
	}
	if len(failed) == 0 {
		return causes
	}
	for _, unit := range units {
		group := false
		for _, i := range unit {
			switch {
			case failed[i] != nil:
				outcomes[i] = outcomeRetry
				causes[i] = fmt.Errorf("idem: not acknowledged: %w", failed[i])
				group = true
				p.metrics.Add(emf.MetricRetry, 1)
			case group && outcomes[i] == outcomeOK && recs[i].Attributes["MessageGroupId"] != "":
				outcomes[i] = outcomeSkippedGroup
				p.metrics.Add(emf.MetricSkipped, 1)
				// The group is not named: its line carries its keyed hash (group_hash).
				causes[i] = errors.New("idem: not acknowledged: the outbound messages of an earlier record of its group were not sent")
			}
		}
	}
	return causes
}

// plan splits the records into units that run one after another: one unit per FIFO
// group (its records in event order), one unit per record without a group.
func plan(recs []events.SQSMessage) [][]int {
	var units [][]int
	group := map[string]int{} // group id -> index in units
	for i, r := range recs {
		g := r.Attributes["MessageGroupId"]
		if g == "" {
			units = append(units, []int{i})
			continue
		}
		if u, ok := group[g]; ok {
			units[u] = append(units[u], i)
			continue
		}
		group[g] = len(units)
		units = append(units, []int{i})
	}
	return units
}

// runUnit runs a unit's records in order until one fails; the rest are skipped.
// Each index of outcomes is written by exactly one unit.
func (p *BatchProcessor) runUnit(ctx context.Context, recs []events.SQSMessage, unit []int, outcomes []outcome, slots []pendingSlot) {
	for n, i := range unit {
		msg := recs[i]
		if err := p.lateErr(ctx); err != nil {
			p.skip(ctx, recs, unit[n:], outcomes, outcomeSkippedDeadline, err)
			return
		}
		if msg.MessageId == "" {
			outcomes[i] = outcomeInvalid
			p.metrics.Add(emf.MetricSkipped, 1)
			p.logRecord(ctx, msg, outcomeInvalid, 0, errors.New("idem: record has no messageId"), false)
		} else {
			rctx := handoff.WithMessage(ctx, msg)
			if slots != nil {
				rctx = handoff.WithHolder(rctx, &slots[i])
			}
			outcomes[i] = p.runRecord(rctx, msg)
		}
		if outcomes[i].failed() {
			// The group is not named: its line carries its keyed hash (group_hash).
			cause := fmt.Errorf("idem: not run: message %q earlier in its group failed", msg.MessageId)
			p.skip(ctx, recs, unit[n+1:], outcomes, outcomeSkippedGroup, cause)
			return
		}
	}
}

// lateErr returns why no record may start now, or nil.
func (p *BatchProcessor) lateErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("idem: not run: %w", err)
	}
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < p.margin {
			return fmt.Errorf("idem: not run: %s left before the invocation deadline, margin is %s", left.Round(time.Millisecond), p.margin)
		}
	}
	return nil
}

func (p *BatchProcessor) skip(ctx context.Context, recs []events.SQSMessage, idx []int, outcomes []outcome, o outcome, cause error) {
	for _, i := range idx {
		outcomes[i] = o
		p.metrics.Add(emf.MetricSkipped, 1)
		p.logRecord(ctx, recs[i], o, 0, cause, false)
	}
}

// runRecord runs one record, dead-letters it when its error is permanent, and logs it.
func (p *BatchProcessor) runRecord(ctx context.Context, msg events.SQSMessage) outcome {
	start := time.Now()
	ctx = withRecordNote(ctx) // the handler's note for this record's log line
	var span trace.Span
	if p.tr.On() {
		ctx, span = p.startRecord(ctx, msg)
	}
	err := p.call("handler", func() error { return p.handle(ctx, msg) })
	var o outcome
	permanent := err != nil && idem.IsPermanent(err)
	switch {
	case err == nil:
		o = outcomeOK
	case !permanent:
		o = outcomeRetry
		p.metrics.Add(emf.MetricRetry, 1)
	case p.deadLetter == nil:
		o = outcomeRetry
		p.metrics.Add(emf.MetricPermanentFailure, 1)
	default:
		p.metrics.Add(emf.MetricPermanentFailure, 1)
		dctx, dspan := p.startSpan(ctx, telemetry.SpanDeadLetter)
		dlErr := p.call("dead-letter", func() error { return p.deadLetter.DeadLetter(dctx, msg, err) })
		telemetry.EndSpan(dspan, dlErr)
		if dlErr != nil {
			o = outcomeRetry
			err = errors.Join(err, dlErr)
		} else {
			o = outcomeDeadLettered
			p.metrics.Add(emf.MetricDeadLettered, 1)
		}
	}
	d := time.Since(start)
	if slot, ok := handoff.HolderOf(ctx).(*pendingSlot); ok && slot != nil {
		// The batch's outbound messages go out after every record ran, and may still
		// turn this record into a failure: its one line is written then.
		slot.log = func(o outcome, extra error) {
			p.logRecord(ctx, msg, o, d, errors.Join(err, extra), permanent)
			endRecord(span, o, errors.Join(err, extra))
		}
		return o
	}
	p.logRecord(ctx, msg, o, d, err, permanent)
	endRecord(span, o, err)
	return o
}

// panicError is a recovered panic; it is not permanent, so the record is retried.
type panicError struct {
	what  string
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("idem: %s panicked: %v", e.what, e.value) }

// call runs fn and turns a panic into a panicError, so a bug in one record does not
// crash the invocation.
func (p *BatchProcessor) call(what string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{what: what, value: r, stack: debug.Stack()}
		}
	}()
	return fn()
}

// logRecord writes the one line per record: ids, receive count, outcome, duration,
// error, and what the record's handler noted on ctx (key hash, attempt), never the body.
func (p *BatchProcessor) logRecord(ctx context.Context, msg events.SQSMessage, o outcome, d time.Duration, err error, permanent bool) {
	note := recordNoteFrom(ctx)
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs, slog.String("message_id", msg.MessageId))
	if h := p.keys.LogHash(msg.Attributes["MessageGroupId"]); h != "" && msg.Attributes["MessageGroupId"] != "" {
		attrs = append(attrs, slog.String("group_hash", h))
	}
	if n, cerr := strconv.Atoi(msg.Attributes["ApproximateReceiveCount"]); cerr == nil {
		attrs = append(attrs, slog.Int("receive_count", n))
	}
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		attrs = append(attrs, slog.String("aws_request_id", lc.AwsRequestID))
	}
	level := slog.LevelInfo
	if note != nil {
		attrs = append(attrs, note.attrs...)
		level = note.level
	}
	attrs = append(attrs, slog.String("outcome", note.refine(o, permanent)),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000))
	if permanent {
		attrs = append(attrs, slog.Bool("permanent", true))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
		if o.failed() || o == outcomeDeadLettered {
			level = max(level, slog.LevelWarn)
		}
		if pe, ok := errors.AsType[*panicError](err); ok {
			level = slog.LevelError
			attrs = append(attrs, slog.String("stack", string(pe.stack)))
		}
	}
	// The record's own context may be done; the line must still be written.
	p.log.LogAttrs(context.WithoutCancel(ctx), level, "sqs record", attrs...)
}

func (p *BatchProcessor) response(recs []events.SQSMessage, outcomes []outcome) (events.SQSEventResponse, error) {
	resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
	seen := map[string]bool{}
	invalid := 0
	for i, o := range outcomes {
		id := recs[i].MessageId
		if o == outcomeInvalid || id == "" {
			invalid++
			continue
		}
		if o.failed() && !seen[id] {
			seen[id] = true
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
		}
	}
	if invalid > 0 {
		return resp, fmt.Errorf("idem: batch of %d records has %d without a messageId: they cannot be reported individually, so the whole batch must be retried", len(recs), invalid)
	}
	return resp, nil
}

// SQSDeadLetter dead-letters both a batch's records and the outbox's refused messages.
var (
	_ DeadLetterer                = (*sqsmsg.SQSDeadLetter)(nil)
	_ outbox.OutboundDeadLetterer = (*sqsmsg.SQSDeadLetter)(nil)
)

// pendingSlot holds a record's pending messages, which the middleware hands it
// (handoff.Hand), until the batch sends them at its end.
type pendingSlot struct {
	p   *outbox.Pending
	log func(o outcome, extra error) // the record's log line, written once its outcome is final
}

// Hold takes the record's pending messages.
func (s *pendingSlot) Hold(p *outbox.Pending) { s.p = p }
