package idem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemgo/sqs-lambda-consumer/idem/internal/handoff"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"go.opentelemetry.io/otel/trace"
)

// Request is one message to handle under an idempotency key.
type Request struct {
	// Key is the idempotency key as the producer set it (not yet scoped or hashed).
	Key string
	// Payload is what the key must keep meaning: a later delivery of the key with a
	// different payload is refused with ErrPayloadMismatch.
	Payload []byte
	// Attempt is set by the middleware for the handler: the lease it runs under.
	Attempt *Attempt
}

// Result is what a handler produces.
type Result struct {
	// Response is stored and replayed to later deliveries of the key.
	Response []byte
	// Writes are business writes committed in one DynamoDB transaction with the
	// completion, or not at all (at most MaxWrites). With MemoryStore they are only
	// logged, and only guard conditions are evaluated.
	Writes []types.TransactWriteItem
	// Replayed is set by the middleware when the response comes from the store or the
	// cache and the handler did not run.
	Replayed bool
	// Attempt is set by the middleware: which acquisition of the key ran the handler
	// (1 for the first, more after takeovers). Zero when Replayed.
	Attempt int
	// Guards lists the positions in Writes of guard writes: writes whose condition
	// fails only when the effect is already in place, such as a journal entry put with
	// attribute_not_exists. They protect the effect beyond the record's TTL, when a very
	// late redelivery finds no record. The middleware adds the payload's fingerprint to
	// each guard Put (attribute idem_payload_hash). When a guard's condition fails at
	// commit, nothing of Writes is committed and no message is sent: if the guard item
	// holds the same fingerprint (or none), the middleware completes the record with
	// Response alone and returns with Guarded set; if it holds another payload's, the
	// delivery fails with ErrPayloadMismatch.
	Guards []int
	// HomeGuard says that the first guard (Writes[Guards[0]], a Put to the idempotency
	// table of a DynamoStore) is where the record lives: the record is folded into that
	// item (its attributes become the record's, at the record's key) instead of being an
	// item of its own, so the commit writes one item fewer (two write units fewer in a
	// transaction). The record then lives as long as the guard, for good: it gets no
	// TTL. The guard's item, read by the business, carries the record's attributes
	// besides its own, and its key is the record's (DynamoStore.Key). MemoryStore keeps
	// the two apart, with the same outcomes.
	//
	// The guard then lives at the record's key and no longer at its own: it guards its
	// operation only if the operation's every delivery has that key. HomeKey must name
	// the key the guard stands for (its business id, the key of its own item), and the
	// middleware refuses the fold, permanently with ErrHomeKey, when it is not the
	// request's key. A consumer of such a handler keys its messages by that business id
	// (KeyFromField), so that one operation sent under two producer keys, or with
	// another body under a third, meets its one record: replayed, or refused as a
	// payload mismatch.
	HomeGuard bool
	// HomeKey is, with HomeGuard, the idempotency key the guard stands for.
	HomeKey string
	// Guarded is set by the middleware when a guard write showed that the effect had
	// already been applied, so the record was completed without the writes and without
	// the messages. A handler may set it itself, with no Writes and no Messages, when
	// Attempt.Applied showed the same before it ran its steps.
	Guarded bool
	// Messages are outbound SQS messages, stored in the record by the completion's
	// transaction and sent only after it committed (see Message). A refused or guarded
	// commit sends nothing. They need Config.Sender.
	Messages []persistence.Message
	// Explain, when set, turns a business write's failed condition into the reason a
	// person reads in the dead-letter queue, e.g. "currency EUR does not match the
	// account's USD". It gets the write's position in Writes and the item as it was when
	// the condition failed (nil if DynamoDB did not return it); "" keeps DynamoDB's text.
	Explain func(index int, item map[string]types.AttributeValue) string
	// Tell, when set, says what of such a refusal its sender may read (an HTTP caller of
	// the ingress): a reason that names no other party's data, e.g. "the currency does
	// not match the account's", where Explain's names both currencies. It is stored in
	// the record (Record.Public) beside the error; "" tells nothing but the category.
	Tell func(index int, item map[string]types.AttributeValue) string

	pending *outbox.Pending // outbound messages to send once the caller is done with the record
}

// Handler handles a request. The idempotency middleware guarantees that, for one key,
// a handler's result is committed at most once.
type Handler interface {
	Handle(ctx context.Context, req *Request) (Result, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req *Request) (Result, error)

// Handle calls f(ctx, req).
func (f HandlerFunc) Handle(ctx context.Context, req *Request) (Result, error) { return f(ctx, req) }

// Config configures a Client. Store and Scope are required; zero values of the other
// fields take the defaults documented on them.
type Config struct {
	// Store keeps the records (DynamoStore in production, MemoryStore in unit tests).
	Store persistence.Store
	// Scope is a stable name for the keyspace, e.g. "payments". Never use the Lambda
	// function name: it changes per stack, and with it every key.
	Scope string
	// TTL is how long COMPLETED and FAILED records are kept (default 7 days; a FAILED
	// record with steps at least DLQRetention).
	TTL time.Duration
	// DLQRetention is how long the dead-letter queue keeps a message (its
	// MessageRetentionPeriod; 0: none is known). A record that holds steps (each step
	// moves its expiry), and a FAILED one whose attempt began one, is kept for the longer
	// of TTL and DLQRetention plus a day,
	// so that its message redriven from the dead-letter queue finds it and the steps it
	// recorded, and calls no outside service again whose key it may have forgotten. A
	// record's expiry never moves earlier: its completion keeps the longer one.
	// The day covers the time between the record's failure and the message's arrival in
	// the queue (the consumer dead-letters at once; SQS moves a message after its last
	// receive). A FIFO dead-letter queue counts the retention from that arrival; a
	// standard one from the message's first enqueue, which is earlier:
	// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html
	DLQRetention time.Duration
	// LeaseGrace is added to the invocation deadline to get the lease end (default 5s).
	LeaseGrace time.Duration
	// MaxLease caps a lease, deadline or not (default 15 minutes, Lambda's limit).
	MaxLease time.Duration
	// DefaultLease is the lease when the context has no deadline (default 5 minutes).
	DefaultLease time.Duration
	// Shards is the number of in-flight index shards (default 4). The reaper must use
	// the same number.
	Shards int
	// HashKeys stores every key as its SHA-256; otherwise only keys over MaxRawKeyBytes.
	HashKeys bool
	// PayloadFields, when set, limits the payload hash to these top-level JSON fields.
	PayloadFields []string
	// CacheSize bounds the in-process LRU of COMPLETED records; 0 disables it.
	CacheSize int
	// Owner names this process in records when the context carries no Lambda request id.
	Owner string
	// Clock returns the current time (default time.Now).
	Clock func() time.Time
	// Sender sends the outbound messages of Result.Messages (an *sqs.Client). A handler
	// that returns messages while it is nil fails permanently before anything commits.
	Sender outbox.SQSBatchSender
	// Mode chooses how a first delivery is committed: ModeLease (the default) or
	// ModeSingleTransaction. See Mode.
	Mode Mode
	// OutboxDeadLetter keeps an outbound message SQS refuses for good (too large for its
	// queue, say): it is dead-lettered with the reason instead of staying pending and
	// holding up the messages after it (an *SQSDeadLetter on the consumer's dead-letter
	// queue). When nil, such a message stays pending and is reported at every try.
	OutboxDeadLetter outbox.OutboundDeadLetterer
	// Tracer, when set, records a span for each decision, handler run, step, commit,
	// release and outbound send (see SpanAcquire and the other span names); nil records
	// nothing and costs nothing.
	Tracer trace.TracerProvider
}

// Mode is how the middleware runs a handler.
type Mode int

const (
	// ModeLease takes a lease with one conditional PutItem, runs the handler under it
	// (steps, extensions, fencing), and commits with a second request; the reaper fails
	// the leases of holders that vanished. Every handler qualifies.
	ModeLease Mode = iota
	// ModeSingleTransaction runs the handler first and commits its result with one
	// request: the COMPLETED record, put on the condition the acquire uses, in the same
	// TransactWriteItems as the business writes (a plain PutItem when there are none),
	// with the outbound messages stored in the record. A duplicate finds the record in
	// the condition's failure and is answered from it, as in ModeLease; two concurrent
	// deliveries both run the handler, one commits, the other is answered from its
	// record. Nothing is ever in progress, so there is no lease to reap. A record
	// committed with outbound messages goes into the in-flight index until they are
	// sent: any later delivery of the key sends them, and the reaper does when none
	// comes (a crash between the commit and the send).
	//
	// Only a handler whose effects are its Writes and Messages qualifies: it may read
	// anything, but must call nothing outside DynamoDB that has an effect, since it may
	// run more than once for one key. Attempt.Step and Attempt.Extend return
	// ErrNotInThisMode. When the handler fails, the key's record is read: a key already
	// completed is replayed (and its pending messages sent) whatever the handler says
	// now, since it ran against state its own commit may have changed. Otherwise a
	// retryable failure stores nothing (the next delivery runs again), and a permanent
	// one is stored and replayed as in ModeLease.
	ModeSingleTransaction
)

// ParseMode returns the Mode named s ("lease" or "single-transaction", as Mode.String
// writes them).
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{ModeLease, ModeSingleTransaction} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("idem: mode %q is not %q or %q", s, ModeLease, ModeSingleTransaction)
}

func (m Mode) String() string {
	switch m {
	case ModeLease:
		return "lease"
	case ModeSingleTransaction:
		return "single-transaction"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Client runs handlers idempotently. It is safe for concurrent use; create one per
// process (outside the Lambda handler) so the cache survives between invocations.
type Client struct {
	cfg   Config
	cache *cache
	tr    telemetry.Tracer
}

// New validates cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	if cfg.Store == nil {
		return nil, errors.New("idem: Config.Store is nil")
	}
	if err := persistence.ValidScope(cfg.Scope); err != nil {
		return nil, err
	}
	for name, d := range map[string]time.Duration{"TTL": cfg.TTL, "DLQRetention": cfg.DLQRetention, "LeaseGrace": cfg.LeaseGrace, "MaxLease": cfg.MaxLease, "DefaultLease": cfg.DefaultLease} {
		if d < 0 {
			return nil, fmt.Errorf("idem: Config.%s is negative (%s)", name, d)
		}
	}
	if cfg.Shards < 0 || cfg.Shards > 1000 {
		return nil, fmt.Errorf("idem: Config.Shards must be between 1 and 1000, got %d", cfg.Shards)
	}
	if cfg.CacheSize < 0 {
		return nil, fmt.Errorf("idem: Config.CacheSize is negative (%d)", cfg.CacheSize)
	}
	if cfg.Mode != ModeLease && cfg.Mode != ModeSingleTransaction {
		return nil, fmt.Errorf("idem: Config.Mode %s is not a mode", cfg.Mode)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.TTL, 7*24*time.Hour)
	def(&cfg.LeaseGrace, 5*time.Second)
	def(&cfg.MaxLease, 15*time.Minute)
	def(&cfg.DefaultLease, 5*time.Minute)
	if cfg.Shards == 0 {
		cfg.Shards = 4
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	cfg.PayloadFields = append([]string(nil), cfg.PayloadFields...)
	return &Client{cfg: cfg, cache: newCache(cfg.CacheSize), tr: telemetry.NewTracer(cfg.Tracer)}, nil
}

// Scope returns the configured scope.
func (c *Client) Scope() string { return c.cfg.Scope }

// RecordKey returns the partition key of the record for an idempotency key.
func (c *Client) RecordKey(key string) (string, error) {
	return RecordKey(c.cfg.Scope, key, c.cfg.HashKeys)
}

// Do runs h for req under the key's lease; see Middleware.
func (c *Client) Do(ctx context.Context, req *Request, h HandlerFunc) (Result, error) {
	return c.Middleware(h).Handle(ctx, req)
}

// Middleware wraps next so that, per key, it runs at most once to completion:
//   - a key seen COMPLETED returns the stored response (Replayed) without running next;
//   - a key held by a live lease returns ErrInProgress;
//   - a key whose holder's lease ran out, or that failed retryably, is taken over;
//   - a key that failed permanently returns its StoredError;
//   - a key seen with another payload returns ErrPayloadMismatch.
//
// When next succeeds its Response and Writes are committed with the completion in one
// transaction; when it fails, the record is failed (permanently if IsPermanent). Errors
// from the store are returned and next is not run.
func (c *Client) Middleware(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, req *Request) (Result, error) {
		if c.tr.On() && !trace.SpanContextFromContext(ctx).IsValid() {
			return c.handleRoot(ctx, req, next) // called outside a traced record
		}
		return c.handle(ctx, req, next)
	})
}

func (c *Client) handle(ctx context.Context, req *Request, next Handler) (Result, error) {
	pk, err := c.RecordKey(req.Key)
	if err != nil {
		return Result{}, err
	}
	hash, err := HashPayload(req.Payload, c.cfg.PayloadFields...)
	if err != nil {
		return Result{}, Permanent(fmt.Errorf("idem: hash payload of %s: %w", persistence.Redact(pk), err))
	}
	now := c.cfg.Clock()
	if e, ok := c.cache.get(pk, now); ok {
		c.traceCached(ctx, pk, e.payloadHash != hash)
		if e.payloadHash != hash {
			return Result{}, fmt.Errorf("idem: %s: %w", persistence.Redact(pk), ErrPayloadMismatch)
		}
		return Result{Response: e.response, Replayed: true}, nil
	}
	if c.cfg.Mode == ModeSingleTransaction {
		return c.handleSingle(ctx, req, next, pk, hash, now)
	}
	actx, dec := c.startDecision(ctx, pk)
	att, replay, err := c.acquire(actx, pk, hash, now)
	dec.end(att, replay, err)
	if err != nil {
		return Result{}, err
	}
	if replay != nil {
		// A completed record whose messages a crash left unsent: send them now.
		if err := c.hand(ctx, replay.pending); err != nil {
			return Result{}, err
		}
		return *replay, nil
	}
	res, herr := c.run(ctx, next, req, att)
	if herr == nil {
		res.Messages, herr = c.prepare(req.Key, pk, res)
	}
	if gm, ok := errors.AsType[*guardMismatchError](herr); ok {
		return Result{}, c.refuseMismatch(ctx, att, pk, gm.applied)
	}
	if herr != nil {
		retryable := !IsPermanent(herr) || redrivable(herr)
		if ferr := c.fail(ctx, att, failureOf(herr, retryable)); ferr != nil {
			if errors.Is(ferr, persistence.ErrLeaseLost) {
				return Result{}, errors.Join(herr, ferr)
			}
			return Result{}, unrecorded(herr, ferr)
		}
		return Result{}, herr
	}
	cctx, commit := c.startSpan(ctx, telemetry.SpanCommit, pk)
	out, err := c.complete(cctx, att, pk, hash, res)
	endCommit(commit, res, out, err)
	if err != nil {
		return Result{}, err
	}
	if err := c.hand(ctx, out.pending); err != nil {
		return Result{}, err
	}
	return out, nil
}

// prepare checks what the handler returned for the request of key before anything is
// committed.
func (c *Client) prepare(key, pk string, res Result) ([]persistence.Message, error) {
	if res.Guarded && (len(res.Writes) > 0 || len(res.Messages) > 0) {
		return nil, Permanent(errors.New("idem: a handler result with Guarded set must have no Writes and no Messages"))
	}
	if res.HomeGuard && (len(res.Guards) == 0 || res.Guards[0] < 0 || res.Guards[0] >= len(res.Writes) || res.Writes[res.Guards[0]].Put == nil) {
		return nil, Permanent(errors.New("idem: a handler result with HomeGuard set needs Guards[0] to be the position of a Put in Writes"))
	}
	if res.HomeGuard && !res.Guarded && res.HomeKey != key {
		return nil, Permanent(fmt.Errorf("%w: the message's key is %s, its guard's %s: key the messages by the guard's business id (key source %s)",
			ErrHomeKey, redactKey(key), redactKey(res.HomeKey), KeyFromField))
	}
	msgs, err := outbox.PrepareMessages(pk, res.Messages)
	if err != nil {
		return nil, err
	}
	if len(msgs) > 0 && c.cfg.Sender == nil {
		return nil, Permanent(errors.New("idem: the handler returned outbound messages but Config.Sender is nil"))
	}
	return msgs, nil
}

// acquire takes the lease, or returns the stored outcome of the key.
func (c *Client) acquire(ctx context.Context, pk, hash string, now time.Time) (*Attempt, *Result, error) {
	lease := persistence.Lease{Key: pk, Token: newToken(), Until: c.leaseUntil(ctx, now), Owner: c.owner(ctx), Shard: persistence.ShardOf(pk, c.cfg.Shards)}
	rec := &persistence.Record{
		Key: pk, Status: persistence.StatusInProgress, LeaseToken: lease.Token, LeaseUntil: lease.Until.Truncate(time.Millisecond),
		Inflight: lease.Shard, ExpiresAt: now.Add(c.cfg.TTL), PayloadHash: hash, Attempt: 1, Owner: lease.Owner,
		CreatedAt: now, UpdatedAt: now,
	}
	old, created, err := c.cfg.Store.Create(ctx, rec, now)
	if err != nil {
		return nil, nil, fmt.Errorf("idem: acquire %s: %w", persistence.Redact(pk), err)
	}
	if created {
		lease.Until = rec.LeaseUntil
		att := &Attempt{c: c, lease: lease, number: 1, hash: hash, exp: rec.ExpiresAt}
		if old != nil && old.PayloadHash == hash {
			// The key was handled before and its record expired, but DynamoDB's TTL had
			// not deleted it yet. The new attempt is a new execution (the retention is
			// over), yet the steps the old one completed are still done: a handler does
			// not repeat them. Business writes need their own guard (Result.Guards).
			att.steps = append(att.steps, old.Steps...)
			att.answers = persistence.CloneAnswers(old.Answers)
			att.expired, att.since = old, old.CreatedAt
		}
		return att, nil, nil
	}
	replay, takeover, err := c.verdict(ctx, pk, hash, old, now)
	if err != nil || replay != nil {
		return nil, replay, err
	}
	if !takeover {
		return nil, nil, fmt.Errorf("idem: acquire %s: record has unknown status %q", persistence.Redact(pk), old.Status)
	}
	lease.Until = lease.Until.Truncate(time.Millisecond)
	rec, err = c.cfg.Store.Takeover(ctx, old, lease, later(now.Add(c.cfg.TTL), old.ExpiresAt), now)
	if errors.Is(err, persistence.ErrLeaseLost) {
		// Someone else moved the record first (took it over or completed it): this
		// delivery retries later and will see their outcome.
		return nil, nil, fmt.Errorf("idem: acquire %s: %w (lost the takeover race)", persistence.Redact(pk), ErrInProgress)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("idem: acquire %s: %w", persistence.Redact(pk), err)
	}
	return &Attempt{c: c, lease: lease, number: rec.Attempt, steps: rec.Steps, answers: persistence.CloneAnswers(rec.Answers), since: rec.CreatedAt, exp: rec.ExpiresAt, hash: hash, prev: old}, nil, nil
}

// verdict decides what a delivery does about the live record old that it found under its
// key: answer with the stored outcome (replay, with the messages of the commit still to
// send when a crash left them pending), refuse (in progress elsewhere, another payload, a
// stored permanent failure), or take the record over (its holder's lease ended, or it
// failed retryably).
func (c *Client) verdict(ctx context.Context, pk, hash string, old *persistence.Record, now time.Time) (replay *Result, takeover bool, err error) {
	if old.PayloadHash != "" && old.PayloadHash != hash {
		if old.Status == persistence.StatusFailed {
			// Dead-lettered against the record: redriven once the record is gone, it would
			// run as the key's first delivery and call the record's steps again.
			if err := c.retain(ctx, pk, old, now); err != nil {
				return nil, false, err
			}
		}
		return nil, false, fmt.Errorf("idem: acquire %s: %w", persistence.Redact(pk), ErrPayloadMismatch)
	}
	switch {
	case old.Status == persistence.StatusCompleted && len(old.Outbox) > 0 &&
		(handoff.SentByBatch(ctx, old.LeaseToken) || old.OutboxGroup != "" && handoff.Group(ctx) != "" && handoff.Group(ctx) != old.OutboxGroup):
		// This very batch committed them and sends them at its end, before the record
		// that committed them is acknowledged: a duplicate in the batch is answered. So
		// is a delivery in another FIFO group than the one that committed them: sent
		// from here they could overtake the pending messages of records committed before
		// them in that group. That group's own redelivery of the key, or the reaper (in
		// commit order), sends them.
		return &Result{Response: old.Response, Replayed: true}, false, nil
	case old.Status == persistence.StatusCompleted && len(old.Outbox) > 0:
		// Committed, not known to be sent: whoever committed may have died, and nothing
		// tells how long ago. Every delivery that finds them sends them before it is
		// acknowledged (a resend carries the same keys and deduplication ids); the reaper
		// sends them when no delivery comes.
		return &Result{Response: old.Response, Replayed: true, pending: &outbox.Pending{Key: pk, Token: old.LeaseToken, Messages: old.Outbox,
			OnSent: c.cacheOnSent(cached{key: pk, response: old.Response, payloadHash: old.PayloadHash, expiresAt: old.ExpiresAt})}}, false, nil
	case old.Status == persistence.StatusCompleted:
		c.cache.put(cached{key: pk, response: old.Response, payloadHash: old.PayloadHash, expiresAt: old.ExpiresAt})
		return &Result{Response: old.Response, Replayed: true}, false, nil
	case old.Status == persistence.StatusInProgress && now.Before(old.LeaseUntil):
		return nil, false, &LeaseHeldError{Key: persistence.Redact(pk), Owner: old.Owner, Until: old.LeaseUntil}
	case old.Status == persistence.StatusFailed && !old.Retryable:
		if err := c.retain(ctx, pk, old, now); err != nil {
			return nil, false, err
		}
		return nil, false, &StoredError{Key: pk, Message: old.Error}
	case persistence.StateOf(old, now) == persistence.StateRefused && handoff.Delivery(ctx).CopyOf(old.RefusedBy):
		// A copy of the message a business rule refused, handed out before that
		// delivery (its visibility ran out) and running late: the message was
		// dead-lettered. Taking the record over would clear the refusal, and nothing
		// would be left to retry it. This copy is dead-lettered again; the record keeps
		// its refusal.
		if err := c.retain(ctx, pk, old, now); err != nil {
			return nil, false, err
		}
		return nil, false, &refusedCopyError{key: pk, stored: old.Error, by: old.RefusedBy}
	case old.Status == persistence.StatusInProgress, old.Status == persistence.StatusFailed:
		return nil, true, nil
	default:
		return nil, false, nil
	}
}

// run calls the handler; a panic becomes a retryable error so the lease is released.
func (c *Client) run(ctx context.Context, next Handler, req *Request, att *Attempt) (res Result, err error) {
	ctx, span := c.startSpan(ctx, telemetry.SpanHandler, att.lease.Key)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("idem: handler panicked: %v", p)
		}
		endHandler(span, att, err)
	}()
	r := *req
	r.Attempt = att
	return next.Handle(ctx, &r)
}

// complete commits the handler's result. It returns the result for the caller, with the
// messages to send once the caller is done when there are any.
func (c *Client) complete(ctx context.Context, att *Attempt, pk, hash string, res Result) (Result, error) {
	now := c.cfg.Clock()
	exp := later(now.Add(c.cfg.TTL), att.exp)
	out := Result{Response: res.Response, Attempt: att.number, Guarded: res.Guarded}
	writes := guardWrites(res.Writes, res.Guards, hash)
	err := c.cfg.Store.Complete(ctx, att.lease, persistence.Completion{Response: res.Response, ExpiresAt: exp, Writes: writes, Outbox: res.Messages, Group: handoff.Group(ctx), Home: homeOf(res)}, now)
	var wce *persistence.WriteConditionError
	if errors.As(err, &wce) {
		guarded, appliedHash := guardFired(wce, res.Guards)
		switch {
		case guarded && appliedHash != "" && appliedHash != hash:
			return Result{}, c.refuseMismatch(ctx, att, pk, appliedHash)
		case guarded:
			// The effect is already in place: complete the record without the writes and
			// without the messages, which went out with the effect.
			out.Guarded = true
			err = c.cfg.Store.Complete(ctx, att.lease, persistence.Completion{Response: res.Response, ExpiresAt: exp}, now)
		default:
			// The handler's reason stands alone: it is what a person reads in the
			// dead-letter queue.
			if explained, ok := explain(wce, res); ok {
				err = explained
			}
		}
	}
	if err == nil {
		if len(res.Messages) > 0 && !out.Guarded {
			out.pending = &outbox.Pending{Key: pk, Token: att.lease.Token, Messages: res.Messages,
				OnSent: c.cacheOnSent(cached{key: pk, response: res.Response, payloadHash: hash, expiresAt: exp.Truncate(time.Second)})}
		} else {
			c.cache.put(cached{key: pk, response: res.Response, payloadHash: hash, expiresAt: exp.Truncate(time.Second)})
		}
		return out, nil
	}
	if errors.Is(err, persistence.ErrLeaseLost) {
		return Result{}, err
	}
	// Nothing was committed (or, after an ambiguous network error, maybe it was: then
	// the fenced fail below finds the record COMPLETED and changes nothing). Failing the
	// record lets the next delivery take over at once instead of after the lease. A
	// business rule's refusal is failed retryable: the message is dead-lettered, and
	// redriven after a fix it runs again.
	permanent := IsPermanent(err)
	if ferr := c.fail(ctx, att, failureOf(err, !permanent || redrivable(err))); ferr != nil && !errors.Is(ferr, persistence.ErrLeaseLost) {
		return Result{}, unrecorded(err, ferr)
	}
	if _, ok := errors.AsType[*persistence.WriteConditionError](err); ok || !permanent {
		return Result{}, err // a WriteConditionError is permanent in itself
	}
	return Result{}, Permanent(err)
}

// refuseMismatch ends an attempt whose guard holds the effect of another payload under
// this key: it completes the record for that payload, with no response, so the
// payload's late duplicates are replayed and this payload is refused within the TTL as
// well, and returns ErrPayloadMismatch (permanent: the message is dead-lettered). The
// record keeps the refusal (Record.CompletedForAnother).
func (c *Client) refuseMismatch(ctx context.Context, att *Attempt, pk, applied string) error {
	now := c.cfg.Clock()
	mismatch := guardMismatch(pk)
	err := c.cfg.Store.Complete(ctx, att.lease, persistence.Completion{ExpiresAt: later(now.Add(c.cfg.TTL), att.exp), PayloadHash: applied, Refusal: failureOf(mismatch, false), RefusedHash: att.hash}, now)
	if err != nil && !errors.Is(err, persistence.ErrLeaseLost) {
		return unrecorded(mismatch, err)
	}
	if err != nil {
		return errors.Join(mismatch, err)
	}
	return mismatch
}

// guardMismatch is the error of a payload refused under pk because a guard holds the
// effect of another payload.
func guardMismatch(pk string) error {
	return fmt.Errorf("idem: %s: %w (a guard holds the effect of another payload)", persistence.Redact(pk), ErrPayloadMismatch)
}

// completedForAnother makes rec, completed for the payload whose fingerprint is applied,
// keep why the payload it ran, refused by err, was (Record.CompletedForAnother): the
// single-transaction mode's Completion.Refusal.
func completedForAnother(rec *persistence.Record, applied string, err error) {
	f := failureOf(err, false)
	rec.RefusedHash = rec.PayloadHash
	rec.PayloadHash, rec.Response, rec.Outbox, rec.Home = applied, nil, nil, 0
	rec.Error, rec.Category, rec.Public = f.Reason, f.Category, f.Public
}

// homeOf is Completion.Home for a handler's result.
func homeOf(res Result) int {
	if !res.HomeGuard || len(res.Guards) == 0 {
		return 0
	}
	return res.Guards[0] + 1
}

// guardWrites returns writes with the payload's fingerprint added to each guard Put, and
// every write set to return the item as it was when its condition fails (for guards and
// Result.Explain). The handler's values are not modified.
func guardWrites(writes []types.TransactWriteItem, guards []int, hash string) []types.TransactWriteItem {
	if len(writes) == 0 {
		return nil
	}
	allOld := func(v *types.ReturnValuesOnConditionCheckFailure) {
		if *v == "" {
			*v = types.ReturnValuesOnConditionCheckFailureAllOld
		}
	}
	out := make([]types.TransactWriteItem, len(writes))
	for i, w := range writes {
		switch {
		case w.Put != nil:
			p := *w.Put
			if slices.Contains(guards, i) {
				p.Item = maps.Clone(p.Item)
				p.Item[persistence.AttrGuardHash] = persistence.AvS(hash)
			}
			allOld(&p.ReturnValuesOnConditionCheckFailure)
			w.Put = &p
		case w.Update != nil:
			u := *w.Update
			allOld(&u.ReturnValuesOnConditionCheckFailure)
			w.Update = &u
		case w.Delete != nil:
			d := *w.Delete
			allOld(&d.ReturnValuesOnConditionCheckFailure)
			w.Delete = &d
		case w.ConditionCheck != nil:
			cc := *w.ConditionCheck
			allOld(&cc.ReturnValuesOnConditionCheckFailure)
			w.ConditionCheck = &cc
		}
		out[i] = w
	}
	return out
}

// guardFired reports whether any guard's condition failed, at whatever position, and
// the payload fingerprint its item holds ("" when none was stored or returned).
func guardFired(wce *persistence.WriteConditionError, guards []int) (bool, string) {
	for _, f := range wce.Failed {
		if !slices.Contains(guards, f.Index) {
			continue
		}
		if v, ok := f.Item[persistence.AttrGuardHash].(*types.AttributeValueMemberS); ok {
			return true, v.Value
		}
		return true, ""
	}
	return false, ""
}

// failTimeout bounds the write that releases a lease after a failure.
const failTimeout = 5 * time.Second

// fail releases the lease with the failure. It runs on a context that ignores the
// caller's cancellation: the commonest failure is the invocation deadline itself, and a
// release sent on the expired context would leave the record IN_PROGRESS until its
// lease ends, making every redelivery wait.
func (c *Client) fail(ctx context.Context, att *Attempt, f persistence.Failure) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failTimeout)
	defer cancel()
	ctx, span := c.startSpan(ctx, telemetry.SpanRelease, att.lease.Key)
	if persistence.FailEvent(f) == persistence.EventRefuse {
		f.RefusedBy = handoff.Delivery(ctx)
	}
	now := c.cfg.Clock()
	err := c.cfg.Store.FailWith(ctx, att.lease, f, c.failedUntil(att, now), now)
	endRelease(span, f.Retryable, err)
	return err
}

// dlqMargin is what failedUntil adds to Config.DLQRetention: the time between a
// record's failure and its message's arrival in the dead-letter queue.
const dlqMargin = 24 * time.Hour

// failedUntil is the expiry of att's record failed at now: TTL, or, when the attempt
// holds steps or began one (its message may come back from the dead-letter queue to
// find them), the longer of TTL and DLQRetention plus dlqMargin (Config.DLQRetention).
// A record's expiry never moves earlier (later): the ingress takes it for its own.
func (c *Client) failedUntil(att *Attempt, now time.Time) time.Time {
	exp := later(now.Add(c.cfg.TTL), att.exp)
	att.mu.Lock()
	stepped := len(att.steps) > 0 || att.stepped
	att.mu.Unlock()
	if stepped && c.cfg.DLQRetention > 0 {
		exp = later(exp, c.dlqUntil(now))
	}
	return exp
}

// retain keeps old, a FAILED record that this delivery finds and is dead-lettered
// against, as long as the dead-letter queue keeps the delivery's message, when it holds
// steps (failedUntil): redriven, the message must find the steps it recorded. A write
// that fails leaves the message to be retried (an error that is not permanent), not
// dead-lettered before the record would outlive it.
func (c *Client) retain(ctx context.Context, pk string, old *persistence.Record, now time.Time) error {
	if len(old.Steps) == 0 || c.cfg.DLQRetention <= 0 {
		return nil
	}
	until := c.dlqUntil(now)
	if !old.ExpiresAt.Before(until.Add(-time.Hour)) {
		return nil // it lives long enough: within the margin, no write
	}
	if err := c.cfg.Store.Retain(ctx, pk, old.LeaseToken, until, now); err != nil {
		return fmt.Errorf("idem: keep the failed record %s while its message is dead-lettered: %w", persistence.Redact(pk), err)
	}
	return nil
}

// dlqUntil is how long a record that holds steps lives from now, with DLQRetention set:
// as long as the dead-letter queue keeps a message that arrives there within dlqMargin.
func (c *Client) dlqUntil(now time.Time) time.Time {
	return now.Add(c.cfg.DLQRetention + dlqMargin)
}

// steppedUntil is the expiry a step of att gives its record at now (Attempt.StepAnswer):
// dlqUntil when DLQRetention is set and that is later than the record's, else zero (the
// expiry stays). However the record ends after its step (a failure, a crash the reaper
// fails, a later copy dead-lettered), its message may wait in the dead-letter queue that
// long, and redriven, must find the step recorded.
func (c *Client) steppedUntil(att *Attempt, now time.Time) time.Time {
	if c.cfg.DLQRetention <= 0 {
		return time.Time{}
	}
	until := c.dlqUntil(now)
	att.mu.Lock()
	cur := att.exp
	att.mu.Unlock()
	if !until.After(cur) {
		return time.Time{}
	}
	return until
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// leaseUntil is the invocation deadline plus the grace, capped by MaxLease.
func (c *Client) leaseUntil(ctx context.Context, now time.Time) time.Time {
	limit := now.Add(c.cfg.MaxLease)
	dl, ok := ctx.Deadline()
	if !ok {
		return minTime(now.Add(c.cfg.DefaultLease), limit)
	}
	return minTime(dl.Add(c.cfg.LeaseGrace), limit)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (c *Client) owner(ctx context.Context) string {
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		return lc.AwsRequestID
	}
	return c.cfg.Owner
}

// newToken returns 128 random bits in hex. crypto/rand.Read never fails on supported
// platforms (it crashes the program instead), so there is no error to return.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
