package idem_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
)

// TestMemoryStoreHonoursTheContext: every call of the in-memory store on a done context
// fails with the context's error and changes nothing, as a DynamoDB call whose context
// is done never reaches the table (the simulator's handlers and the reaper's deadline
// rely on it).
func TestMemoryStoreHonoursTheContext(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	store := memstore.NewMemoryStore()
	live := context.Background()
	rec := &persistence.Record{Key: "s#k", Status: persistence.StatusInProgress, LeaseToken: "tok", LeaseUntil: now.Add(time.Minute), Inflight: "0",
		Attempt: 1, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if _, created, err := store.Create(live, rec, now); err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	before, err := store.Get(live, "s#k", now)
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(live)
	cancel()
	lease := persistence.Lease{Key: "s#k", Token: "tok", Until: now.Add(time.Minute), Shard: "0"}
	calls := map[string]func() error{
		"Create": func() error {
			_, _, err := store.Create(done, &persistence.Record{Key: "s#other", Status: persistence.StatusInProgress, ExpiresAt: now.Add(time.Hour)}, now)
			return err
		},
		"Takeover": func() error {
			_, err := store.Takeover(done, before, persistence.Lease{Key: "s#k", Token: "tok2", Until: now.Add(2 * time.Minute)}, now.Add(time.Hour), now)
			return err
		},
		"Complete": func() error {
			return store.Complete(done, lease, persistence.Completion{Response: []byte(`{}`), ExpiresAt: now.Add(time.Hour)}, now)
		},
		"Put": func() error {
			_, err := store.Put(done, &persistence.Record{Key: "s#k", Status: persistence.StatusCompleted, ExpiresAt: now.Add(time.Hour)}, nil, before, now)
			return err
		},
		"MarkSent":  func() error { return store.MarkSent(done, "s#k", "tok", 0, nil, now) },
		"Retry":     func() error { return store.Retry(done, "s#k", "tok", "why", now) },
		"ReadGuard": func() error { _, err := store.ReadGuard(done, "t", map[string]types.AttributeValue{}); return err },
		"FailWith": func() error {
			return store.FailWith(done, lease, persistence.Failure{Reason: "why"}, now.Add(time.Hour), now)
		},
		"AddStep": func() error { return store.AddStep(done, lease, "step", nil, time.Time{}, now) },
		"Extend":  func() error { return store.Extend(done, lease, now.Add(2*time.Minute), now) },
		"Get":     func() error { _, err := store.Get(done, "s#k", now); return err },
		"Stale":   func() error { _, _, err := store.Stale(done, "0", now.Add(time.Hour), 10, ""); return err },
		"Reap": func() error {
			return store.Reap(done, persistence.StaleLease{Key: "s#k", Token: "tok", LeaseUntil: now.Add(time.Minute)}, reaper.ReasonLeaseExpired, now.Add(time.Hour))
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s on a canceled context: %v, want context.Canceled", name, err)
		}
	}
	after, err := store.Get(live, "s#k", now)
	if err != nil {
		t.Fatal(err)
	}
	if store.Len() != 1 || after.Status != before.Status || after.LeaseToken != before.LeaseToken || !after.LeaseUntil.Equal(before.LeaseUntil) ||
		after.Attempt != before.Attempt || len(after.Steps) != 0 || after.Response != nil {
		t.Errorf("the record after the canceled calls: %+v (%d records), want it as it was: %+v", after, store.Len(), before)
	}
}

// memBase is a time with nothing below the second, so that the tests can add
// sub-millisecond and sub-second parts of their own.
var memBase = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// memInProgress creates an IN_PROGRESS record of key under token on shard "0" whose
// lease ends at until.
func memInProgress(t *testing.T, store *memstore.MemoryStore, key, token string, until time.Time) *persistence.Record {
	t.Helper()
	rec := &persistence.Record{Key: key, Status: persistence.StatusInProgress, LeaseToken: token, LeaseUntil: until, Inflight: "0",
		Owner: "req-1", Attempt: 1, CreatedAt: memBase, UpdatedAt: memBase, ExpiresAt: memBase.Add(24 * time.Hour)}
	if _, created, err := store.Create(context.Background(), rec, memBase); err != nil || !created {
		t.Fatalf("create %s: %v %v", key, created, err)
	}
	got, err := store.Get(context.Background(), key, memBase)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestMemoryStoreTakeoverIsRefusedUnlessTheRecordIsExactlyAsSeen: a takeover is a
// compare-and-swap on the token, the status and the lease end the caller saw; a seen
// record that differs from the stored one in any one of them (or a record that is gone)
// gives ErrLeaseLost and leaves the record as it was.
func TestMemoryStoreTakeoverIsRefusedUnlessTheRecordIsExactlyAsSeen(t *testing.T) {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	lease := memBase.Add(time.Second)
	stored := memInProgress(t, store, "s#k", "t1", lease)
	now := memBase.Add(time.Minute) // the lease has run out
	next := persistence.Lease{Key: "s#k", Token: "t2", Until: now.Add(time.Minute), Owner: "req-2", Shard: "0"}

	differ := map[string]func(r *persistence.Record){
		"token":     func(r *persistence.Record) { r.LeaseToken = "t0" },
		"status":    func(r *persistence.Record) { r.Status = persistence.StatusFailed },
		"lease end": func(r *persistence.Record) { r.LeaseUntil = r.LeaseUntil.Add(time.Millisecond) },
		"key":       func(r *persistence.Record) { r.Key = "s#gone" },
	}
	for name, change := range differ {
		seen := *stored
		change(&seen)
		got, err := store.Takeover(ctx, &seen, next, now.Add(time.Hour), now)
		if !errors.Is(err, idem.ErrLeaseLost) || got != nil {
			t.Errorf("takeover of a record seen with another %s: %+v, %v; want ErrLeaseLost", name, got, err)
		}
		after, err := store.Get(ctx, "s#k", now)
		if err != nil {
			t.Fatal(err)
		}
		if after.LeaseToken != "t1" || after.Attempt != 1 || !after.LeaseUntil.Equal(lease) || after.Owner != "req-1" {
			t.Errorf("after the refused takeover (%s differs): %+v, want the record untouched", name, after)
		}
	}
	if store.Len() != 1 {
		t.Errorf("%d records after the refused takeovers, want 1", store.Len())
	}
	got, err := store.Takeover(ctx, stored, next, now.Add(time.Hour), now)
	if err != nil || got.LeaseToken != "t2" || got.Attempt != 2 {
		t.Fatalf("takeover of the record as seen: %+v, %v", got, err)
	}
}

// TestMemoryStoreTakeoverInstallsTheNewLeaseAndClearsTheFailure: taking over a
// retryable FAILED record installs the new lease (token, end, owner, shard: the record
// joins the shard's in-flight listing), stamps the update time and the new TTL at their
// stored precision (ms, s), counts the attempt, keeps the steps and clears the last
// failure (reason, retryable flag, category, public reason).
func TestMemoryStoreTakeoverInstallsTheNewLeaseAndClearsTheFailure(t *testing.T) {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	memInProgress(t, store, "s#k", "t1", memBase.Add(time.Second))
	l1 := persistence.Lease{Key: "s#k", Token: "t1"}
	if err := store.AddStep(ctx, l1, "charged", nil, time.Time{}, memBase); err != nil {
		t.Fatal(err)
	}
	f := persistence.Failure{Reason: "boom", Retryable: true, Category: persistence.CategoryRefused, Public: "card declined"}
	if err := store.FailWith(ctx, l1, f, memBase.Add(time.Hour), memBase); err != nil {
		t.Fatal(err)
	}
	seen, err := store.Get(ctx, "s#k", memBase)
	if err != nil {
		t.Fatal(err)
	}
	if seen.Error != "boom" || !seen.Retryable || seen.Category != persistence.CategoryRefused || seen.Public != "card declined" || seen.Inflight != "" {
		t.Fatalf("the failed record: %+v", seen)
	}

	now := memBase.Add(time.Minute + 123456789*time.Nanosecond)
	next := persistence.Lease{Key: "s#k", Token: "t2", Until: now.Add(30 * time.Second), Owner: "req-2", Shard: "3"}
	expiresAt := now.Add(48 * time.Hour)
	got, err := store.Takeover(ctx, seen, next, expiresAt, now)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := store.Get(ctx, "s#k", now)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*persistence.Record{"returned": got, "stored": stored} {
		if r.Status != persistence.StatusInProgress || r.LeaseToken != "t2" || !r.LeaseUntil.Equal(next.Until.Truncate(time.Millisecond)) {
			t.Errorf("%s record: status %s token %q lease %v, want the new lease", name, r.Status, r.LeaseToken, r.LeaseUntil)
		}
		if r.Inflight != "3" || r.Owner != "req-2" {
			t.Errorf("%s record: shard %q owner %q, want %q %q", name, r.Inflight, r.Owner, "3", "req-2")
		}
		if !r.UpdatedAt.Equal(now.Truncate(time.Millisecond)) {
			t.Errorf("%s record: updated at %v, want %v", name, r.UpdatedAt, now.Truncate(time.Millisecond))
		}
		if !r.ExpiresAt.Equal(expiresAt.Truncate(time.Second)) {
			t.Errorf("%s record: expires at %v, want the new TTL %v", name, r.ExpiresAt, expiresAt.Truncate(time.Second))
		}
		if r.Attempt != 2 || len(r.Steps) != 1 || r.Steps[0] != "charged" {
			t.Errorf("%s record: attempt %d steps %v, want 2 [charged]", name, r.Attempt, r.Steps)
		}
		if r.Error != "" || r.Retryable || r.Category != "" || r.Public != "" {
			t.Errorf("%s record: failure %q retryable %v category %q public %q, want it cleared", name, r.Error, r.Retryable, r.Category, r.Public)
		}
	}
	// The old TTL (an hour) no longer applies: the record is live past it.
	if _, err := store.Get(ctx, "s#k", memBase.Add(2*time.Hour)); err != nil {
		t.Errorf("get past the old TTL: %v, want the record (its TTL was moved)", err)
	}
	stale, _, err := store.Stale(ctx, "3", now.Add(time.Hour), 0, "")
	if err != nil || len(stale) != 1 || stale[0].Key != "s#k" || stale[0].Token != "t2" || stale[0].Owner != "req-2" || stale[0].Attempt != 2 {
		t.Errorf("stale listing of shard 3: %+v, %v; want the taken-over record", stale, err)
	}
}

// randomText is n characters of incompressible-ish text (base64 of random bytes, fixed
// seed).
func randomText(n int) string {
	b := make([]byte, n)
	rand.New(rand.NewSource(int64(n))).Read(b)
	return base64.StdEncoding.EncodeToString(b)[:n]
}

// TestMemoryStoreCompleteRefusesAnOutboxTooLargeToStore: an outbox that does not fit in
// the item even compressed is refused with ErrResponseTooLarge, as DynamoStore refuses
// it, and nothing is committed: the lease is still held and no outbox is stored.
func TestMemoryStoreCompleteRefusesAnOutboxTooLargeToStore(t *testing.T) {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	memInProgress(t, store, "s#k", "t1", memBase.Add(time.Minute))
	l := persistence.Lease{Key: "s#k", Token: "t1"}
	msg := idem.Message{QueueURL: "https://sqs.eu-west-1.amazonaws.com/1/q", Body: randomText(3 * persistence.MaxStoredResponse)}
	err := store.Complete(ctx, l, persistence.Completion{Response: []byte(`{}`), ExpiresAt: memBase.Add(time.Hour), Outbox: []idem.Message{msg}, Group: "g"}, memBase)
	if !errors.Is(err, idem.ErrResponseTooLarge) {
		t.Fatalf("complete with an outbox of %d bytes: %v, want ErrResponseTooLarge", len(msg.Body), err)
	}
	r, err := store.Get(ctx, "s#k", memBase)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != persistence.StatusInProgress || len(r.Outbox) != 0 || r.Response != nil || r.OutboxGroup != "" {
		t.Errorf("after the refused completion: %+v, want the record still in progress without outbox", r)
	}
	if err := store.Extend(ctx, l, memBase.Add(2*time.Minute), memBase); err != nil {
		t.Errorf("the lease after the refused completion: %v, want it still held", err)
	}
}

// TestMemoryStoreCompleteTooLargeErrorReportsTheStoredTotal: a response and an outbox
// that fit one by one but not together are refused with ErrResponseTooLarge, and the
// error reports their total stored size (here both are stored as given: the response is
// random bytes gzip cannot shrink, the outbox is under the compression threshold).
func TestMemoryStoreCompleteTooLargeErrorReportsTheStoredTotal(t *testing.T) {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	memInProgress(t, store, "s#k", "t1", memBase.Add(time.Minute))
	resp := make([]byte, persistence.MaxStoredResponse-64)
	rand.New(rand.NewSource(7)).Read(resp)
	msgs := []idem.Message{{QueueURL: "https://sqs.eu-west-1.amazonaws.com/1/q", Body: strings.Repeat("x", 200)}}
	js, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	err = store.Complete(ctx, persistence.Lease{Key: "s#k", Token: "t1"}, persistence.Completion{Response: resp, ExpiresAt: memBase.Add(time.Hour), Outbox: msgs}, memBase)
	if !errors.Is(err, idem.ErrResponseTooLarge) {
		t.Fatalf("complete: %v, want ErrResponseTooLarge", err)
	}
	if want := fmt.Sprintf("are %d bytes stored", len(resp)+len(js)); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not report the stored total (%q)", err, want)
	}
}

// TestMemoryStoreCompleteWithoutOutboxClearsThePendingGroup: the outbox group is kept
// only while an outbox is pending. A completion without outbox of a record that still
// carried the group of an earlier completion (taken over since) leaves no group, and the
// record leaves the in-flight listing.
func TestMemoryStoreCompleteWithoutOutboxClearsThePendingGroup(t *testing.T) {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	memInProgress(t, store, "s#k", "t1", memBase.Add(time.Minute))
	msgs := []idem.Message{{QueueURL: "https://sqs.eu-west-1.amazonaws.com/1/q.fifo", Body: "hi", GroupID: "g1"}}
	if err := store.Complete(ctx, persistence.Lease{Key: "s#k", Token: "t1"}, persistence.Completion{Response: []byte(`1`), ExpiresAt: memBase.Add(time.Hour), Outbox: msgs, Group: "g1"}, memBase); err != nil {
		t.Fatal(err)
	}
	seen, err := store.Get(ctx, "s#k", memBase)
	if err != nil {
		t.Fatal(err)
	}
	if seen.OutboxGroup != "g1" || len(seen.Outbox) != 1 {
		t.Fatalf("after the completion with outbox: group %q outbox %v, want g1 and the message", seen.OutboxGroup, seen.Outbox)
	}
	now := memBase.Add(time.Second)
	if _, err := store.Takeover(ctx, seen, persistence.Lease{Key: "s#k", Token: "t2", Until: now.Add(time.Minute), Shard: "0"}, now.Add(time.Hour), now); err != nil {
		t.Fatal(err)
	}
	if err := store.Complete(ctx, persistence.Lease{Key: "s#k", Token: "t2"}, persistence.Completion{Response: []byte(`2`), ExpiresAt: now.Add(time.Hour)}, now); err != nil {
		t.Fatal(err)
	}
	r, err := store.Get(ctx, "s#k", now)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != persistence.StatusCompleted || string(r.Response) != "2" || len(r.Outbox) != 0 || r.OutboxGroup != "" || r.Inflight != "" {
		t.Errorf("after the completion without outbox: status %s response %q outbox %v group %q shard %q, want no group and no outbox",
			r.Status, r.Response, r.Outbox, r.OutboxGroup, r.Inflight)
	}
}

// TestMemoryStorePutIsConditionedOnTheRecordAsSeen: Put with seen writes only while the
// record still has seen's token, status and lease end; otherwise it writes nothing and
// returns the record as it is, or nil when the record already holds rec's token (an
// earlier try was applied); a record that is gone gives ErrNotFound.
func TestMemoryStorePutIsConditionedOnTheRecordAsSeen(t *testing.T) {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	now := memBase.Add(time.Minute)
	done := func(key, token string) *persistence.Record {
		return &persistence.Record{Key: key, Status: persistence.StatusCompleted, LeaseToken: token, LeaseUntil: now.Add(time.Minute), Response: []byte(`"done"`),
			Attempt: 2, CreatedAt: memBase, UpdatedAt: now, ExpiresAt: now.Add(time.Hour)}
	}

	ghost := &persistence.Record{Key: "s#gone", Status: persistence.StatusInProgress, LeaseToken: "t1", LeaseUntil: memBase}
	if got, err := store.Put(ctx, done("s#gone", "t2"), nil, ghost, now); !errors.Is(err, idem.ErrNotFound) || got != nil {
		t.Errorf("put over a record that is gone: %+v, %v; want ErrNotFound", got, err)
	}
	if store.Len() != 0 {
		t.Errorf("%d records after the refused put, want 0", store.Len())
	}

	stored := memInProgress(t, store, "s#k", "t1", memBase.Add(time.Second))
	differ := map[string]func(r *persistence.Record){
		"token":     func(r *persistence.Record) { r.LeaseToken = "t0" },
		"status":    func(r *persistence.Record) { r.Status = persistence.StatusFailed },
		"lease end": func(r *persistence.Record) { r.LeaseUntil = r.LeaseUntil.Add(-time.Millisecond) },
	}
	for name, change := range differ {
		seen := *stored
		change(&seen)
		got, err := store.Put(ctx, done("s#k", "t2"), nil, &seen, now)
		if err != nil || got == nil || got.LeaseToken != "t1" || got.Status != persistence.StatusInProgress {
			t.Errorf("put over a record seen with another %s: %+v, %v; want the record as it is", name, got, err)
		}
		if r, _ := store.Get(ctx, "s#k", now); r == nil || r.LeaseToken != "t1" || r.Status != persistence.StatusInProgress {
			t.Errorf("after the refused put (%s differs): %+v, want the record untouched", name, r)
		}
	}

	if got, err := store.Put(ctx, done("s#k", "t2"), nil, stored, now); err != nil || got != nil {
		t.Fatalf("put over the record as seen: %+v, %v; want it written", got, err)
	}
	// The same put again (its answer lost): the record holds its token, so it counts as
	// written, and it is not written twice.
	later := now.Add(time.Second)
	again := done("s#k", "t2")
	again.Response, again.UpdatedAt = []byte(`"again"`), later
	if got, err := store.Put(ctx, again, nil, stored, later); err != nil || got != nil {
		t.Errorf("the put retried: %+v, %v; want nil (already written)", got, err)
	}
	r, err := store.Get(ctx, "s#k", later)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != persistence.StatusCompleted || r.LeaseToken != "t2" || string(r.Response) != `"done"` {
		t.Errorf("the record after the put and its retry: %+v, want the first put's", r)
	}
	// A put with another token whose condition fails returns the record as it is.
	if got, err := store.Put(ctx, done("s#k", "t3"), nil, stored, later); err != nil || got == nil || got.LeaseToken != "t2" {
		t.Errorf("a put of another token on a stale view: %+v, %v; want the record holding t2", got, err)
	}
}

// TestMemoryStorePutStoresTimesAtTheirStoredPrecision: as DynamoDB stores them, a
// record written by Put keeps its lease end, creation and update times to the
// millisecond and its TTL to the second.
func TestMemoryStorePutStoresTimesAtTheirStoredPrecision(t *testing.T) {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	sub := 987654321 * time.Nanosecond
	rec := &persistence.Record{Key: "s#k", Status: persistence.StatusCompleted, LeaseToken: "t1", LeaseUntil: memBase.Add(time.Minute + sub),
		Response: []byte(`1`), Attempt: 1, CreatedAt: memBase.Add(sub), UpdatedAt: memBase.Add(2*time.Second + sub), ExpiresAt: memBase.Add(time.Hour + sub)}
	if got, err := store.Put(ctx, rec, nil, nil, memBase); err != nil || got != nil {
		t.Fatalf("put: %+v, %v", got, err)
	}
	r, err := store.Get(ctx, "s#k", memBase)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]time.Time{
		"lease end":  {r.LeaseUntil, rec.LeaseUntil.Truncate(time.Millisecond)},
		"created at": {r.CreatedAt, rec.CreatedAt.Truncate(time.Millisecond)},
		"updated at": {r.UpdatedAt, rec.UpdatedAt.Truncate(time.Millisecond)},
		"expires at": {r.ExpiresAt, rec.ExpiresAt.Truncate(time.Second)},
	}
	for name, w := range want {
		if !w[0].Equal(w[1]) {
			t.Errorf("%s stored as %v, want %v", name, w[0], w[1])
		}
	}
}

// guardPut is a business Put into table "biz" of item, conditioned on cond.
func guardPut(item map[string]types.AttributeValue, cond string, names map[string]string) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{TableName: aws.String("biz"), Item: item, ConditionExpression: aws.String(cond), ExpressionAttributeNames: names}}
}

// TestMemoryStoreEvaluatesOnlyAttributeNotExistsGuards: of the business writes'
// conditions the memory store evaluates only attribute_not_exists(<attr>) on a string
// attribute the item holds: a second such Put with the same value fails with a
// *WriteConditionError. A condition of any other form, or one naming an attribute the
// item does not hold, is not evaluated: every Put with it commits.
func TestMemoryStoreEvaluatesOnlyAttributeNotExistsGuards(t *testing.T) {
	ctx := context.Background()
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	item := map[string]types.AttributeValue{"id": s("order-1"), "n": &types.AttributeValueMemberN{Value: "1"}}
	cases := []struct {
		name  string
		write types.TransactWriteItem
		guard bool
	}{
		{"guard", guardPut(item, "attribute_not_exists(id)", nil), true},
		{"guard through a name", guardPut(item, " attribute_not_exists( #i ) ", map[string]string{"#i": "id"}), true},
		{"unclosed function", guardPut(item, "attribute_not_exists(id", nil), false},
		{"bare name, no function", guardPut(item, "#i", map[string]string{"#i": "id"}), false},
		{"attribute the item lacks", guardPut(item, "attribute_not_exists(version)", nil), false},
		{"other function", guardPut(item, "attribute_exists(id)", nil), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store := memstore.NewMemoryStore()
			for i, token := range []string{"t1", "t2"} {
				rec := &persistence.Record{Key: fmt.Sprintf("s#%d", i), Status: persistence.StatusCompleted, LeaseToken: token, ExpiresAt: memBase.Add(time.Hour)}
				_, err := store.Put(ctx, rec, []types.TransactWriteItem{c.write}, nil, memBase)
				var wce *idem.WriteConditionError
				switch {
				case i == 1 && c.guard:
					if !errors.As(err, &wce) || len(wce.Failed) != 1 || wce.Failed[0].Index != 0 {
						t.Errorf("second put of the guard: %v, want a *WriteConditionError on write 0", err)
					}
				case err != nil:
					t.Errorf("put %d: %v, want it committed (the condition is not a guard)", i+1, err)
				}
			}
			want := 2
			if c.guard {
				want = 1
			}
			if n := len(store.Committed()); n != want {
				t.Errorf("%d committed transactions, want %d", n, want)
			}
		})
	}
}

// TestMemoryStoreRetryClearsOnlyANonRetryableFailureUnderItsToken: Retry makes a FAILED,
// non-retryable record retryable only under the token that failed it; another token, a
// record that is not FAILED, one already retryable or one that is gone give ErrLeaseLost
// and change nothing.
func TestMemoryStoreRetryClearsOnlyANonRetryableFailureUnderItsToken(t *testing.T) {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	memInProgress(t, store, "s#run", "t1", memBase.Add(time.Minute))
	memInProgress(t, store, "s#k", "t1", memBase.Add(time.Minute))
	if err := store.FailWith(ctx, persistence.Lease{Key: "s#k", Token: "t1"}, persistence.Failure{Reason: "bad input"}, memBase.Add(time.Hour), memBase); err != nil {
		t.Fatal(err)
	}
	refused := []struct{ name, key, token string }{
		{"another token", "s#k", "t0"},
		{"a record that is gone", "s#gone", "t1"},
		{"a record in progress", "s#run", "t1"},
	}
	for _, c := range refused {
		if err := store.Retry(ctx, c.key, c.token, "cleared", memBase); !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("retry of %s: %v, want ErrLeaseLost", c.name, err)
		}
	}
	r, err := store.Get(ctx, "s#k", memBase)
	if err != nil {
		t.Fatal(err)
	}
	if r.Retryable || r.Error != "bad input" {
		t.Errorf("after the refused retries: retryable %v error %q, want the failure as it was", r.Retryable, r.Error)
	}
	if r, _ := store.Get(ctx, "s#run", memBase); r == nil || r.Status != persistence.StatusInProgress || r.Retryable {
		t.Errorf("the record in progress after the refused retry: %+v", r)
	}
	now := memBase.Add(time.Second)
	if err := store.Retry(ctx, "s#k", "t1", "cleared", now); err != nil {
		t.Fatalf("retry under the token: %v", err)
	}
	r, err = store.Get(ctx, "s#k", now)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Retryable || r.Error != "cleared" || !r.UpdatedAt.Equal(now) {
		t.Errorf("after the retry: retryable %v error %q updated %v", r.Retryable, r.Error, r.UpdatedAt)
	}
	if err := store.Retry(ctx, "s#k", "t1", "again", now); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("retry of a record already retryable: %v, want ErrLeaseLost", err)
	}
}

// TestMemoryStoreReadGuardReadsByOneStringKey: ReadGuard finds the item a committed
// guard wrote by its one-attribute key; a key of another type finds nothing (the guard
// was keyed by a string); a key of no or several attributes, which the memory store
// cannot resolve, is refused with an error rather than answered with a guess.
func TestMemoryStoreReadGuardReadsByOneStringKey(t *testing.T) {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	item := map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "7"}, "amount": &types.AttributeValueMemberN{Value: "12"}}
	rec := &persistence.Record{Key: "s#k", Status: persistence.StatusCompleted, LeaseToken: "t1", ExpiresAt: memBase.Add(time.Hour)}
	if _, err := store.Put(ctx, rec, []types.TransactWriteItem{guardPut(item, "attribute_not_exists(id)", nil)}, nil, memBase); err != nil {
		t.Fatal(err)
	}
	got, err := store.ReadGuard(ctx, "biz", map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "7"}})
	if err != nil || got["amount"] == nil {
		t.Fatalf("read of the guard: %v, %v; want its item", got, err)
	}
	if got, err := store.ReadGuard(ctx, "biz", map[string]types.AttributeValue{"id": &types.AttributeValueMemberN{Value: "7"}}); err != nil || got != nil {
		t.Errorf("read by a number key: %v, %v; want nothing", got, err)
	}
	for _, key := range []map[string]types.AttributeValue{
		{},
		{"id": &types.AttributeValueMemberS{Value: "7"}, "sk": &types.AttributeValueMemberS{Value: "x"}},
	} {
		if got, err := store.ReadGuard(ctx, "biz", key); err == nil {
			t.Errorf("read by a key of %d attributes: %v, nil error; want an error", len(key), got)
		}
	}
}

// TestMemoryStoreFailWithSetsTheTTLAndTheUpdateTime: FailWith stores the new TTL (to the
// second) and the update time (to the millisecond); the record counts as absent once
// that TTL has passed.
func TestMemoryStoreFailWithSetsTheTTLAndTheUpdateTime(t *testing.T) {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	memInProgress(t, store, "s#k", "t1", memBase.Add(time.Minute))
	now := memBase.Add(10*time.Second + 456789*time.Microsecond)
	expiresAt := now.Add(time.Minute)
	if err := store.FailWith(ctx, persistence.Lease{Key: "s#k", Token: "t1"}, persistence.Failure{Reason: "bad"}, expiresAt, now); err != nil {
		t.Fatal(err)
	}
	r, err := store.Get(ctx, "s#k", now)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != persistence.StatusFailed || !r.ExpiresAt.Equal(expiresAt.Truncate(time.Second)) || !r.UpdatedAt.Equal(now.Truncate(time.Millisecond)) {
		t.Errorf("after FailWith: status %s expires %v updated %v; want FAILED, %v, %v", r.Status, r.ExpiresAt, r.UpdatedAt,
			expiresAt.Truncate(time.Second), now.Truncate(time.Millisecond))
	}
	if _, err := store.Get(ctx, "s#k", expiresAt.Add(time.Second)); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("get past the failure's TTL: %v, want ErrNotFound", err)
	}
}

// TestMemoryStoreAddStepIsFencedAndStampsTheUpdate: AddStep under a lost lease gives
// ErrLeaseLost and records nothing; under the lease it records the step once and stamps
// the update time (to the millisecond).
func TestMemoryStoreAddStepIsFencedAndStampsTheUpdate(t *testing.T) {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	memInProgress(t, store, "s#k", "t1", memBase.Add(time.Minute))
	if err := store.AddStep(ctx, persistence.Lease{Key: "s#k", Token: "t0"}, "charged", nil, time.Time{}, memBase); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("step under another token: %v, want ErrLeaseLost", err)
	}
	if err := store.AddStep(ctx, persistence.Lease{Key: "s#gone", Token: "t1"}, "charged", nil, time.Time{}, memBase); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("step of a record that is gone: %v, want ErrLeaseLost", err)
	}
	if r, _ := store.Get(ctx, "s#k", memBase); r == nil || len(r.Steps) != 0 {
		t.Errorf("after the refused steps: %+v, want no step", r)
	}
	for i, now := range []time.Time{memBase.Add(time.Second + 1500*time.Microsecond), memBase.Add(2*time.Second + 2500*time.Microsecond)} {
		if err := store.AddStep(ctx, persistence.Lease{Key: "s#k", Token: "t1"}, "charged", nil, time.Time{}, now); err != nil {
			t.Fatal(err)
		}
		r, err := store.Get(ctx, "s#k", now)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Steps) != 1 || r.Steps[0] != "charged" || !r.UpdatedAt.Equal(now.Truncate(time.Millisecond)) {
			t.Errorf("after step %d: steps %v updated %v, want [charged] %v", i+1, r.Steps, r.UpdatedAt, now.Truncate(time.Millisecond))
		}
	}
}

// staleFixture stores in-flight records of shard "0" whose lease ends do not follow
// their keys' order (with ties, listed by key), inserted out of order, plus records the
// listing must skip. It returns the keys in listing order (lease end, then key).
func staleFixture(t *testing.T, store *memstore.MemoryStore) []string {
	t.Helper()
	ctx := context.Background()
	type lease struct {
		key string
		at  time.Duration
	}
	ordered := []lease{
		{"s#z", 1 * time.Second}, {"s#y", 2 * time.Second}, {"s#c", 3 * time.Second}, {"s#d", 3 * time.Second},
		{"s#e", 3 * time.Second}, {"s#x", 4 * time.Second}, {"s#a", 5 * time.Second}, {"s#m", 5 * time.Second},
		{"s#b", 6 * time.Second}, {"s#w", 7 * time.Second}, {"s#v", 7*time.Second + time.Millisecond}, {"s#f", 8 * time.Second},
	}
	var keys []string
	for _, l := range ordered {
		keys = append(keys, l.key)
	}
	// Insert in an order unrelated to the listing's (by a hash of the key).
	ins := append([]lease(nil), ordered...)
	for i := range ins {
		for j := i + 1; j < len(ins); j++ {
			if sha256.Sum256([]byte(ins[j].key))[0] < sha256.Sum256([]byte(ins[i].key))[0] {
				ins[i], ins[j] = ins[j], ins[i]
			}
		}
	}
	for i, l := range ins {
		memInProgress(t, store, l.key, fmt.Sprintf("tok-%d", i), memBase.Add(l.at))
	}
	// Not listed: another shard, a lease not ended before the cut, a completed record.
	other := &persistence.Record{Key: "s#other-shard", Status: persistence.StatusInProgress, LeaseToken: "o", LeaseUntil: memBase.Add(time.Second), Inflight: "1", ExpiresAt: memBase.Add(time.Hour)}
	if _, _, err := store.Create(ctx, other, memBase); err != nil {
		t.Fatal(err)
	}
	memInProgress(t, store, "s#live", "l", memBase.Add(time.Hour))
	memInProgress(t, store, "s#done", "d", memBase.Add(time.Second))
	if err := store.Complete(ctx, persistence.Lease{Key: "s#done", Token: "d"}, persistence.Completion{Response: []byte(`1`), ExpiresAt: memBase.Add(time.Hour)}, memBase); err != nil {
		t.Fatal(err)
	}
	return keys
}

var staleCut = memBase.Add(time.Minute)

// TestMemoryStoreStaleListsInLeaseOrderAcrossPages: Stale lists the shard's records
// whose lease ended before the cut, oldest lease first and by key among equal lease
// ends, and pages through them with its cursors without repeating or skipping one,
// whatever the page size; the last page has no cursor.
func TestMemoryStoreStaleListsInLeaseOrderAcrossPages(t *testing.T) {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	want := staleFixture(t, store)
	for _, limit := range []int{1, 2, 3, 5, 11} {
		var got []string
		cursor, pages := "", 0
		for {
			page, next, err := store.Stale(ctx, "0", staleCut, limit, cursor)
			if err != nil {
				t.Fatalf("limit %d, page %d: %v", limit, pages+1, err)
			}
			pages++
			if len(page) > limit {
				t.Errorf("limit %d: page of %d", limit, len(page))
			}
			for _, sl := range page {
				got = append(got, sl.Key)
			}
			if next == "" || pages > len(want)+1 {
				break
			}
			cursor = next
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("limit %d: listed %v, want %v", limit, got, want)
		}
	}
}

// TestMemoryStoreStaleWithoutALimitOrOnAFullLastPageEnds: a limit of 0 lists every
// stale record on one page, and a page holding exactly the remaining records is the
// last one: in both cases no cursor comes back.
func TestMemoryStoreStaleWithoutALimitOrOnAFullLastPageEnds(t *testing.T) {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	want := staleFixture(t, store)
	for _, limit := range []int{0, len(want)} {
		page, next, err := store.Stale(ctx, "0", staleCut, limit, "")
		if err != nil || len(page) != len(want) || next != "" {
			t.Errorf("limit %d: %d records, cursor %q, %v; want all %d and no cursor", limit, len(page), next, err, len(want))
		}
	}
	first, next, err := store.Stale(ctx, "0", staleCut, 4, "")
	if err != nil || len(first) != 4 || next == "" {
		t.Fatalf("first page of 4: %d, %q, %v", len(first), next, err)
	}
	rest, last, err := store.Stale(ctx, "0", staleCut, len(want)-4, next)
	if err != nil || len(rest) != len(want)-4 || last != "" || rest[0].Key != want[4] {
		t.Errorf("a page of exactly the rest: %d records from %v, cursor %q, %v; want %d from %s and no cursor", len(rest), rest, last, err, len(want)-4, want[4])
	}
}

// TestMemoryStoreStaleRefusesAMalformedCursor: a cursor that is not one Stale handed out
// (no separator, or no lease end before it) is refused with an error, not read as
// "from the start".
func TestMemoryStoreStaleRefusesAMalformedCursor(t *testing.T) {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	staleFixture(t, store)
	for _, cursor := range []string{"garbage", "1795780800000", "soon|s#c"} {
		if page, next, err := store.Stale(ctx, "0", staleCut, 5, cursor); err == nil {
			t.Errorf("cursor %q: %d records, next %q, nil error; want an error", cursor, len(page), next)
		}
	}
}

// TestMemoryStoreReapIsFencedOnTheListedLeaseEnd: Reap fails a lease only if the record
// still has the token and the lease end it was listed with: a lease extended since the
// listing is not reaped. A reaped record is FAILED, retryable, with the reason, out of
// the in-flight listing, stamped with the reap time (to the millisecond).
func TestMemoryStoreReapIsFencedOnTheListedLeaseEnd(t *testing.T) {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	memInProgress(t, store, "s#k", "t1", memBase.Add(time.Second))
	listed, _, err := store.Stale(ctx, "0", staleCut, 10, "")
	if err != nil || len(listed) != 1 {
		t.Fatalf("stale: %+v, %v", listed, err)
	}
	// The holder extends its lease after the listing (still ended before the cut).
	if err := store.Extend(ctx, persistence.Lease{Key: "s#k", Token: "t1"}, memBase.Add(5*time.Second), memBase); err != nil {
		t.Fatal(err)
	}
	if err := store.Reap(ctx, listed[0], reaper.ReasonLeaseExpired, staleCut); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("reap of a lease extended since its listing: %v, want ErrLeaseLost", err)
	}
	if r, _ := store.Get(ctx, "s#k", staleCut); r == nil || r.Status != persistence.StatusInProgress || r.Inflight != "0" {
		t.Errorf("after the refused reap: %+v, want the record in progress", r)
	}
	listed, _, err = store.Stale(ctx, "0", staleCut, 10, "")
	if err != nil || len(listed) != 1 {
		t.Fatalf("stale: %+v, %v", listed, err)
	}
	now := staleCut.Add(3*time.Second + 777777*time.Nanosecond)
	if err := store.Reap(ctx, listed[0], reaper.ReasonLeaseExpired, now); err != nil {
		t.Fatal(err)
	}
	r, err := store.Get(ctx, "s#k", now)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != persistence.StatusFailed || !r.Retryable || r.Error != reaper.ReasonLeaseExpired || r.Inflight != "" || !r.UpdatedAt.Equal(now.Truncate(time.Millisecond)) {
		t.Errorf("after the reap: status %s retryable %v error %q shard %q updated %v; want FAILED, retryable, %q, no shard, %v",
			r.Status, r.Retryable, r.Error, r.Inflight, r.UpdatedAt, reaper.ReasonLeaseExpired, now.Truncate(time.Millisecond))
	}
	if again, _, _ := store.Stale(ctx, "0", staleCut.Add(time.Hour), 10, ""); len(again) != 0 {
		t.Errorf("stale after the reap: %+v, want none", again)
	}
}
