package reaper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"go.opentelemetry.io/otel/trace"
)

// ReasonLeaseExpired is the error the reaper records on a lease it fails.
const ReasonLeaseExpired = "lease expired"

// Reaper fails the leases of holders that vanished (a crashed or timed-out consumer),
// so they are visible, counted and retried cleanly. It reads only the sparse in-flight
// index, so a sweep costs in proportion to in-flight records, never to table size.
type Reaper struct {
	// Store is the record store (required).
	Store persistence.Store
	// Shards is the number of in-flight index shards; it must match Config.Shards of the
	// consumers (default 4).
	Shards int
	// Grace is how long past its end a lease must be before it is reaped (default 30s).
	Grace time.Duration
	// PageSize bounds one index query (default 100).
	PageSize int
	// Margin stops a sweep this long before the context deadline (default 2s).
	Margin time.Duration
	// Clock returns the current time (default time.Now).
	Clock func() time.Time
	// Sender sends outbound messages that a consumer committed but did not send (it
	// crashed between its commit and its send, and no delivery of the key came back).
	// When nil, such records are counted in SweepResult.Unsent and left in place.
	Sender outbox.SQSBatchSender
	// DeadLetter keeps an outbound message SQS refuses for good, as
	// Config.OutboxDeadLetter does for the consumers (optional).
	DeadLetter outbox.OutboundDeadLetterer
	// Scope, when set, limits the reaper to the records of that scope (Config.Scope):
	// records of other scopes in the same table and layout belong to other consumers,
	// whose reaper knows their lease grace, their longest lease and their queues. They
	// are counted in SweepResult.Skipped and left alone. Empty: every record of the
	// store's layout.
	Scope string
	// MaxLease is the longest lease a consumer takes, extensions included: its
	// Config.MaxLease (default 15 minutes, as there). The reaper sends the outbound
	// messages of a record committed more than Grace + MaxLease ago, and only once it
	// has sent those of every record committed before it, so that it never sends a FIFO
	// group's messages out of commit order (see Sweep).
	MaxLease time.Duration
	// Tracer, when set, records a span per sweep (SpanSweep), per lease failed (SpanReap)
	// and per record whose messages it sends (SpanSend); nil records nothing.
	Tracer trace.TracerProvider
}

// SweepResult counts what a sweep did.
type SweepResult struct {
	Scanned   int  // stale leases listed from the index
	Reaped    int  // leases failed
	Lost      int  // leases that moved on (completed, extended, taken over) after listing
	Truncated bool // the sweep stopped at its deadline margin before the end
	// MaxLate is the longest any reaped lease had been reapable (past its end plus
	// Grace) when this sweep failed it: with a sweep every P, it stays under about P
	// plus a sweep's duration when the reaper keeps up.
	MaxLate time.Duration
	// Sent counts completed records whose pending outbound messages this sweep sent.
	Sent int
	// Unsent counts completed records with pending outbound messages that this sweep
	// could not send (no Sender, or SQS refused); the next sweep tries again.
	Unsent int
	// DeadLettered counts outbound messages SQS refused for good, which this sweep
	// dead-lettered instead of sending.
	DeadLettered int
	// Skipped counts stale leases of other scopes than Reaper.Scope, left to their own
	// reaper.
	Skipped int
}

// Sweep lists every shard's leases that ended before now minus Grace and fails each
// with one update conditioned on the token and lease end it listed, so a holder that
// completes or extends at the same moment wins. It stops before the context deadline
// minus Margin and reports Truncated; a store error stops it and is returned with the
// counts so far.
func (r *Reaper) Sweep(ctx context.Context) (res SweepResult, err error) {
	if r.Store == nil {
		return res, errors.New("idem: Reaper.Store is nil")
	}
	if r.Scope != "" {
		if err := persistence.ValidScope(r.Scope); err != nil {
			return res, fmt.Errorf("idem: Reaper.Scope: %w", err)
		}
	}
	shards, grace, page, margin, clock, maxLease := r.Shards, r.Grace, r.PageSize, r.Margin, r.Clock, r.MaxLease
	if maxLease <= 0 {
		maxLease = 15 * time.Minute
	}
	if shards <= 0 {
		shards = 4
	}
	if grace <= 0 {
		grace = 30 * time.Second
	}
	if page <= 0 {
		page = 100
	}
	if margin <= 0 {
		margin = 2 * time.Second
	}
	if clock == nil {
		clock = time.Now
	}
	tr := telemetry.NewTracer(r.Tracer)
	ctx, span := startSweep(ctx, tr)
	defer func() { endSweep(span, res, err) }()
	deadline, hasDeadline := ctx.Deadline()
	late := func() bool { return hasDeadline && time.Until(deadline) < margin }
	before := clock().Add(-grace)
	// Listed records that could not be reaped moved on (completed, extended, taken
	// over), or are COMPLETED with outbound messages a crash left unsent: told apart, and
	// the messages sent, once every reap of the sweep is done, so that reaps never wait.
	//
	// They go in the order they were committed, so that a FIFO group's messages never
	// overtake each other, and only those committed before a cut that makes sure no
	// record committed earlier is missing from the listing. A record's lease ends at
	// most MaxLease after its holder took or extended it, before its commit; so every
	// record committed before now - Grace - MaxLease has a lease end before now - Grace
	// and is listed, if the sweep listed every shard to its end. A record that could
	// not be read moves the cut to before any record it could have preceded.
	var moved []persistence.StaleLease
	complete := false
	defer func() {
		cut := clock().Add(-grace - maxLease)
		var pendings []*outbox.Pending
		for _, s := range moved {
			p, err := r.pendingOf(ctx, s, clock())
			switch {
			case err != nil:
				if t := s.LeaseUntil.Add(-maxLease); t.Before(cut) {
					cut = t
				}
			case p != nil:
				pendings = append(pendings, p)
			default:
				res.Lost++
			}
		}
		if !complete {
			res.Unsent += len(pendings)
			return
		}
		slices.SortStableFunc(pendings, func(a, b *outbox.Pending) int { return a.Committed.Compare(b.Committed) })
		for i, p := range pendings {
			if !p.Committed.Before(cut) {
				res.Unsent += len(pendings) - i // the next sweeps send them
				pendings = pendings[:i]
				break
			}
		}
		for i, err := range outbox.Deliver(ctx, tr, r.Sender, r.DeadLetter, r.Store, clock, pendings) {
			res.DeadLettered += len(pendings[i].Dead)
			if err == nil {
				res.Sent++
			} else {
				res.Unsent++
			}
		}
	}()
	for shard := 0; shard < shards; shard++ {
		cursor := ""
		for {
			if late() {
				res.Truncated = true
				return res, nil
			}
			stale, next, err := r.Store.Stale(ctx, strconv.Itoa(shard), before, page, cursor)
			if err != nil {
				return res, fmt.Errorf("idem: sweep: %w", err)
			}
			if r.Scope != "" {
				own := stale[:0]
				for _, s := range stale {
					if strings.HasPrefix(s.Key, r.Scope+"#") {
						own = append(own, s)
					}
				}
				res.Skipped += len(stale) - len(own)
				stale = own
			}
			res.Scanned += len(stale)
			for _, s := range stale {
				if late() {
					res.Truncated = true
					return res, nil
				}
				now := clock()
				rctx, rspan := startReap(ctx, tr, s)
				err := r.Store.Reap(rctx, s, ReasonLeaseExpired, now)
				endReap(rspan, now.Sub(s.LeaseUntil.Add(grace)), err)
				switch {
				case err == nil:
					res.Reaped++
					res.MaxLate = max(res.MaxLate, now.Sub(s.LeaseUntil.Add(grace)))
				case errors.Is(err, persistence.ErrLeaseLost):
					moved = append(moved, s)
				default:
					return res, fmt.Errorf("idem: sweep: %w", err)
				}
			}
			if next == "" {
				break
			}
			cursor = next
		}
	}
	complete = true
	return res, nil
}

// pendingOf returns the pending outbound messages of a listed record that was not
// reapable because it is COMPLETED with an outbox still stored; nil when it is not; an
// error when it could not be read.
func (r *Reaper) pendingOf(ctx context.Context, s persistence.StaleLease, now time.Time) (*outbox.Pending, error) {
	rec, err := r.Store.Get(ctx, s.Key, now)
	if errors.Is(err, persistence.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if rec.Status != persistence.StatusCompleted || len(rec.Outbox) == 0 || rec.LeaseToken != s.Token {
		return nil, nil
	}
	return &outbox.Pending{Key: rec.Key, Token: rec.LeaseToken, Messages: rec.Outbox, Committed: rec.UpdatedAt}, nil
}

// Unlock is the operator's version of a reap: it fails the key's IN_PROGRESS record
// (retryable, with reason) whatever its lease, fenced on the token and lease end it
// read, so a holder that completes meanwhile wins. A FAILED record that is not
// retryable (a permanent failure whose stored error would be replayed) is made
// retryable, fenced on its token, so the next delivery of the key runs the handler
// again: the operator's way out when a fix cannot reach the stored error. It returns the
// record as it was.
func Unlock(ctx context.Context, s persistence.Store, pk, reason string, now time.Time) (*persistence.Record, error) {
	rec, err := s.Get(ctx, pk, now)
	if err != nil {
		return nil, fmt.Errorf("idem: unlock: %w", err)
	}
	if rec.Status == persistence.StatusFailed && !rec.Retryable {
		if err := s.Retry(ctx, pk, rec.LeaseToken, reason, now); err != nil {
			return rec, fmt.Errorf("idem: unlock: %w", err)
		}
		return rec, nil
	}
	switch rec.Status {
	case persistence.StatusInProgress:
	case persistence.StatusFailed:
		return rec, fmt.Errorf("idem: unlock %s: record is %s and already retryable: the next delivery takes it over", persistence.Redact(pk), rec.Status)
	default:
		return rec, fmt.Errorf("idem: unlock %s: record is %s, not %s or %s", persistence.Redact(pk), rec.Status, persistence.StatusInProgress, persistence.StatusFailed)
	}
	sl := persistence.StaleLease{Key: rec.Key, Token: rec.LeaseToken, LeaseUntil: rec.LeaseUntil, Owner: rec.Owner, Attempt: rec.Attempt}
	if err := s.Reap(ctx, sl, reason, now); err != nil {
		return rec, fmt.Errorf("idem: unlock: %w", err)
	}
	return rec, nil
}
