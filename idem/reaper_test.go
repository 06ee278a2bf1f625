package idem_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
)

// TestReaperRefusesBadConfig: a reaper without a store, or with a scope no consumer can
// have, fails its sweep with an error that says so, before any request (and without a
// panic: the reaper's Lambda reports the error and retries on its schedule).
func TestReaperRefusesBadConfig(t *testing.T) {
	for name, c := range map[string]struct {
		r    reaper.Reaper
		want string
	}{
		"no store":     {reaper.Reaper{}, "idem: Reaper.Store is nil"},
		"scope with #": {reaper.Reaper{Store: memstore.NewMemoryStore(), Scope: "a#b"}, "idem: Reaper.Scope: "},
	} {
		t.Run(name, func(t *testing.T) {
			res, err := c.r.Sweep(context.Background())
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("Sweep: %v, want an error starting %q", err, c.want)
			}
			if res != (reaper.SweepResult{}) {
				t.Errorf("Sweep counted %+v before failing", res)
			}
		})
	}
}

// okSender accepts every message of every batch.
type okSender struct{ sent atomic.Int64 }

func (s *okSender) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		s.sent.Add(1)
		out.Successful = append(out.Successful, sqstypes.SendMessageBatchResultEntry{Id: e.Id, MessageId: aws.String("m-" + aws.ToString(e.Id))})
	}
	return out, nil
}

// TestReaperDefaults: a Reaper with only its store (and a clock) keeps the documented
// defaults: 4 shards (a lease in shard 3 is listed), a grace of 30 s (a lease that ended
// 20 s ago is left to its holder, one that ended 31 s ago is reaped), and a MaxLease of
// 15 minutes (a crash's pending outbox is sent only once its commit is more than
// Grace + MaxLease old, so that no record committed before it can be missing from the
// listing).
func TestReaperDefaults(t *testing.T) {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	sender := &okSender{}
	r := &reaper.Reaper{Store: store, Clock: func() time.Time { return now }, Sender: sender}
	create := func(rec *persistence.Record) {
		t.Helper()
		rec.LeaseToken, rec.Attempt, rec.ExpiresAt, rec.CreatedAt = "tok-"+rec.Key, 1, now.Add(24*time.Hour), now.Add(-time.Hour)
		if _, created, err := store.Create(ctx, rec, now); err != nil || !created {
			t.Fatalf("create %s: created=%v err=%v", rec.Key, created, err)
		}
	}
	create(&persistence.Record{Key: "s#crashed", Status: persistence.StatusInProgress, Inflight: "3", LeaseUntil: now.Add(-20 * time.Second), UpdatedAt: now.Add(-time.Hour)})
	// Committed 5 minutes ago, its send lost with its holder: COMPLETED, in the index.
	create(&persistence.Record{Key: "s#committed", Status: persistence.StatusCompleted, Inflight: "0", LeaseUntil: now.Add(-4 * time.Minute),
		UpdatedAt: now.Add(-5 * time.Minute), Outbox: []idem.Message{{QueueURL: "http://127.0.0.1:1/000000000000/out", Body: "receipt"}}})

	sweep := func(when string) reaper.SweepResult {
		t.Helper()
		res, err := r.Sweep(ctx)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		return res
	}
	if res := sweep("20 s after the lease"); res.Reaped != 0 || res.Sent != 0 || res.Unsent != 1 {
		t.Fatalf("20 s after the lease ended: %+v; want nothing reaped inside the 30 s grace, the outbox left for later", res)
	}
	now = now.Add(11 * time.Second)
	if res := sweep("31 s after the lease"); res.Reaped != 1 || res.Sent != 0 || res.Unsent != 1 {
		t.Fatalf("31 s after the lease ended: %+v; want the lease of shard 3 reaped, the outbox committed 5 min ago still left", res)
	}
	if rec, err := store.Get(ctx, "s#crashed", now); err != nil || rec.Status != persistence.StatusFailed || rec.Error != reaper.ReasonLeaseExpired {
		t.Fatalf("reaped record: %+v, %v", rec, err)
	}
	// 15 min after the commit: past MaxLease but not past Grace + MaxLease. A record
	// committed up to Grace earlier may still hold a lease that has not ended past the
	// grace, so not be listed yet: the outbox waits.
	now = now.Add(9*time.Minute + 49*time.Second)
	if res := sweep("past MaxLease"); res.Sent != 0 || res.Unsent != 1 || sender.sent.Load() != 0 {
		t.Fatalf("15 min after the commit: %+v, %d sent; want the outbox left until Grace + MaxLease", res, sender.sent.Load())
	}
	now = now.Add(41 * time.Second) // the commit is 15 min 41 s old
	if res := sweep("past grace and MaxLease"); res.Sent != 1 || res.Unsent != 0 || sender.sent.Load() != 1 {
		t.Fatalf("past Grace + MaxLease: %+v, %d sent; want the pending outbox sent", res, sender.sent.Load())
	}
}

// unreadable is a store whose reads of one key fail.
type unreadable struct {
	persistence.Store
	key string
}

func (u *unreadable) Get(ctx context.Context, key string, now time.Time) (*persistence.Record, error) {
	if key == u.key {
		return nil, fmt.Errorf("injected: the read of %s failed", key)
	}
	return u.Store.Get(ctx, key, now)
}

// pendingOutbox writes a COMPLETED record of key, committed ago before now (its lease
// ended a minute later), still in the in-flight index with one outbound message pending:
// what a crash between the commit and the send leaves.
func pendingOutbox(t *testing.T, mem *memstore.MemoryStore, key string, now time.Time, ago time.Duration) {
	t.Helper()
	rec := &persistence.Record{Key: key, Status: persistence.StatusCompleted, Inflight: "0", LeaseToken: "tok-" + key, Attempt: 1,
		LeaseUntil: now.Add(-ago + time.Minute), UpdatedAt: now.Add(-ago), CreatedAt: now.Add(-ago - time.Minute), ExpiresAt: now.Add(time.Hour),
		Outbox: []idem.Message{{QueueURL: "http://127.0.0.1:1/000000000000/out", Body: "receipt of " + key}}}
	if _, created, err := mem.Create(context.Background(), rec, now); err != nil || !created {
		t.Fatalf("create %s: created=%v err=%v", key, created, err)
	}
}

// TestReaperCutBeforeAnUnreadRecord: a listed record the sweep could not read may have
// been committed before any record committed after its lease end less MaxLease: those
// records' outboxes wait for a later sweep (FIFO order), though their commits are past
// Grace + MaxLease.
func TestReaperCutBeforeAnUnreadRecord(t *testing.T) {
	ctx := context.Background()
	mem := memstore.NewMemoryStore()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for key, ago := range map[string]time.Duration{"s#earliest": 40 * time.Minute, "s#unread": 18 * time.Minute, "s#later": 17 * time.Minute, "s#latest": 16 * time.Minute} {
		pendingOutbox(t, mem, key, now, ago)
	}
	// Listed, not reapable, with nothing to send: its lease was lost to a commit.
	done := &persistence.Record{Key: "s#done", Status: persistence.StatusCompleted, Inflight: "0", LeaseToken: "tok-done", Attempt: 1,
		LeaseUntil: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Hour), CreatedAt: now.Add(-time.Hour), ExpiresAt: now.Add(time.Hour)}
	if _, created, err := mem.Create(ctx, done, now); err != nil || !created {
		t.Fatalf("create s#done: %v %v", created, err)
	}
	sender := &okSender{}
	r := &reaper.Reaper{Store: &unreadable{Store: mem, key: "s#unread"}, Shards: 1, Clock: func() time.Time { return now }, Sender: sender}
	res, err := r.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// s#unread's lease ended 17 min ago: a record committed up to MaxLease (15 min)
	// before that could come after it; s#later and s#latest, committed 17 and 16 min
	// ago, wait, and s#earliest, committed 40 min ago, goes.
	if res.Sent != 1 || res.Unsent != 2 || res.Lost != 1 || sender.sent.Load() != 1 {
		t.Fatalf("sweep: %+v, %d sent; want s#earliest's outbox sent, the two after the cut left for a later sweep, s#done counted lost", res, sender.sent.Load())
	}
	r.Store = mem // the read works again
	if res, err := r.Sweep(ctx); err != nil || res.Sent != 3 || sender.sent.Load() != 4 {
		t.Fatalf("the next sweep: %+v, %v, %d sent in all; want the three outboxes left sent", res, err, sender.sent.Load())
	}
}

// staleFails is a store whose listing of one shard fails.
type staleFails struct {
	persistence.Store
	shard string
}

func (s *staleFails) Stale(ctx context.Context, shard string, before time.Time, limit int, cursor string) ([]persistence.StaleLease, string, error) {
	if shard == s.shard {
		return nil, "", fmt.Errorf("injected: shard %s could not be listed", shard)
	}
	return s.Store.Stale(ctx, shard, before, limit, cursor)
}

// TestIncompleteSweepSendsNothing: a sweep that could not list every shard sends no
// pending outbox, however old: a record of the shard it missed may have been committed
// before it.
func TestIncompleteSweepSendsNothing(t *testing.T) {
	ctx := context.Background()
	mem := memstore.NewMemoryStore()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	pendingOutbox(t, mem, "s#old", now, 2*time.Hour)
	sender := &okSender{}
	r := &reaper.Reaper{Store: &staleFails{Store: mem, shard: "1"}, Shards: 2, Clock: func() time.Time { return now }, Sender: sender}
	res, err := r.Sweep(ctx)
	if err == nil || res.Unsent != 1 || res.Sent != 0 || sender.sent.Load() != 0 {
		t.Fatalf("sweep with shard 1 unlisted: %+v, %v, %d sent; want its error and the outbox of shard 0 left unsent", res, err, sender.sent.Load())
	}
}

// TestSweepCountsAFailedSend: a pending outbox whose send fails is counted unsent and
// stays pending for the next sweep.
func TestSweepCountsAFailedSend(t *testing.T) {
	ctx := context.Background()
	mem := memstore.NewMemoryStore()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	pendingOutbox(t, mem, "s#old", now, 2*time.Hour)
	sender := &failingSender{}
	res, err := (&reaper.Reaper{Store: mem, Shards: 1, Clock: func() time.Time { return now }, Sender: sender}).Sweep(ctx)
	if err != nil || res.Sent != 0 || res.Unsent != 1 || sender.calls.Load() != 1 {
		t.Fatalf("sweep with SQS down: %+v, %v, %d calls; want one unsent", res, err, sender.calls.Load())
	}
	if got, err := mem.Get(ctx, "s#old", now); err != nil || len(got.Outbox) != 1 {
		t.Fatalf("the record after the failed send: %+v, %v; want its outbox still pending", got, err)
	}
}

// slowListing is a store whose listings take a while.
type slowListing struct {
	persistence.Store
	took time.Duration
}

func (s *slowListing) Stale(ctx context.Context, shard string, before time.Time, limit int, cursor string) ([]persistence.StaleLease, string, error) {
	time.Sleep(s.took)
	return s.Store.Stale(ctx, shard, before, limit, cursor)
}

// TestSweepStopsAtItsMarginMidPage: a sweep whose listing used up the time before its
// margin reaps nothing more of the page and says it was truncated.
func TestSweepStopsAtItsMarginMidPage(t *testing.T) {
	mem := memstore.NewMemoryStore()
	now := time.Now()
	rec := &persistence.Record{Key: "s#dead", Status: persistence.StatusInProgress, Inflight: "0", LeaseToken: "tok", Attempt: 1,
		LeaseUntil: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Hour), CreatedAt: now.Add(-time.Hour), ExpiresAt: now.Add(time.Hour)}
	if _, created, err := mem.Create(context.Background(), rec, now); err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	// 600 ms before the 1 s margin when the sweep starts; the listing takes 900 ms.
	ctx, cancel := context.WithTimeout(context.Background(), 1600*time.Millisecond)
	defer cancel()
	res, err := (&reaper.Reaper{Store: &slowListing{Store: mem, took: 900 * time.Millisecond}, Shards: 1, Margin: time.Second}).Sweep(ctx)
	if err != nil || !res.Truncated || res.Reaped != 0 || res.Scanned != 1 {
		t.Fatalf("sweep: %+v, %v; want the listed lease left, truncated", res, err)
	}
	if got, err := mem.Get(context.Background(), "s#dead", time.Now()); err != nil || got.Status != persistence.StatusInProgress {
		t.Fatalf("the lease after the sweep: %+v, %v; want it left for the next sweep", got, err)
	}
}

// gone is a store whose reads of one key find nothing (TTL deleted it after the listing).
type gone struct {
	persistence.Store
	key string
}

func (g *gone) Get(ctx context.Context, key string, now time.Time) (*persistence.Record, error) {
	if key == g.key {
		return nil, fmt.Errorf("injected: %w", idem.ErrNotFound)
	}
	return g.Store.Get(ctx, key, now)
}

// TestSweepRecordDeletedAfterItsListing: a listed record deleted before the sweep reads
// it is counted lost and holds back nothing: the outbox after it is sent.
func TestSweepRecordDeletedAfterItsListing(t *testing.T) {
	ctx := context.Background()
	mem := memstore.NewMemoryStore()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for key, ago := range map[string]time.Duration{"s#deleted": 50 * time.Minute, "s#pending": 40 * time.Minute} {
		pendingOutbox(t, mem, key, now, ago)
	}
	sender := &okSender{}
	res, err := (&reaper.Reaper{Store: &gone{Store: mem, key: "s#deleted"}, Shards: 1, Clock: func() time.Time { return now }, Sender: sender}).Sweep(ctx)
	if err != nil || res.Lost != 1 || res.Sent != 1 || res.Unsent != 0 || sender.sent.Load() != 1 {
		t.Fatalf("sweep: %+v, %v, %d sent; want the deleted record lost and the other's outbox sent", res, err, sender.sent.Load())
	}
}

// limits is a Store that records the limit of each Stale query.
type limits struct {
	persistence.Store
	got []int
}

func (l *limits) Stale(ctx context.Context, shard string, before time.Time, limit int, cursor string) ([]persistence.StaleLease, string, error) {
	l.got = append(l.got, limit)
	return l.Store.Stale(ctx, shard, before, limit, cursor)
}

// TestReaperPageAndMarginDefaults: without PageSize, each index query asks for at most
// 100 leases (150 stale leases take two pages of shard 0); without Margin, a sweep whose
// context ends in 1 s stops at once, under the 2 s margin, reaping nothing.
func TestReaperPageAndMarginDefaults(t *testing.T) {
	ctx := context.Background()
	mem := memstore.NewMemoryStore()
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for i := range 150 {
		rec := &persistence.Record{Key: fmt.Sprintf("s#k%03d", i), Status: persistence.StatusInProgress, Inflight: "0", LeaseToken: "tok", Attempt: 1,
			LeaseUntil: now.Add(-time.Hour), ExpiresAt: now.Add(time.Hour), CreatedAt: now.Add(-2 * time.Hour), UpdatedAt: now.Add(-2 * time.Hour)}
		if _, created, err := mem.Create(ctx, rec, now); err != nil || !created {
			t.Fatalf("create: %v %v", created, err)
		}
	}
	store := &limits{Store: mem}
	r := &reaper.Reaper{Store: store, Shards: 1, Clock: func() time.Time { return now }}

	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if res, err := r.Sweep(short); err != nil || !res.Truncated || res.Reaped != 0 || len(store.got) != 0 {
		t.Fatalf("a sweep with 1 s left: %+v, %v, %d queries; want it stopped before any, truncated", res, err, len(store.got))
	}
	res, err := r.Sweep(ctx)
	if err != nil || res.Reaped != 150 || res.Truncated {
		t.Fatalf("sweep: %+v, %v; want the 150 leases reaped", res, err)
	}
	if !slices.Equal(store.got, []int{100, 100}) {
		t.Fatalf("the index queries asked for %v leases, want [100 100]", store.got)
	}
}
