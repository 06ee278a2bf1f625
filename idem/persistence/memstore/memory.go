package memstore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// MemoryStore is a Store in process memory with the same conditions as DynamoStore, for
// unit tests of handlers. It cannot evaluate DynamoDB expressions, so business writes
// handed to Complete are not applied: they are appended to a log, atomically with the
// completion, and Committed returns them. The zero value is not usable; call
// NewMemoryStore.
type MemoryStore struct {
	mu        sync.Mutex
	recs      map[string]*persistence.Record
	committed [][]types.TransactWriteItem
	guards    map[string]map[string]types.AttributeValue // guard identity -> item
}

var _ persistence.Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{recs: make(map[string]*persistence.Record), guards: make(map[string]map[string]types.AttributeValue)}
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
func (m *MemoryStore) Create(ctx context.Context, rec *persistence.Record, now time.Time) (*persistence.Record, bool, error) {
	if err := ctxErr(ctx, "acquire put"); err != nil {
		return nil, false, err
	}
	if rec.Response != nil {
		if _, _, err := persistence.EncodeResponse(rec.Response); err != nil {
			return nil, false, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.recs[rec.Key]
	if !persistence.TransitionOf(persistence.EventAcquire).Holds(old, persistence.CondArgs{Now: now}) {
		return old.Clone(), false, nil
	}
	m.recs[rec.Key] = rec.Clone()
	if ok {
		return old.Clone(), true, nil // the expired record it replaced
	}
	return nil, true, nil
}

// held returns the record of key if it meets the conditions of ev's row (the
// transitions table) with a, else ErrLeaseLost.
func (m *MemoryStore) held(ev persistence.Event, op, key string, a persistence.CondArgs) (*persistence.Record, error) {
	r := m.recs[key]
	if !persistence.TransitionOf(ev).Holds(r, a) {
		return nil, fmt.Errorf("idem: %s %s: %w", op, persistence.Redact(key), persistence.ErrLeaseLost)
	}
	return r, nil
}

// Takeover mirrors the compare-and-swap UpdateItem.
func (m *MemoryStore) Takeover(ctx context.Context, seen *persistence.Record, next persistence.Lease, expiresAt, now time.Time) (*persistence.Record, error) {
	if err := ctxErr(ctx, "takeover"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(persistence.EventTakeover, "takeover", seen.Key, persistence.SeenArgs(seen))
	if err != nil {
		return nil, err
	}
	r.LeaseToken, r.LeaseUntil, r.Status = next.Token, next.Until.Truncate(time.Millisecond), persistence.StatusInProgress
	r.Inflight, r.Owner, r.UpdatedAt = next.Shard, next.Owner, now.Truncate(time.Millisecond)
	r.ExpiresAt = expiresAt.Truncate(time.Second)
	r.Attempt++
	r.Error, r.Retryable, r.Category, r.Public, r.RefusedBy = "", false, "", "", persistence.Delivery{}
	return r.Clone(), nil
}

// Complete mirrors the fenced update or transaction. Of the business writes' conditions
// it evaluates one kind, the guard's: a Put conditioned on attribute_not_exists(<attr>)
// fails when a Put committed earlier to the same table had the same value of <attr>.
func (m *MemoryStore) Complete(ctx context.Context, l persistence.Lease, c persistence.Completion, now time.Time) error {
	if err := ctxErr(ctx, "complete"); err != nil {
		return err
	}
	data, _, err := persistence.EncodeResponse(c.Response)
	if err != nil {
		return err
	}
	outbox, _, err := persistence.EncodeOutbox(c.Outbox)
	if err != nil {
		return err
	}
	if len(data)+len(outbox) > persistence.MaxStoredResponse {
		return fmt.Errorf("%w: response and outbox are %d bytes stored, limit %d", persistence.ErrResponseTooLarge, len(data)+len(outbox), persistence.MaxStoredResponse)
	}
	if len(c.Writes) > persistence.MaxWrites {
		return fmt.Errorf("idem: complete %s: %w: %d business writes, a transaction holds at most %d besides the completion", persistence.Redact(l.Key), persistence.ErrInvalidRequest, len(c.Writes), persistence.MaxWrites)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(persistence.EventCommit, "complete", l.Key, persistence.CondArgs{Token: l.Token})
	if err != nil {
		return err
	}
	if err := m.commitWrites(l.Key, "complete", c.Writes); err != nil {
		return err
	}
	r.Status, r.Response = persistence.StatusCompleted, append([]byte{}, c.Response...)
	r.Outbox = append([]persistence.Message(nil), c.Outbox...)
	r.OutboxGroup = ""
	if len(c.Outbox) == 0 {
		r.Inflight = ""
	} else {
		r.OutboxGroup = c.Group
	}
	if c.PayloadHash != "" {
		r.PayloadHash = c.PayloadHash
	}
	if f := c.Refusal; f.Reason != "" {
		r.Error, r.Category, r.Public, r.RefusedHash = f.Reason, f.Category, f.Public, c.RefusedHash
	}
	r.ExpiresAt, r.UpdatedAt = c.ExpiresAt.Truncate(time.Second), now.Truncate(time.Millisecond)
	return nil
}

// commitWrites evaluates the guards among writes and, when none fails, logs the writes
// as committed. The caller holds m.mu.
func (m *MemoryStore) commitWrites(key, op string, writes []types.TransactWriteItem) error {
	var wce *persistence.WriteConditionError
	for i, w := range writes {
		id, ok := guardIdentity(w)
		if !ok {
			continue
		}
		if old, taken := m.guards[id]; taken {
			if wce == nil {
				wce = &persistence.WriteConditionError{Index: i, Reason: "The conditional request failed"}
			}
			wce.Failed = append(wce.Failed, persistence.FailedWrite{Index: i, Item: old})
		}
	}
	if wce != nil {
		return fmt.Errorf("idem: %s %s: %w", op, persistence.Redact(key), wce)
	}
	for _, w := range writes {
		if id, ok := guardIdentity(w); ok {
			m.guards[id] = w.Put.Item
		}
	}
	if len(writes) > 0 {
		m.committed = append(m.committed, append([]types.TransactWriteItem(nil), writes...))
	}
	return nil
}

// Put mirrors the conditional put or transaction of ModeSingleTransaction.
func (m *MemoryStore) Put(ctx context.Context, rec *persistence.Record, writes []types.TransactWriteItem, seen *persistence.Record, now time.Time) (*persistence.Record, error) {
	if err := ctxErr(ctx, "put"); err != nil {
		return nil, err
	}
	if _, err := persistence.MarshalRecord(rec); err != nil {
		return nil, err
	}
	if len(writes) > persistence.MaxWrites {
		return nil, fmt.Errorf("idem: put %s: %w: %d business writes, a transaction holds at most %d besides the record", persistence.Redact(rec.Key), persistence.ErrInvalidRequest, len(writes), persistence.MaxWrites)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.recs[rec.Key]
	row, a := persistence.TransitionOf(persistence.EventPut), persistence.CondArgs{Now: now}
	if seen != nil {
		row, a = persistence.TransitionOf(persistence.EventPutOver), persistence.SeenArgs(seen)
	}
	if !row.Holds(old, a) {
		if ok && old.LeaseToken == rec.LeaseToken {
			return nil, nil
		}
		if !ok {
			return nil, fmt.Errorf("idem: put %s: %w", persistence.Redact(rec.Key), persistence.ErrNotFound)
		}
		return old.Clone(), nil
	}
	if err := m.commitWrites(rec.Key, "put", writes); err != nil {
		return nil, err
	}
	c := rec.Clone()
	c.LeaseUntil, c.ExpiresAt = c.LeaseUntil.Truncate(time.Millisecond), c.ExpiresAt.Truncate(time.Second)
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.Truncate(time.Millisecond), c.UpdatedAt.Truncate(time.Millisecond)
	m.recs[rec.Key] = c
	return nil, nil
}

// guardIdentity names the item a guard Put writes: table, the attribute its
// attribute_not_exists condition names, and that attribute's value.
func guardIdentity(w types.TransactWriteItem) (string, bool) {
	if w.Put == nil || w.Put.ConditionExpression == nil {
		return "", false
	}
	cond := strings.TrimSpace(*w.Put.ConditionExpression)
	attr, ok := strings.CutPrefix(cond, "attribute_not_exists(")
	if !ok || !strings.HasSuffix(attr, ")") {
		return "", false
	}
	attr = strings.TrimSpace(strings.TrimSuffix(attr, ")"))
	if name, ok := w.Put.ExpressionAttributeNames[attr]; ok {
		attr = name
	}
	v, ok := w.Put.Item[attr].(*types.AttributeValueMemberS)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%s\x00%s\x00%s", aws.ToString(w.Put.TableName), attr, v.Value), true
}

// MarkSent mirrors the conditioned update.
func (m *MemoryStore) MarkSent(ctx context.Context, key, token string, sent int, dead []persistence.DeadMessage, now time.Time) error {
	if err := ctxErr(ctx, "mark sent"); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(persistence.EventMarkSent, "mark sent", key, persistence.CondArgs{Token: token})
	if err != nil {
		return nil //nolint:nilerr // sent and marked by another delivery or the reaper, or gone
	}
	r.Outbox, r.Sent, r.Inflight, r.OutboxGroup, r.UpdatedAt = nil, sent, "", "", now.Truncate(time.Millisecond)
	r.Dead = append([]persistence.DeadMessage(nil), dead...)
	return nil
}

// Retry mirrors the conditioned update.
func (m *MemoryStore) Retry(ctx context.Context, key, token, reason string, now time.Time) error {
	return m.update(ctx, persistence.EventClear, "retry", key, token, func(r *persistence.Record) {
		r.Retryable, r.Error, r.UpdatedAt = true, persistence.NonEmpty(reason), now.Truncate(time.Millisecond)
	})
}

// Retain moves a FAILED record's expiry, fenced on its token (EventRetain).
func (m *MemoryStore) Retain(ctx context.Context, key, token string, until, now time.Time) error {
	return m.update(ctx, persistence.EventRetain, "retain", key, token, func(r *persistence.Record) {
		r.ExpiresAt, r.UpdatedAt = until.Truncate(time.Second), now.Truncate(time.Millisecond)
	})
}

// update applies set to the record of key under the lock, if it meets the conditions of
// ev's row with token, else ErrLeaseLost.
func (m *MemoryStore) update(ctx context.Context, ev persistence.Event, op, key, token string, set func(*persistence.Record)) error {
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(ev, op, key, persistence.CondArgs{Token: token})
	if err != nil {
		return err
	}
	set(r)
	return nil
}

// ReadGuard returns the item a committed guard Put wrote at key (one attribute).
func (m *MemoryStore) ReadGuard(ctx context.Context, table string, key map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	if err := ctxErr(ctx, "read guard"); err != nil {
		return nil, err
	}
	if len(key) != 1 {
		return nil, fmt.Errorf("idem: read guard: the memory store reads guards by a one-attribute key, got %d", len(key))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for attr, v := range key {
		s, ok := v.(*types.AttributeValueMemberS)
		if !ok {
			return nil, nil
		}
		return m.guards[fmt.Sprintf("%s\x00%s\x00%s", table, attr, s.Value)], nil
	}
	return nil, nil
}

// FailWith mirrors the fenced update.
func (m *MemoryStore) FailWith(ctx context.Context, l persistence.Lease, f persistence.Failure, expiresAt, now time.Time) error {
	if err := ctxErr(ctx, "fail"); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(persistence.FailEvent(f), "fail", l.Key, persistence.CondArgs{Token: l.Token})
	if err != nil {
		return err
	}
	r.Status, r.Error, r.Retryable, r.Inflight = persistence.StatusFailed, persistence.NonEmpty(f.Reason), f.Retryable, ""
	r.Category, r.Public, r.RefusedBy = f.Category, f.Public, f.RefusedBy
	r.ExpiresAt, r.UpdatedAt = expiresAt.Truncate(time.Second), now.Truncate(time.Millisecond)
	return nil
}

// AddStep mirrors the fenced ADD.
func (m *MemoryStore) AddStep(ctx context.Context, l persistence.Lease, step string, answer []byte, expiresAt, now time.Time) error {
	if err := ctxErr(ctx, "step"); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(persistence.EventStep, "step "+step, l.Key, persistence.CondArgs{Token: l.Token})
	if err != nil {
		return err
	}
	if !r.HasStep(step) {
		r.Steps = append(r.Steps, step)
	}
	if answer != nil {
		if r.Answers == nil {
			r.Answers = map[string][]byte{}
		}
		r.Answers[step] = append([]byte{}, answer...)
	}
	if !expiresAt.IsZero() {
		r.ExpiresAt = expiresAt.Truncate(time.Second)
	}
	r.UpdatedAt = now.Truncate(time.Millisecond)
	return nil
}

// Extend mirrors the fenced lease update.
func (m *MemoryStore) Extend(ctx context.Context, l persistence.Lease, until, now time.Time) error {
	if err := ctxErr(ctx, "extend"); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(persistence.EventExtend, "extend", l.Key, persistence.CondArgs{Token: l.Token})
	if err != nil {
		return err
	}
	r.LeaseUntil, r.UpdatedAt = until.Truncate(time.Millisecond), now.Truncate(time.Millisecond)
	return nil
}

// Get returns a copy of the live record.
func (m *MemoryStore) Get(ctx context.Context, key string, now time.Time) (*persistence.Record, error) {
	if err := ctxErr(ctx, "get"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[key]
	if !ok || r.Expired(now) {
		return nil, fmt.Errorf("idem: get %s: %w", persistence.Redact(key), persistence.ErrNotFound)
	}
	return r.Clone(), nil
}

// Stale lists in-flight records of a shard by lease end, like the index query.
func (m *MemoryStore) Stale(ctx context.Context, shard string, before time.Time, limit int, cursor string) ([]persistence.StaleLease, string, error) {
	if err := ctxErr(ctx, "stale"); err != nil {
		return nil, "", err
	}
	m.mu.Lock()
	var all []persistence.StaleLease
	for _, r := range m.recs {
		if r.Inflight == shard && r.LeaseUntil.Before(before) {
			all = append(all, persistence.StaleLease{Key: r.Key, Token: r.LeaseToken, LeaseUntil: r.LeaseUntil, Owner: r.Owner, Attempt: r.Attempt})
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
		lu := persistence.FromMillis(n)
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
	return all[:limit], strconv.FormatInt(persistence.EpochMillis(last.LeaseUntil), 10) + "|" + last.Key, nil
}

// Reap mirrors the reaper's conditioned update.
func (m *MemoryStore) Reap(ctx context.Context, sl persistence.StaleLease, reason string, now time.Time) error {
	if err := ctxErr(ctx, "reap"); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(persistence.EventReap, "reap", sl.Key, persistence.CondArgs{Token: sl.Token, LeaseUntil: sl.LeaseUntil})
	if err != nil {
		return err
	}
	r.Status, r.Error, r.Retryable, r.Inflight = persistence.StatusFailed, persistence.NonEmpty(reason), true, ""
	r.UpdatedAt = now.Truncate(time.Millisecond)
	return nil
}

// Forget deletes the record of key, as DynamoDB's TTL deletes an expired item (within
// days of its expiry): for tests of what happens after the record is gone.
func (m *MemoryStore) Forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, key)
}
