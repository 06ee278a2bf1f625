package idem

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemgo/sqs-lambda-consumer/idem/internal/handoff"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
)

// handleSingle is ModeSingleTransaction: run the handler, then commit its result with
// one request whose condition on the record decides, as the acquire's does.
func (c *Client) handleSingle(ctx context.Context, req *Request, next Handler, pk, hash string, now time.Time) (Result, error) {
	var seen *persistence.Record // the record a takeover is conditioned on, when read first
	if redelivered(ctx) {
		// SQS delivers this message again: the key is likely settled already. One read of
		// the record alone answers such a duplicate as the lease mode's acquire does,
		// without running the handler and without a transaction refused item by item; and
		// when it finds an attempt to take over, the commit is conditioned on the record
		// as read, without a refused transaction first. A first delivery goes straight to
		// the handler: no second round trip.
		out, old, err := c.look(ctx, pk, hash)
		if out != nil || err != nil {
			return c.replay(ctx, out, err)
		}
		seen = old
	}
	att := &Attempt{
		c: c, number: 1, hash: hash, single: true,
		lease: persistence.Lease{Key: pk, Token: newToken(), Until: c.leaseUntil(ctx, now).Truncate(time.Millisecond), Owner: c.owner(ctx), Shard: persistence.ShardOf(pk, c.cfg.Shards)},
	}
	if seen != nil {
		att.number = seen.Attempt + 1
	}
	res, herr := c.run(ctx, next, req, att)
	if herr == nil {
		res.Messages, herr = c.prepare(req.Key, pk, res)
	}
	rec := &persistence.Record{
		Key: pk, Status: persistence.StatusCompleted, LeaseToken: att.lease.Token, LeaseUntil: att.lease.Until,
		ExpiresAt: now.Add(c.cfg.TTL), PayloadHash: hash, Attempt: 1, Owner: att.lease.Owner, CreatedAt: now, UpdatedAt: now,
		OutboxGroup: handoff.Group(ctx),
	}
	if gm, ok := errors.AsType[*guardMismatchError](herr); ok {
		completedForAnother(rec, gm.applied, herr)
		if _, err := c.putSingle(ctx, rec, nil, hash, seen); err != nil {
			return Result{}, unrecordedPut(herr, err)
		}
		return Result{}, herr
	}
	if herr != nil {
		// The handler ran before the record was read, against state that a commit of this
		// very key may already have changed (a redelivery after the commit): what the key
		// already has decides first, whatever the handler says now.
		if out, err := c.settled(ctx, pk, hash); out != nil || err != nil {
			return c.replay(ctx, out, err)
		}
		if !IsPermanent(herr) || redrivable(herr) {
			return Result{}, herr // nothing stored: the next delivery runs again
		}
		// A permanent failure is stored and replayed, as in ModeLease.
		rec.Status, rec.Error = persistence.StatusFailed, persistence.Truncate(herr.Error(), 1024)
		rec.Category, rec.Public = CategoryOf(herr), persistence.Truncate(PublicReason(herr), 1024)
		out, err := c.putSingle(ctx, rec, nil, hash, seen)
		if err != nil {
			return Result{}, unrecordedPut(herr, err)
		}
		if out != nil {
			return c.replay(ctx, out, nil)
		}
		return Result{}, herr
	}
	rec.Response, rec.Outbox, rec.Home = res.Response, res.Messages, homeOf(res)
	writes := guardWrites(res.Writes, res.Guards, hash)
	if res.Guarded {
		writes, rec.Outbox, rec.Home = nil, nil, 0
	}
	pctx, commit := c.startSpan(ctx, telemetry.SpanCommit, pk)
	out, err := c.putSingle(pctx, rec, writes, hash, seen)
	endCommit(commit, res, Result{Attempt: rec.Attempt}, err)
	var wce *persistence.WriteConditionError
	if errors.As(err, &wce) {
		guarded, applied := guardFired(wce, res.Guards)
		switch {
		case guarded && applied != "" && applied != hash:
			mismatch := guardMismatch(pk)
			completedForAnother(rec, applied, mismatch)
			if _, err := c.putSingle(ctx, rec, nil, hash, seen); err != nil {
				return Result{}, unrecordedPut(mismatch, err)
			}
			return Result{}, mismatch
		case guarded:
			rec.Outbox, rec.Home, res.Guarded = nil, 0, true
			out, err = c.putSingle(ctx, rec, nil, hash, seen)
		default:
			// Nothing is stored: the message is dead-lettered with the reason, and runs
			// again when redriven after the fix.
			if explained, ok := explain(wce, res); ok {
				return Result{}, explained
			}
			return Result{}, err
		}
	}
	if err != nil {
		if IsPermanent(err) {
			return Result{}, Permanent(err)
		}
		return Result{}, err
	}
	if out != nil { // the key was committed by another delivery: its outcome
		return c.replay(ctx, out, nil)
	}
	result := Result{Response: res.Response, Attempt: rec.Attempt, Guarded: res.Guarded}
	if len(rec.Outbox) > 0 {
		entry := cached{key: pk, response: rec.Response, payloadHash: rec.PayloadHash, expiresAt: rec.ExpiresAt.Truncate(time.Second)}
		if err := c.hand(ctx, &outbox.Pending{Key: pk, Token: rec.LeaseToken, Messages: rec.Outbox, OnSent: c.cacheOnSent(entry)}); err != nil {
			return Result{}, err
		}
		return result, nil
	}
	c.cache.put(cached{key: pk, response: rec.Response, payloadHash: rec.PayloadHash, expiresAt: rec.ExpiresAt.Truncate(time.Second)})
	return result, nil
}

// unrecordedPut is the error of a refusal or a permanent failure (refusal) whose record
// the put could not write (err). A live holder found meanwhile (ErrInProgress) and a put
// refused for good decide alone; any other failure leaves the refusal unrecorded, so
// retried, never dead-lettered, as in ModeLease (unrecordedError): the next delivery
// meets it again and records it.
func unrecordedPut(refusal, err error) error {
	if errors.Is(err, ErrInProgress) || IsPermanent(err) {
		return err
	}
	return unrecorded(refusal, err)
}

// redelivered reports whether the SQS record ctx runs for was received before
// (ApproximateReceiveCount above 1).
func redelivered(ctx context.Context) bool {
	m, _ := MessageFromContext(ctx) // without one, no attributes: a first delivery
	n, err := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	return err == nil && n > 1
}

// indexOutbox readies rec for its put: with outbound messages, it goes into the
// in-flight index (its shard), so the reaper finds the messages a crash left unsent;
// without, it stays out of the index. UpdatedAt is the commit time: the reaper sends in
// that order.
func (c *Client) indexOutbox(rec *persistence.Record) {
	rec.UpdatedAt = c.cfg.Clock()
	if len(rec.Outbox) == 0 {
		rec.Inflight, rec.OutboxGroup = "", ""
		return
	}
	rec.Inflight = persistence.ShardOf(rec.Key, c.cfg.Shards)
}

// settled reads the key's record after a handler failed and returns its stored outcome
// when it has one (a replay, with its pending messages, or the refusal it stands for);
// nil and nil when the handler's error stands: no record, a record a new attempt may
// replace, or one the read could not find. A failed read is returned: nothing can be
// decided without it.
func (c *Client) settled(ctx context.Context, pk, hash string) (*Result, error) {
	replay, _, err := c.look(ctx, pk, hash)
	return replay, err
}

// look reads the record of pk and decides as the acquire does: the outcome to replay, a
// refusal (the error), or the record an attempt takes over (nil when there is none).
func (c *Client) look(ctx context.Context, pk, hash string) (replay *Result, takeover *persistence.Record, err error) {
	now := c.cfg.Clock()
	old, err := c.cfg.Store.Get(ctx, pk, now)
	if errors.Is(err, persistence.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("idem: read %s: %w", persistence.Redact(pk), err)
	}
	replay, take, err := c.verdict(ctx, pk, hash, old, now)
	if take {
		return nil, old, nil
	}
	return replay, nil, err
}

// replay answers with the stored outcome out, sending the messages its commit left
// pending, or returns err.
func (c *Client) replay(ctx context.Context, out *Result, err error) (Result, error) {
	if err != nil {
		return Result{}, err
	}
	if err := c.hand(ctx, out.pending); err != nil {
		return Result{}, err
	}
	return *out, nil
}

// putSingle writes rec and writes on the condition that no live record exists; when one
// does, it decides as the acquire does: the record's outcome (returned), a refusal (the
// error), or a takeover, which puts rec again conditioned on the record as it was seen.
// With seen (the record as read before the handler ran), the first put is already that
// takeover.
func (c *Client) putSingle(ctx context.Context, rec *persistence.Record, writes []types.TransactWriteItem, hash string, seen *persistence.Record) (*Result, error) {
	if seen != nil {
		rec.Attempt, rec.Steps, rec.Answers = seen.Attempt+1, seen.Steps, seen.Answers
	}
	for {
		c.indexOutbox(rec)
		old, err := c.cfg.Store.Put(ctx, rec, writes, seen, c.cfg.Clock())
		if err != nil || old == nil {
			return nil, err
		}
		replay, takeover, err := c.verdict(ctx, rec.Key, hash, old, c.cfg.Clock())
		switch {
		case err != nil:
			return nil, err
		case replay != nil:
			return replay, nil
		case !takeover:
			return nil, fmt.Errorf("idem: put %s: record has unknown status %q", persistence.Redact(rec.Key), old.Status)
		case seen != nil:
			// Someone else moved the record between our two tries.
			return nil, fmt.Errorf("idem: put %s: %w (lost the takeover race)", persistence.Redact(rec.Key), ErrInProgress)
		}
		seen = old
		rec.Attempt = old.Attempt + 1
		rec.Steps, rec.Answers = old.Steps, old.Answers
	}
}

// explain returns a business rule's refusal in the handler's words (Result.Explain),
// standing alone: it is what a person reads in the dead-letter queue; with the part its
// sender may read (Result.Tell, a PublicError) when the handler gives one. ok is false
// when the handler gave neither.
func explain(wce *persistence.WriteConditionError, res Result) (error, bool) {
	if wce.Index < 0 || wce.Index >= len(res.Writes) {
		return nil, false
	}
	var item map[string]types.AttributeValue
	if len(wce.Failed) > 0 {
		item = wce.Failed[0].Item
	}
	var err error = wce
	explained := false
	if res.Explain != nil {
		if reason := res.Explain(wce.Index, item); reason != "" {
			e := *wce
			e.Reason, e.Explained = reason, true
			err, explained = &e, true
		}
	}
	if res.Tell != nil {
		if public := res.Tell(wce.Index, item); public != "" {
			return Public(err, public), true
		}
	}
	return err, explained
}
