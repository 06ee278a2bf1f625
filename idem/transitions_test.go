package idem_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
)

// TestTransitionTable walks the state machine (persistence.Transitions) on every store and
// layout: memory, moto and simdb. For each row and each state it applies to, the
// store's write of the row's event succeeds on a record in that state and leaves one of
// the row's states; then, for each condition the row names, the same write on a record
// that breaks only that condition is refused and leaves the record as it was. So a
// store that drops a condition, or checks one the table does not name, fails here.
func TestTransitionTable(t *testing.T) {
	rows := persistence.Transitions()
	seen := map[persistence.Event]bool{}
	for _, r := range rows {
		if seen[r.Event] {
			t.Fatalf("event %s has two rows", r.Event)
		}
		seen[r.Event] = true
	}
	for _, ev := range []persistence.Event{persistence.EventAcquire, persistence.EventTakeover, persistence.EventExtend, persistence.EventStep, persistence.EventCommit,
		persistence.EventRefuse, persistence.EventFail, persistence.EventMarkSent, persistence.EventClear, persistence.EventRetain, persistence.EventReap, persistence.EventPut, persistence.EventPutOver, persistence.EventExpire} {
		if !seen[ev] {
			t.Fatalf("event %s has no row", ev)
		}
	}
	forEachLayout(t, func(t *testing.T, e *env) {
		w := &walker{e: e, ctx: context.Background()}
		for _, row := range rows {
			for _, from := range row.From {
				w.applies(t, row, from)
				for _, c := range row.Conds {
					w.refused(t, row, from, c)
				}
			}
		}
	})
}

// walker writes records in a given state and applies events to them.
type walker struct {
	e   *env
	ctx context.Context
	n   int
}

// record is a record of a fresh key in state s.
func (w *walker) record(s persistence.State) *persistence.Record {
	w.n++
	now := w.e.clock.Now()
	rec := &persistence.Record{
		Key: fmt.Sprintf("walk#k%d", w.n), LeaseToken: fmt.Sprintf("tok-%d", w.n), LeaseUntil: now.Add(-time.Minute).Truncate(time.Millisecond),
		ExpiresAt: now.Add(time.Hour), PayloadHash: "h", Attempt: 1, Owner: "walker", CreatedAt: now, UpdatedAt: now,
	}
	switch s {
	case persistence.StateInProgress:
		rec.Status, rec.Inflight = persistence.StatusInProgress, "0"
	case persistence.StatePending:
		rec.Status, rec.Inflight = persistence.StatusCompleted, "0"
		rec.Outbox = []idem.Message{{QueueURL: "https://sqs.us-east-1.amazonaws.com/000000000000/out", Body: "m"}}
	case persistence.StateCompleted:
		rec.Status, rec.Response = persistence.StatusCompleted, []byte("done")
	case persistence.StateRetryable:
		rec.Status, rec.Retryable, rec.Error = persistence.StatusFailed, true, "lease expired"
	case persistence.StateRefused:
		rec.Status, rec.Retryable, rec.Error, rec.Category = persistence.StatusFailed, true, "refused", persistence.CategoryRefused
		rec.RefusedBy = persistence.Delivery{MessageID: "m-1", ReceiveCount: 1}
	case persistence.StatePermanent:
		rec.Status, rec.Error = persistence.StatusFailed, "bad input"
	}
	return rec
}

// store writes rec as it is (Create writes any record on an absent key).
func (w *walker) store(t *testing.T, rec *persistence.Record) {
	t.Helper()
	if _, created, err := w.e.store.Create(w.ctx, rec, w.e.clock.Now()); err != nil || !created {
		t.Fatalf("write %s: created %v, %v", rec.Key, created, err)
	}
}

// get reads key's record; nil when absent.
func (w *walker) get(t *testing.T, key string) *persistence.Record {
	t.Helper()
	rec, err := w.e.store.Get(w.ctx, key, w.e.clock.Now())
	if errors.Is(err, idem.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return rec
}

// apply makes the store write of row's event on key, with the values the writer holds
// (seen: the record as it read or listed it); it reports whether the store says it
// wrote.
func (w *walker) apply(t *testing.T, row persistence.Transition, key string, seen *persistence.Record) bool {
	t.Helper()
	now := w.e.clock.Now()
	lease := persistence.Lease{Key: key, Token: seen.LeaseToken}
	fresh := &persistence.Record{Key: key, Status: persistence.StatusInProgress, LeaseToken: "new-" + key, LeaseUntil: now.Add(time.Minute).Truncate(time.Millisecond),
		Inflight: "0", ExpiresAt: now.Add(time.Hour), PayloadHash: "h", Attempt: 1, CreatedAt: now, UpdatedAt: now}
	fenced := func(err error) bool {
		t.Helper()
		if err != nil && !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("%s on %s: %v", row.Event, key, err)
		}
		return err == nil
	}
	switch row.Event {
	case persistence.EventAcquire:
		_, created, err := w.e.store.Create(w.ctx, fresh, now)
		return fenced(err) && created
	case persistence.EventTakeover:
		_, err := w.e.store.Takeover(w.ctx, seen, persistence.Lease{Key: key, Token: fresh.LeaseToken, Until: fresh.LeaseUntil, Shard: "0"}, now.Add(time.Hour), now)
		return fenced(err)
	case persistence.EventExtend:
		return fenced(w.e.store.Extend(w.ctx, lease, now.Add(time.Minute), now))
	case persistence.EventStep:
		return fenced(w.e.store.AddStep(w.ctx, lease, "s", nil, seen.ExpiresAt.Add(time.Hour), now))
	case persistence.EventCommit:
		return fenced(w.e.store.Complete(w.ctx, lease, persistence.Completion{Response: []byte("ok"), ExpiresAt: now.Add(time.Hour)}, now))
	case persistence.EventRefuse:
		return fenced(w.e.store.FailWith(w.ctx, lease, persistence.Failure{Reason: "no", Retryable: true, Category: persistence.CategoryRefused,
			RefusedBy: persistence.Delivery{MessageID: "m-9", ReceiveCount: 2}}, now.Add(time.Hour), now))
	case persistence.EventFail:
		return fenced(w.e.store.FailWith(w.ctx, lease, persistence.Failure{Reason: "throttled", Retryable: true, Category: persistence.CategoryRetrying}, now.Add(time.Hour), now))
	case persistence.EventMarkSent:
		if err := w.e.store.MarkSent(w.ctx, key, seen.LeaseToken, 1, nil, now); err != nil {
			t.Fatalf("mark sent %s: %v", key, err)
		}
		rec := w.get(t, key) // MarkSent changes nothing, silently, when its condition fails
		return rec != nil && rec.Status == persistence.StatusCompleted && len(rec.Outbox) == 0 && rec.Sent == 1
	case persistence.EventClear:
		return fenced(w.e.store.Retry(w.ctx, key, seen.LeaseToken, "cleared", now))
	case persistence.EventRetain:
		return fenced(w.e.store.Retain(w.ctx, key, seen.LeaseToken, seen.ExpiresAt.Add(time.Hour), now))
	case persistence.EventReap:
		return fenced(w.e.store.Reap(w.ctx, persistence.StaleLease{Key: key, Token: seen.LeaseToken, LeaseUntil: seen.LeaseUntil}, reaper.ReasonLeaseExpired, now))
	case persistence.EventPut, persistence.EventPutOver:
		put := *fresh
		put.Status, put.Inflight, put.Response = persistence.StatusCompleted, "", []byte("ok")
		var over *persistence.Record
		if row.Event == persistence.EventPutOver {
			over = seen
		}
		existing, err := w.e.store.Put(w.ctx, &put, nil, over, now)
		if errors.Is(err, idem.ErrNotFound) {
			return false // over a record that is gone
		}
		return fenced(err) && existing == nil
	case persistence.EventExpire:
		w.e.clock.Advance(0)
		return w.get(t, key) == nil
	}
	t.Fatalf("no way to apply %s", row.Event)
	return false
}

// applies: on a record in state from, the write succeeds and leaves one of row's states.
func (w *walker) applies(t *testing.T, row persistence.Transition, from persistence.State) {
	t.Helper()
	rec := w.record(from)
	if row.Event == persistence.EventExpire {
		rec.ExpiresAt = w.e.clock.Now().Add(-2 * time.Second)
	}
	if from != persistence.StateAbsent {
		w.store(t, rec)
	}
	if !w.apply(t, row, rec.Key, rec) {
		t.Fatalf("%s from %s: refused, want it applied", row.Event, from)
	}
	if got := persistence.StateOf(w.get(t, rec.Key), w.e.clock.Now()); !slices.Contains(row.To, got) {
		t.Fatalf("%s from %s: left %s, want one of %v", row.Event, from, got, row.To)
	}
	if from == persistence.StateAbsent {
		// An expired record counts as absent: the write applies over it too.
		old := w.record(persistence.StateCompleted)
		old.ExpiresAt = w.e.clock.Now().Add(-2 * time.Second)
		w.store(t, old)
		if !w.apply(t, row, old.Key, old) {
			t.Fatalf("%s over an expired record: refused, want it applied", row.Event)
		}
	}
}

// refused: on a record in state from that breaks only condition c, the write is refused
// and the record is left as it was.
func (w *walker) refused(t *testing.T, row persistence.Transition, from persistence.State, c persistence.Cond) {
	t.Helper()
	writer := w.record(from) // what the writer holds or saw
	stored := *writer
	switch c {
	case persistence.CondAbsent:
		stored = *w.record(persistence.StateInProgress) // a live record
		stored.Key = writer.Key
	case persistence.CondToken:
		stored.LeaseToken = "someone-else"
	case persistence.CondStatus:
		// Another status, the rest as coherent as the store needs.
		if stored.Status == persistence.StatusFailed {
			stored.Status, stored.Retryable, stored.Error, stored.Category, stored.RefusedBy = persistence.StatusCompleted, false, "", "", persistence.Delivery{}
		} else {
			stored.Status, stored.Retryable, stored.Error, stored.Inflight, stored.Outbox = persistence.StatusFailed, true, "x", "", nil
		}
	case persistence.CondLease:
		stored.LeaseUntil = stored.LeaseUntil.Add(time.Second)
	case persistence.CondOutbox:
		stored.Outbox, stored.Inflight = nil, ""
	case persistence.CondNotRetryable:
		stored.Retryable = true
	default:
		t.Fatalf("no way to break %s", c)
	}
	w.store(t, &stored)
	before := w.get(t, stored.Key)
	if w.apply(t, row, writer.Key, writer) {
		t.Fatalf("%s from %s with %s broken: applied, want refused", row.Event, from, c)
	}
	after := w.get(t, stored.Key)
	if after == nil || after.LeaseToken != before.LeaseToken || after.Status != before.Status || !after.LeaseUntil.Equal(before.LeaseUntil) ||
		after.Retryable != before.Retryable || len(after.Outbox) != len(before.Outbox) || len(after.Steps) != len(before.Steps) {
		t.Fatalf("%s from %s with %s broken: the record changed from %+v to %+v", row.Event, from, c, before, after)
	}
}

// TestRecordsDocShowsTheTransitions: docs/records.md shows the state machine exactly as
// the table is (persistence.TransitionsMarkdown), between its markers.
func TestRecordsDocShowsTheTransitions(t *testing.T) {
	doc, err := os.ReadFile("../docs/records.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- transitions: begin (persistence.TransitionsMarkdown) -->\n", "<!-- transitions: end -->"
	_, rest, ok := strings.Cut(string(doc), begin)
	shown, _, ok2 := strings.Cut(rest, end)
	if !ok || !ok2 {
		t.Fatalf("docs/records.md has no %q ... %q section", strings.TrimSpace(begin), end)
	}
	if want := persistence.TransitionsMarkdown(); shown != want {
		t.Fatalf("docs/records.md's transitions differ from the table; put this between the markers:\n%s", want)
	}
}
