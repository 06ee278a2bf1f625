package idem

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// MemoryStore is a Store in process memory with the same conditions as DynamoStore, for
// unit tests of handlers. It cannot evaluate DynamoDB expressions, so business writes
// handed to Complete are not applied: they are appended to a log, atomically with the
// completion, and Committed returns them. The zero value is not usable; call
// NewMemoryStore.
type MemoryStore struct {
	mu        sync.Mutex
	recs      map[string]*Record
	committed [][]types.TransactWriteItem
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{recs: make(map[string]*Record)}
}

// Committed returns the business writes of every completion so far, one slice per
// completion, in commit order.
func (m *MemoryStore) Committed() [][]types.TransactWriteItem {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]types.TransactWriteItem(nil), m.committed...)
}

// Len returns the number of records held, expired ones included.
func (m *MemoryStore) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.recs)
}

func ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("idem: %s: %w", op, err)
	}
	return nil
}

// Create mirrors the conditional PutItem.
func (m *MemoryStore) Create(ctx context.Context, rec *Record, now time.Time) (*Record, bool, error) {
	if err := ctxErr(ctx, "acquire put"); err != nil {
		return nil, false, err
	}
	if rec.Response != nil {
		if _, _, err := encodeResponse(rec.Response); err != nil {
			return nil, false, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.recs[rec.Key]
	if ok && !old.expired(now) {
		return old.clone(), false, nil
	}
	m.recs[rec.Key] = rec.clone()
	if ok {
		return old.clone(), true, nil // the expired record it replaced
	}
	return nil, true, nil
}

// held returns the record if l still holds it (the fence), else ErrLeaseLost.
func (m *MemoryStore) held(op string, l Lease) (*Record, error) {
	r, ok := m.recs[l.Key]
	if !ok || r.LeaseToken != l.Token || r.Status != StatusInProgress {
		return nil, fmt.Errorf("idem: %s %s: %w", op, redact(l.Key), ErrLeaseLost)
	}
	return r, nil
}

// Takeover mirrors the compare-and-swap UpdateItem.
func (m *MemoryStore) Takeover(ctx context.Context, seen *Record, next Lease, expiresAt, now time.Time) (*Record, error) {
	if err := ctxErr(ctx, "takeover"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[seen.Key]
	if !ok || r.LeaseToken != seen.LeaseToken || r.Status != seen.Status || !r.LeaseUntil.Equal(seen.LeaseUntil) {
		return nil, fmt.Errorf("idem: takeover %s: %w", redact(seen.Key), ErrLeaseLost)
	}
	r.LeaseToken, r.LeaseUntil, r.Status = next.Token, next.Until.Truncate(time.Millisecond), StatusInProgress
	r.Inflight, r.Owner, r.UpdatedAt = next.Shard, next.Owner, now.Truncate(time.Millisecond)
	r.ExpiresAt = expiresAt.Truncate(time.Second)
	r.Attempt++
	r.Error, r.Retryable = "", false
	return r.clone(), nil
}

// Complete mirrors the fenced update or transaction.
func (m *MemoryStore) Complete(ctx context.Context, l Lease, response []byte, expiresAt, now time.Time, writes []types.TransactWriteItem) error {
	if err := ctxErr(ctx, "complete"); err != nil {
		return err
	}
	if _, _, err := encodeResponse(response); err != nil {
		return err
	}
	if len(writes) > 99 {
		return fmt.Errorf("idem: complete %s: %d business writes, a transaction holds at most 99 besides the completion", redact(l.Key), len(writes))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held("complete", l)
	if err != nil {
		return err
	}
	r.Status, r.Response, r.Inflight = StatusCompleted, append([]byte{}, response...), ""
	r.ExpiresAt, r.UpdatedAt = expiresAt.Truncate(time.Second), now.Truncate(time.Millisecond)
	if len(writes) > 0 {
		m.committed = append(m.committed, append([]types.TransactWriteItem(nil), writes...))
	}
	return nil
}

// Fail mirrors the fenced update.
func (m *MemoryStore) Fail(ctx context.Context, l Lease, reason string, retryable bool, expiresAt, now time.Time) error {
	if err := ctxErr(ctx, "fail"); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held("fail", l)
	if err != nil {
		return err
	}
	r.Status, r.Error, r.Retryable, r.Inflight = StatusFailed, nonEmpty(reason), retryable, ""
	r.ExpiresAt, r.UpdatedAt = expiresAt.Truncate(time.Second), now.Truncate(time.Millisecond)
	return nil
}

// AddStep mirrors the fenced ADD.
func (m *MemoryStore) AddStep(ctx context.Context, l Lease, step string, now time.Time) error {
	if err := ctxErr(ctx, "step"); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held("step "+step, l)
	if err != nil {
		return err
	}
	if !r.hasStep(step) {
		r.Steps = append(r.Steps, step)
	}
	r.UpdatedAt = now.Truncate(time.Millisecond)
	return nil
}

// Extend mirrors the fenced lease update.
func (m *MemoryStore) Extend(ctx context.Context, l Lease, until, now time.Time) error {
	if err := ctxErr(ctx, "extend"); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held("extend", l)
	if err != nil {
		return err
	}
	r.LeaseUntil, r.UpdatedAt = until.Truncate(time.Millisecond), now.Truncate(time.Millisecond)
	return nil
}

// Get returns a copy of the live record.
func (m *MemoryStore) Get(ctx context.Context, key string, now time.Time) (*Record, error) {
	if err := ctxErr(ctx, "get"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[key]
	if !ok || r.expired(now) {
		return nil, fmt.Errorf("idem: get %s: %w", redact(key), ErrNotFound)
	}
	return r.clone(), nil
}

// Stale lists in-flight records of a shard by lease end, like the index query.
func (m *MemoryStore) Stale(ctx context.Context, shard string, before time.Time, limit int, cursor string) ([]StaleLease, string, error) {
	if err := ctxErr(ctx, "stale"); err != nil {
		return nil, "", err
	}
	m.mu.Lock()
	var all []StaleLease
	for _, r := range m.recs {
		if r.Status == StatusInProgress && r.Inflight == shard && r.LeaseUntil.Before(before) {
			all = append(all, StaleLease{Key: r.Key, Token: r.LeaseToken, LeaseUntil: r.LeaseUntil, Owner: r.Owner, Attempt: r.Attempt})
		}
	}
	m.mu.Unlock()
	sort.Slice(all, func(i, j int) bool {
		if !all[i].LeaseUntil.Equal(all[j].LeaseUntil) {
			return all[i].LeaseUntil.Before(all[j].LeaseUntil)
		}
		return all[i].Key < all[j].Key
	})
	start := 0
	if cursor != "" {
		ms, key, ok := strings.Cut(cursor, "|")
		n, err := strconv.ParseInt(ms, 10, 64)
		if !ok || err != nil {
			return nil, "", fmt.Errorf("idem: stale: bad cursor %q", cursor)
		}
		lu := fromMillis(n)
		start = sort.Search(len(all), func(i int) bool {
			s := all[i]
			return s.LeaseUntil.After(lu) || s.LeaseUntil.Equal(lu) && s.Key > key
		})
	}
	all = all[start:]
	if limit <= 0 || len(all) <= limit {
		return all, "", nil
	}
	last := all[limit-1]
	return all[:limit], strconv.FormatInt(epochMillis(last.LeaseUntil), 10) + "|" + last.Key, nil
}

// Reap mirrors the reaper's conditioned update.
func (m *MemoryStore) Reap(ctx context.Context, sl StaleLease, reason string, now time.Time) error {
	if err := ctxErr(ctx, "reap"); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held("reap", Lease{Key: sl.Key, Token: sl.Token})
	if err != nil {
		return err
	}
	if !r.LeaseUntil.Equal(sl.LeaseUntil) {
		return fmt.Errorf("idem: reap %s: %w", redact(sl.Key), ErrLeaseLost)
	}
	r.Status, r.Error, r.Retryable, r.Inflight = StatusFailed, nonEmpty(reason), true, ""
	r.UpdatedAt = now.Truncate(time.Millisecond)
	return nil
}
