package idem

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
	// Steps, sets the TTL to expiresAt and returns the updated record. A record that
	// changed since it was seen gives ErrLeaseLost.
	Takeover(ctx context.Context, seen *Record, next Lease, expiresAt, now time.Time) (*Record, error)
	// Complete marks the record COMPLETED with response and expiresAt and removes it from
	// the in-flight index, fenced on the lease; writes commit in the same transaction or
	// not at all. A lost fence gives ErrLeaseLost.
	Complete(ctx context.Context, l Lease, response []byte, expiresAt, now time.Time, writes []types.TransactWriteItem) error
	// Fail marks the record FAILED with reason and retryable, fenced on the lease.
	Fail(ctx context.Context, l Lease, reason string, retryable bool, expiresAt, now time.Time) error
	// AddStep records a completed step, fenced on the lease.
	AddStep(ctx context.Context, l Lease, step string, now time.Time) error
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
