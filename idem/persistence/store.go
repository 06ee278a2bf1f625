package persistence

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Store keeps idempotency records and performs the conditional writes of the state
// machine. Every method is one atomic operation. DynamoStore and MemoryStore implement
// it with the same semantics; the contract tests run against both.
type Store interface {
	// Create writes rec if no live record exists for rec.Key (none, or ExpiresAt before
	// now). When a live record exists it writes nothing and returns that record with
	// created false. When it replaced an expired record that was still stored, it
	// returns that record with created true (nil if there was none). A record holding
	// rec's own lease token counts as created: the write was applied by an earlier try.
	Create(ctx context.Context, rec *Record, now time.Time) (existing *Record, created bool, err error)
	// Takeover installs a new lease (token, until, owner, shard) on a record that is
	// still exactly as seen (same token, status and lease), increments Attempt, keeps
	// Steps, clears the last failure, sets the TTL to expiresAt and returns the updated
	// record. A record that
	// changed since it was seen gives ErrLeaseLost.
	Takeover(ctx context.Context, seen *Record, next Lease, expiresAt, now time.Time) (*Record, error)
	// Complete marks the record COMPLETED with c.Response, c.ExpiresAt and c.Outbox,
	// fenced on the lease; c.Writes commit in the same transaction or not at all. Without
	// an outbox the record leaves the in-flight index; with one it stays there until
	// MarkSent, so the reaper finds messages a crash left unsent (UpdatedAt is the
	// commit time: the reaper sends in that order). A lost
	// fence gives ErrLeaseLost; a failed business write condition *WriteConditionError;
	// a request refused as invalid ErrInvalidRequest.
	Complete(ctx context.Context, l Lease, c Completion, now time.Time) error
	// MarkSent records that the outbox stored by the completion under token was sent:
	// it removes the outbox (and the record from the in-flight index) and keeps the
	// count, and the messages dead-lettered instead of sent (dead, if any). A record
	// whose outbox is already gone, or that changed, is left as it is.
	MarkSent(ctx context.Context, key, token string, sent int, dead []DeadMessage, now time.Time) error
	// Put writes rec (ModeSingleTransaction's commit), with writes in the same
	// transaction, on a condition on the record as it is: when seen is nil, that there is
	// no live record (as Create); otherwise that the record still has seen's token,
	// status and lease end (as Takeover). When the record's condition fails nothing is
	// written and the record as it is comes back (nil error); a record already holding
	// rec's token counts as written (an earlier try was applied and its answer lost).
	// Business write failures are as in Complete.
	Put(ctx context.Context, rec *Record, writes []types.TransactWriteItem, seen *Record, now time.Time) (existing *Record, err error)
	// Retry makes a FAILED record that is not retryable retryable (the operator's
	// "clear"), if it still holds token; otherwise ErrLeaseLost.
	Retry(ctx context.Context, key, token, reason string, now time.Time) error
	// Retain moves the expiry of a FAILED record that still holds token to until
	// (EventRetain), which the caller makes later than the record's; otherwise
	// ErrLeaseLost.
	Retain(ctx context.Context, key, token string, until, now time.Time) error
	// FailWith marks the record FAILED with f (its reason, whether it is retryable, its
	// category and public reason), fenced on the lease.
	FailWith(ctx context.Context, l Lease, f Failure, expiresAt, now time.Time) error
	// AddStep records a completed step, and its answer when answer is not nil, in one
	// write fenced on the lease (EventStep), and moves the record's expiry to expiresAt
	// unless it is zero (the caller never moves it earlier). The caller checked the
	// answer's size (CheckAnswer).
	AddStep(ctx context.Context, l Lease, step string, answer []byte, expiresAt, now time.Time) error
	// Extend moves the lease deadline to until, fenced on the lease.
	Extend(ctx context.Context, l Lease, until, now time.Time) error
	// Get reads the record for key; ErrNotFound when there is none or it expired.
	Get(ctx context.Context, key string, now time.Time) (*Record, error)
	// Stale lists in-flight records of shard whose lease ended before `before`, oldest
	// first, at most limit, continuing after cursor ("" to start). The next cursor is ""
	// on the last page.
	Stale(ctx context.Context, shard string, before time.Time, limit int, cursor string) (recs []StaleLease, next string, err error)
	// Reap marks the lease FAILED (retryable, with reason) if the record still holds the
	// token and lease end it was listed with; otherwise ErrLeaseLost.
	Reap(ctx context.Context, s StaleLease, reason string, now time.Time) error
}

// Completion is what a lease holder commits.
type Completion struct {
	Response  []byte
	ExpiresAt time.Time
	// Writes are the business writes committed with the record, or not at all.
	Writes []types.TransactWriteItem
	// Outbox holds outbound messages to send once the commit succeeded.
	Outbox []Message
	// Group is the FIFO message group of the delivery that commits (stored with an
	// outbox: see Record.OutboxGroup).
	Group string
	// Home, when not 0, is 1 + the position in Writes of the guard Put that is the
	// record's home (Result.HomeGuard): a store that can (DynamoStore) folds it into the
	// record instead of writing an item of its own; others treat it as any write.
	Home int
	// PayloadHash, when set, replaces the record's payload hash (a guarded completion
	// that found the effect in place for another payload records the payload it was
	// applied for).
	PayloadHash string
	// Refusal, with PayloadHash, is why the payload this lease ran was refused: the
	// record keeps it as its error (Reason, Category, Public), so that a reader that does
	// not know which payload came under the key (the ingress's status, its own record
	// gone) does not take the completion for that payload's (Record.CompletedForAnother).
	Refusal Failure
	// RefusedHash, with Refusal, is the fingerprint of the payload refused
	// (Record.RefusedHash).
	RefusedHash string
}

// GuardReader is implemented by stores that can read a guard item, for Attempt.Applied.
type GuardReader interface {
	// ReadGuard returns the item at key in table (strongly consistent), or nil.
	ReadGuard(ctx context.Context, table string, key map[string]types.AttributeValue) (map[string]types.AttributeValue, error)
}

// Lease identifies one acquisition of a key: the fencing token every later write is
// conditioned on.
type Lease struct {
	Key   string // partition key of the record
	Token string
	Until time.Time
	Owner string
	Shard string
}

// StaleLease is an in-flight record as the reaper lists it.
type StaleLease struct {
	Key        string
	Token      string
	LeaseUntil time.Time
	Owner      string
	Attempt    int
}
