package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// outbox is a FIFO queue on the emulator that handlers send to, and an SQS client that
// counts its requests.
type outboxQueues struct {
	sqs   *sqs.Client
	calls *awstest.Calls
	url   string
}

func newOutbox(t *testing.T) *outboxQueues {
	t.Helper()
	calls := awstest.NewCalls()
	client := awstest.SQS(t, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, calls.APIOption) })
	q, err := client.CreateQueue(context.Background(), &sqs.CreateQueueInput{
		QueueName:  aws.String(awstest.Name(t, "out") + ".fifo"),
		Attributes: map[string]string{"FifoQueue": "true"},
	})
	if err != nil {
		t.Fatalf("create queue: %v", err)
	}
	t.Cleanup(func() { _, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	calls.Reset()
	return &outboxQueues{sqs: client, calls: calls, url: aws.ToString(q.QueueUrl)}
}

// drain receives and deletes everything in the queue (awstest.Drain).
func (o *outboxQueues) drain(t *testing.T) []sqstypes.Message {
	t.Helper()
	all, err := awstest.Drain(context.Background(), o.sqs, o.url)
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func (o *outboxQueues) msg(body, group string) idem.Message {
	return idem.Message{QueueURL: o.url, Body: body, GroupID: group}
}

func bodies(ms []sqstypes.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, aws.ToString(m.Body))
	}
	return out
}

// failingSender refuses every SendMessageBatch: a consumer that dies, or loses SQS,
// between its commit and its send.
type failingSender struct{ calls atomic.Int64 }

func (f *failingSender) SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.calls.Add(1)
	return nil, errors.New("connection reset")
}

// journalEffect commits the counted effect of id, a guard entry and one outbound message.
func journalEffect(e *env, o *outboxQueues, runs *atomic.Int64, id string) idem.HandlerFunc {
	return func(ctx context.Context, r *idem.Request) (idem.Result, error) {
		runs.Add(1)
		return idem.Result{
			Response: []byte("done " + id),
			Writes:   []types.TransactWriteItem{journal(e, id), e.bizWrite(id)},
			Guards:   []int{0},
			Messages: []idem.Message{o.msg("receipt "+id+" "+string(r.Payload), "g-"+id)},
		}, nil
	}
}

func journal(e *env, id string) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{
		TableName:                aws.String(e.bizTable),
		Item:                     e.bizKey("journal-" + id),
		ConditionExpression:      aws.String("attribute_not_exists(#k)"),
		ExpressionAttributeNames: map[string]string{"#k": e.bizKeyAttr},
	}}
}

// forget deletes the key's record as DynamoDB's TTL does (moto never does).
func (e *env) forget(t *testing.T, c *idem.Client, key string) {
	t.Helper()
	pk, err := c.RecordKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := e.store.(*memstore.MemoryStore); ok {
		m.Forget(pk)
		return
	}
	if _, err := e.ddb.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
		TableName: aws.String(e.table), Key: e.store.(*persistence.DynamoStore).Key(pk),
	}); err != nil {
		t.Fatalf("delete record: %v", err)
	}
}

func (e *env) record(t *testing.T, c *idem.Client, key string) *persistence.Record {
	t.Helper()
	pk, _ := c.RecordKey(key)
	rec, err := e.store.Get(context.Background(), pk, e.clock.Now())
	if err != nil {
		t.Fatalf("record of %s: %v", key, err)
	}
	return rec
}

// TestOutboxSendsOnceAfterTheCommit: the messages go out once, after the commit, with
// the key attribute and a deduplication id; duplicates send nothing.
func TestOutboxSendsOnceAfterTheCommit(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		o := newOutbox(t)
		c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = o.sqs })
		var runs atomic.Int64
		for i := range 3 {
			res, err := c.Do(context.Background(), req("k1", `{"a":1}`), journalEffect(e, o, &runs, "k1"))
			if err != nil || res.Replayed != (i > 0) {
				t.Fatalf("delivery %d: %+v, %v", i, res, err)
			}
		}
		got := o.drain(t)
		if len(got) != 1 || aws.ToString(got[0].Body) != `receipt k1 {"a":1}` {
			t.Fatalf("queue holds %v, want the one receipt", bodies(got))
		}
		m := got[0]
		if v := aws.ToString(m.MessageAttributes[idem.KeyAttribute].StringValue); v != outbox.OutboundKey("contract#k1", 0) {
			t.Errorf("key attribute %q, want the message's own key, %q", v, outbox.OutboundKey("contract#k1", 0))
		}
		if g := m.Attributes["MessageGroupId"]; g != "g-k1" {
			t.Errorf("group %q, want g-k1", g)
		}
		if d := m.Attributes["MessageDeduplicationId"]; d != "contract#k1#0" {
			t.Errorf("deduplication id %q, want the record key and position", d)
		}
		if n := o.calls.Ops()["SendMessageBatch"]; n != 1 {
			t.Errorf("%d SendMessageBatch requests, want 1", n)
		}
		if rec := e.record(t, c, "k1"); len(rec.Outbox) != 0 || rec.Sent != 1 || rec.Inflight != "" {
			t.Errorf("record after the send: outbox %d, sent %d, inflight %q; want none pending, 1 sent, out of the index", len(rec.Outbox), rec.Sent, rec.Inflight)
		}
		// The single-transaction mode runs the handler for every delivery that reaches
		// the store (its commit's condition answers the duplicate); the effect is one.
		if e.bizCount(t, "k1") != 1 || mode == idem.ModeLease && runs.Load() != 1 {
			t.Errorf("handler ran %d times, effects %d", runs.Load(), e.bizCount(t, "k1"))
		}
	})
}

// TestOutboxCrashBetweenCommitAndSend: the commit holds the messages, in both modes
// with the record in the in-flight index; any later delivery sends them, however soon
// it comes (a redelivery inside the committer's lease included: the committer may be
// dead), and the reaper does when no delivery comes.
func TestOutboxCrashBetweenCommitAndSend(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		o := newOutbox(t)
		dead := &failingSender{}
		crashed := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = dead })
		live := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = o.sqs })
		var runs atomic.Int64
		for _, key := range []string{"redelivered", "reaped"} {
			if _, err := crashed.Do(ctx, req(key, `{}`), journalEffect(e, o, &runs, key)); err == nil || idem.IsPermanent(err) {
				t.Fatalf("%s: send failure gave %v, want a retryable error", key, err)
			}
		}
		if n := len(o.drain(t)); n != 0 {
			t.Fatalf("%d messages sent before any send succeeded", n)
		}
		if rec := e.record(t, live, "redelivered"); rec.Status != persistence.StatusCompleted || len(rec.Outbox) != 1 || rec.Inflight == "" {
			t.Fatalf("record after the failed send: %s, outbox %d, inflight %q; want COMPLETED with the message pending, in the index",
				rec.Status, len(rec.Outbox), rec.Inflight)
		}
		// A redelivery whose send fails as well is no replay: its messages are still
		// pending, so it is retried, not acknowledged.
		if _, err := crashed.Do(ctx, req("redelivered", `{}`), journalEffect(e, o, &runs, "redelivered")); err == nil || idem.IsPermanent(err) {
			t.Fatalf("a redelivery whose send fails: %v, want a retryable error", err)
		}
		// At once, inside what was the committer's lease: the redelivery sends.
		res, err := live.Do(ctx, req("redelivered", `{}`), journalEffect(e, o, &runs, "redelivered"))
		if err != nil || !res.Replayed {
			t.Fatalf("redelivery: %+v, %v; want a replay that sends", res, err)
		}
		if got := bodies(o.drain(t)); len(got) != 1 || got[0] != "receipt redelivered {}" {
			t.Fatalf("after the redelivery the queue holds %v, want its one receipt", got)
		}
		if rec := e.record(t, live, "redelivered"); len(rec.Outbox) != 0 || rec.Inflight != "" || rec.Sent != 1 {
			t.Fatalf("record after the redelivery: outbox %d, inflight %q, sent %d; want marked sent, out of the index", len(rec.Outbox), rec.Inflight, rec.Sent)
		}
		// No delivery of "reaped" comes back: the reaper sends its message, in both modes,
		// once no record committed before it can be missing from its listing (Grace +
		// MaxLease after the commit; the lease is 5 minutes without a deadline).
		r := &reaper.Reaper{Store: e.store, Grace: time.Second, MaxLease: 5 * time.Minute, Clock: e.clock.Now, Sender: o.sqs}
		e.clock.Advance(5 * time.Minute)
		if sw, err := r.Sweep(ctx); err != nil || sw.Sent != 0 {
			t.Fatalf("sweep before grace and lease: %+v, %v; want nothing sent yet", sw, err)
		}
		e.clock.Advance(2 * time.Second)
		sw, err := r.Sweep(ctx)
		if err != nil || sw.Sent != 1 || sw.Reaped != 0 || sw.Unsent != 0 {
			t.Fatalf("sweep: %+v, %v; want one record's messages sent and nothing reaped", sw, err)
		}
		if got := bodies(o.drain(t)); len(got) != 1 || got[0] != "receipt reaped {}" {
			t.Fatalf("after the sweep the queue holds %v, want the reaped key's receipt", got)
		}
		if sw, err := r.Sweep(ctx); err != nil || sw.Sent != 0 || sw.Scanned != 0 {
			t.Fatalf("second sweep: %+v, %v; want nothing left", sw, err)
		}
		for _, key := range []string{"redelivered", "reaped"} {
			if res, err := live.Do(ctx, req(key, `{}`), journalEffect(e, o, &runs, key)); err != nil || !res.Replayed {
				t.Fatalf("%s later: %+v, %v", key, res, err)
			}
		}
		if n := len(o.drain(t)); n != 0 {
			t.Fatalf("%d more messages sent by later duplicates", n)
		}
		if mode == idem.ModeLease && runs.Load() != 2 {
			t.Fatalf("handler ran %d times, want 2 (once per key)", runs.Load())
		}
		for _, key := range []string{"redelivered", "reaped"} {
			if n := e.bizCount(t, key); n != 1 {
				t.Fatalf("%s: %d effects, want 1", key, n)
			}
		}
	})
}

// TestSingleTransactionCompletedKeyWhateverTheHandlerSays: in the single-transaction
// mode the handler runs before the record is read, so a redelivery after a commit runs
// it against the state its own commit changed. Whatever it says then, a permanent
// refusal or a retryable error, the completed key is replayed and its pending messages
// are sent.
func TestSingleTransactionCompletedKeyWhateverTheHandlerSays(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		o := newOutbox(t)
		crashed := e.client(t, withMode(idem.ModeSingleTransaction), func(cfg *idem.Config) { cfg.Sender = &failingSender{} })
		live := e.client(t, withMode(idem.ModeSingleTransaction), func(cfg *idem.Config) { cfg.Sender = o.sqs })
		var runs atomic.Int64
		for _, tc := range []struct {
			key string
			now error
		}{
			{"refused-now", idem.Permanent(errors.New("over the limit now that this very payment was applied"))},
			{"failing-now", errors.New("a read timed out")},
		} {
			if _, err := crashed.Do(ctx, req(tc.key, `{}`), journalEffect(e, o, &runs, tc.key)); err == nil || idem.IsPermanent(err) {
				t.Fatalf("%s: send failure gave %v, want a retryable error", tc.key, err)
			}
			res, err := live.Do(ctx, req(tc.key, `{}`), func(context.Context, *idem.Request) (idem.Result, error) { return idem.Result{}, tc.now })
			if err != nil || !res.Replayed || string(res.Response) != "done "+tc.key {
				t.Fatalf("%s: redelivery whose handler now says %v: %+v, %v; want the stored response", tc.key, tc.now, res, err)
			}
			if got := bodies(o.drain(t)); len(got) != 1 || got[0] != "receipt "+tc.key+" {}" {
				t.Fatalf("%s: the queue holds %v, want the pending receipt sent", tc.key, got)
			}
			if rec := e.record(t, live, tc.key); rec.Status != persistence.StatusCompleted || len(rec.Outbox) != 0 {
				t.Fatalf("%s: record %s with %d pending; want COMPLETED, sent", tc.key, rec.Status, len(rec.Outbox))
			}
			if n := e.bizCount(t, tc.key); n != 1 {
				t.Fatalf("%s: %d effects, want 1", tc.key, n)
			}
		}
	})
}

// TestOutboxNotSentWhenGuardedOrRefused: past the record's life the guard stops the
// commit and its messages; a changed payload is a mismatch; a refused commit sends nothing.
func TestOutboxNotSentWhenGuardedOrRefused(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		o := newOutbox(t)
		c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = o.sqs; cfg.TTL = time.Hour })
		var runs atomic.Int64
		h := journalEffect(e, o, &runs, "pay")
		if _, err := c.Do(ctx, req("pay", `{"amount":700}`), h); err != nil {
			t.Fatal(err)
		}
		// Expired but still stored, then deleted as TTL does: both run again, both guarded.
		e.clock.Advance(time.Hour + 2*time.Second)
		if res, err := c.Do(ctx, req("pay", `{"amount":700}`), h); err != nil || !res.Guarded {
			t.Fatalf("after expiry: %+v, %v; want guarded", res, err)
		}
		e.forget(t, c, "pay")
		if res, err := c.Do(ctx, req("pay", `{"amount":700}`), h); err != nil || !res.Guarded {
			t.Fatalf("after deletion: %+v, %v; want guarded", res, err)
		}
		e.forget(t, c, "pay")
		_, err := c.Do(ctx, req("pay", `{"amount":999}`), h)
		if !errors.Is(err, idem.ErrPayloadMismatch) || !idem.IsPermanent(err) {
			t.Fatalf("changed payload after deletion: %v, want a permanent ErrPayloadMismatch", err)
		}
		// The record now holds the applied payload: its duplicates replay, the other is refused.
		if res, err := c.Do(ctx, req("pay", `{"amount":700}`), h); err != nil || !res.Replayed {
			t.Fatalf("applied payload after the mismatch: %+v, %v; want a replay", res, err)
		}
		if _, err := c.Do(ctx, req("pay", `{"amount":999}`), h); !errors.Is(err, idem.ErrPayloadMismatch) {
			t.Fatalf("changed payload within the TTL: %v, want ErrPayloadMismatch", err)
		}
		if got := bodies(o.drain(t)); len(got) != 1 || got[0] != `receipt pay {"amount":700}` {
			t.Fatalf("queue holds %v, want one receipt, for 700", got)
		}
		if e.ddb == nil {
			return // the memory store evaluates guard conditions only
		}
		if n := e.bizCount(t, "pay"); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
		// A business write whose condition fails: nothing committed, nothing sent.
		refused := func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			w := e.bizWrite("closed")
			w.Update.ConditionExpression = aws.String("attribute_exists(open_since)")
			return idem.Result{Writes: []types.TransactWriteItem{w}, Messages: []idem.Message{o.msg("never", "g")}}, nil
		}
		_, err = c.Do(ctx, req("closed", `{}`), refused)
		var wce *idem.WriteConditionError
		if !errors.As(err, &wce) || !idem.IsPermanent(err) {
			t.Fatalf("refused write: %v, want a permanent WriteConditionError", err)
		}
		if n := len(o.drain(t)); n != 0 {
			t.Fatalf("%d messages sent for a refused commit", n)
		}
	})
}

// TestGuardRecognisedAtAnyIndex: a guard is recognised even when a business write before
// it fails too (the redo of an effect whose own condition no longer holds).
func TestGuardRecognisedAtAnyIndex(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		c := e.client(t, withMode(mode))
		h := func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			once := e.bizWrite("late")
			once.Update.UpdateExpression = aws.String("ADD n :one SET done = :one")
			once.Update.ConditionExpression = aws.String("attribute_not_exists(done)")
			if e.ddb == nil {
				once.Update.ExpressionAttributeValues = map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}}
			}
			return idem.Result{Response: []byte("ok"), Writes: []types.TransactWriteItem{once, journal(e, "late")}, Guards: []int{1}}, nil
		}
		if _, err := c.Do(ctx, req("late", `{}`), h); err != nil {
			t.Fatal(err)
		}
		e.forget(t, c, "late")
		res, err := c.Do(ctx, req("late", `{}`), h)
		if err != nil || !res.Guarded {
			t.Fatalf("after deletion: %+v, %v; want guarded although write 0 failed first", res, err)
		}
	})
}

// TestRedriveAfterAFix: a business rule's refusal is dead-lettered with the handler's
// reason, and the same message runs again (once) after the cause was removed.
func TestRedriveAfterAFix(t *testing.T) {
	onDynamoEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		c := e.client(t, withMode(mode))
		var runs atomic.Int64
		h := func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			runs.Add(1)
			w := e.bizWrite("acct")
			w.Update.ConditionExpression = aws.String("attribute_exists(open_since)")
			return idem.Result{Writes: []types.TransactWriteItem{w}, Explain: func(i int, item map[string]types.AttributeValue) string {
				if item == nil {
					return "account acct does not exist"
				}
				return "account acct is closed"
			}}, nil
		}
		for i := range 2 {
			_, err := c.Do(ctx, req("pay-1", `{}`), h)
			var wce *idem.WriteConditionError
			if !errors.As(err, &wce) || !idem.IsPermanent(err) || !strings.Contains(err.Error(), "refused by a business rule: account acct does not exist") {
				t.Fatalf("delivery %d: %v, want the handler's reason, permanent", i, err)
			}
		}
		if runs.Load() != 2 {
			t.Fatalf("handler ran %d times, want 2: a refused record stays retryable for the redrive", runs.Load())
		}
		checkRedrivable(t, e, c, mode, "pay-1")
		// The operator opens the account, then redrives the message.
		if _, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.bizTable), Item: e.bizItem("acct", map[string]types.AttributeValue{
			"open_since": &types.AttributeValueMemberN{Value: "1"},
		})}); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if res, err := c.Do(ctx, req("pay-1", `{}`), h); err != nil || res.Replayed != (i == 1) {
				t.Fatalf("redrive %d: %+v, %v; want applied, then replayed", i, res, err)
			}
		}
		if n := e.bizCount(t, "acct"); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})
}

// TestRefusalBeforeTheCall: a handler that reads its state and refuses before it calls
// out or writes (idem.Refuse) is dead-lettered with its reason, permanently for this
// delivery, and its record stays retryable: redriven after the cause is removed, the
// message runs again, calls out once and applies once. Its step never ran while refused.
func TestRefusalBeforeTheCall(t *testing.T) {
	onDynamoEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		c := e.client(t, withMode(mode))
		var enabled atomic.Bool
		var runs, calls atomic.Int64
		h := func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			runs.Add(1)
			if !enabled.Load() {
				return idem.Result{}, idem.Refuse("endpoint ep-1 is disabled")
			}
			if mode == idem.ModeLease {
				if err := r.Attempt.Step(ctx, "deliver", func(context.Context) error { calls.Add(1); return nil }); err != nil {
					return idem.Result{}, err
				}
			}
			return idem.Result{Response: []byte("delivered"), Writes: []types.TransactWriteItem{e.bizWrite("ep-1")}}, nil
		}
		for i := range 2 {
			_, err := c.Do(ctx, req("hook-1", `{}`), h)
			var refused *idem.RefusedError
			if !errors.As(err, &refused) || !errors.Is(err, idem.ErrRefused) || !idem.IsPermanent(err) ||
				!strings.Contains(err.Error(), "refused by a business rule: endpoint ep-1 is disabled") {
				t.Fatalf("delivery %d: %v, want the handler's refusal, permanent", i, err)
			}
		}
		if runs.Load() != 2 || calls.Load() != 0 {
			t.Fatalf("handler ran %d times and called out %d, want 2 and 0: a refused record stays retryable", runs.Load(), calls.Load())
		}
		checkRedrivable(t, e, c, mode, "hook-1")
		enabled.Store(true) // the operator enables the endpoint, then redrives
		for i := range 2 {
			if res, err := c.Do(ctx, req("hook-1", `{}`), h); err != nil || res.Replayed != (i == 1) || string(res.Response) != "delivered" {
				t.Fatalf("redrive %d: %+v, %v; want applied, then replayed", i, res, err)
			}
		}
		if n := e.bizCount(t, "ep-1"); n != 1 || mode == idem.ModeLease && calls.Load() != 1 {
			t.Fatalf("%d effects and %d calls, want 1 and 1", n, calls.Load())
		}
	})
}

// TestUnlockClearsAPermanentFailure: a stored permanent failure replays until the
// operator clears it; then the next delivery runs the handler.
func TestUnlockClearsAPermanentFailure(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		c := e.client(t, withMode(mode))
		fail := true
		h := func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			if fail {
				return idem.Result{}, idem.Permanent(errors.New("currency XAU not accepted"))
			}
			return idem.Result{Response: []byte("ok")}, nil
		}
		if _, err := c.Do(ctx, req("k", `{}`), h); !idem.IsPermanent(err) {
			t.Fatalf("first: %v", err)
		}
		fail = false // the fix is deployed
		var stored *idem.StoredError
		if _, err := c.Do(ctx, req("k", `{}`), h); !errors.As(err, &stored) {
			t.Fatalf("before the clear: %v, want the stored error", err)
		}
		pk, _ := c.RecordKey("k")
		if _, err := reaper.Unlock(ctx, e.store, pk, "cleared by the operator", e.clock.Now()); err != nil {
			t.Fatalf("unlock: %v", err)
		}
		if res, err := c.Do(ctx, req("k", `{}`), h); err != nil || res.Replayed || string(res.Response) != "ok" {
			t.Fatalf("after the clear: %+v, %v; want a run", res, err)
		}
		if _, err := reaper.Unlock(ctx, e.store, pk, "again", e.clock.Now()); err == nil {
			t.Fatal("unlock of a COMPLETED record succeeded")
		}
	})
}

// TestLostTakeoverAnswerIsRecognised: the takeover's compare-and-swap is applied, its
// answer lost, and the SDK's retry fails on the new token: still ours.
func TestLostTakeoverAnswerIsRecognised(t *testing.T) {
	e := newDynamoEnv(t)
	ctx := context.Background()
	c := e.client(t)
	if _, err := c.Do(ctx, req("k", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{}, errors.New("gateway timeout")
	}); err == nil {
		t.Fatal("first attempt succeeded")
	}
	api := &resend{DynamoDBAPI: e.ddb}
	store, err := persistence.NewDynamoStore(api, e.table)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := idem.New(idem.Config{Store: store, Scope: "contract", Clock: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	res, err := c2.Do(ctx, req("k", `{}`), effect(e, &runs, "k", "ok"))
	if err != nil || res.Attempt != 2 || runs.Load() != 1 {
		t.Fatalf("takeover with its answer lost: %+v, %v, runs %d; want attempt 2 run once", res, err, runs.Load())
	}
	if api.resent.Load() == 0 {
		t.Fatal("no request was resent")
	}
}

// TestInvalidRequestsArePermanent: what DynamoDB refuses as invalid fails for good, with
// DynamoDB's reason, and leaves the record retryable for a redrive after the code fix;
// outbound messages SQS would refuse are found before the commit.
func TestInvalidRequestsArePermanent(t *testing.T) {
	onDynamoEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		o := newOutbox(t)
		c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = o.sqs })
		big := strings.Repeat("x", 410*1024)
		for name, writes := range map[string][]types.TransactWriteItem{
			"two actions on one item": {e.bizWrite("same"), e.bizWrite("same")},
			"item over 400 KB": {{Put: &types.Put{TableName: aws.String(e.bizTable), Item: e.bizItem("big", map[string]types.AttributeValue{
				"blob": &types.AttributeValueMemberS{Value: big},
			})}}},
		} {
			_, err := c.Do(ctx, req(name, `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
				return idem.Result{Writes: writes}, nil
			})
			if !errors.Is(err, idem.ErrInvalidRequest) || !idem.IsPermanent(err) {
				t.Errorf("%s: %v, want a permanent ErrInvalidRequest", name, err)
				continue
			}
			checkRedrivable(t, e, c, mode, name)
		}
		for name, m := range map[string]idem.Message{
			"no group on a FIFO queue":          {QueueURL: o.url, Body: "x"},
			"empty body":                        {QueueURL: o.url, Body: "", GroupID: "g"},
			"control character":                 {QueueURL: o.url, Body: "a\x00b", GroupID: "g"},
			"invalid UTF-8":                     {QueueURL: o.url, Body: "a\xffb", GroupID: "g"},
			"not a URL":                         {QueueURL: "receipts", Body: "x"},
			"not http(s)":                       {QueueURL: "ftp://sqs.us-east-1.amazonaws.com/123456789012/receipts", Body: "x"},
			"a bad deduplication id":            {QueueURL: o.url, Body: "x", GroupID: "g", DeduplicationID: strings.Repeat("d", 129)},
			"deduplication on a standard queue": {QueueURL: strings.TrimSuffix(o.url, ".fifo"), Body: "x", DeduplicationID: "d"},
			"too large":                         {QueueURL: o.url, Body: strings.Repeat("x", sqsmsg.MaxOutboundMessageBytes), GroupID: "g"},
			"ten attributes and the key":        {QueueURL: o.url, Body: "x", GroupID: "g", Attributes: attributes(10)},
			"an attribute without a name":       {QueueURL: o.url, Body: "x", GroupID: "g", Attributes: map[string]string{"": "v"}},
			"an attribute name of 257 bytes":    {QueueURL: o.url, Body: "x", GroupID: "g", Attributes: map[string]string{strings.Repeat("n", 257): "v"}},
			"an attribute without a value":      {QueueURL: o.url, Body: "x", GroupID: "g", Attributes: map[string]string{"n": ""}},
			"an attribute value SQS refuses":    {QueueURL: o.url, Body: "x", GroupID: "g", Attributes: map[string]string{"n": "a\x00b"}},
		} {
			var runs atomic.Int64
			_, err := c.Do(ctx, req("msg "+name, `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
				runs.Add(1)
				return idem.Result{Writes: []types.TransactWriteItem{e.bizWrite("msg " + name)}, Messages: []idem.Message{m}}, nil
			})
			if !errors.Is(err, outbox.ErrInvalidMessage) || !idem.IsPermanent(err) {
				t.Errorf("%s: %v, want a permanent ErrInvalidMessage", name, err)
			}
			if n := e.bizCount(t, "msg "+name); n != 0 {
				t.Errorf("%s: %d effects committed, want 0", name, n)
			}
		}
		// An attribute name of 256 bytes, SQS's most, is sent.
		longName := idem.Message{QueueURL: o.url, Body: "x", GroupID: "g", Attributes: map[string]string{strings.Repeat("n", 256): "v"}}
		if _, err := c.Do(ctx, req("a long attribute name", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Messages: []idem.Message{longName}}, nil
		}); err != nil {
			t.Errorf("an attribute name of 256 bytes: %v", err)
		}
		if n := len(o.drain(t)); n != 1 {
			t.Errorf("an attribute name of 256 bytes: %d messages sent, want 1", n)
		}
		// At most MaxOutboundMessages messages to a record.
		many := func(n int) idem.HandlerFunc {
			return func(context.Context, *idem.Request) (idem.Result, error) {
				msgs := make([]idem.Message, n)
				for i := range msgs {
					msgs[i] = idem.Message{QueueURL: o.url, Body: fmt.Sprint("m", i), GroupID: "g"}
				}
				return idem.Result{Messages: msgs}, nil
			}
		}
		if _, err := c.Do(ctx, req("too many messages", `{}`), many(outbox.MaxOutboundMessages+1)); !errors.Is(err, outbox.ErrInvalidMessage) || !idem.IsPermanent(err) {
			t.Errorf("%d messages: %v, want a permanent ErrInvalidMessage", outbox.MaxOutboundMessages+1, err)
		}
		if n := len(o.drain(t)); n != 0 {
			t.Fatalf("%d messages sent", n)
		}
		if _, err := c.Do(ctx, req("as many messages as allowed", `{}`), many(outbox.MaxOutboundMessages)); err != nil {
			t.Fatalf("%d messages: %v", outbox.MaxOutboundMessages, err)
		}
		if n := len(o.drain(t)); n != outbox.MaxOutboundMessages {
			t.Fatalf("%d messages sent, want %d", n, outbox.MaxOutboundMessages)
		}
	})
}

// TestAppliedSkipsStepsAfterDeletion: a handler with a step outside DynamoDB asks the
// guard first, so a redelivery after the record is gone repeats nothing.
func TestAppliedSkipsStepsAfterDeletion(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		var charges atomic.Int64
		h := func(id string) idem.HandlerFunc {
			return func(ctx context.Context, r *idem.Request) (idem.Result, error) {
				g := journal(e, id)
				applied, err := r.Attempt.Applied(ctx, aws.ToString(g.Put.TableName), e.bizKey("journal-"+id))
				if err != nil {
					return idem.Result{}, err
				}
				if applied {
					return idem.Result{Response: []byte("charged"), Guarded: true}, nil
				}
				if err := r.Attempt.Step(ctx, "charge", func(context.Context) error { charges.Add(1); return nil }); err != nil {
					return idem.Result{}, err
				}
				return idem.Result{Response: []byte("charged"), Writes: []types.TransactWriteItem{g, e.bizWrite(id)}, Guards: []int{0}}, nil
			}
		}
		if _, err := c.Do(ctx, req("order-1", `{"v":1}`), h("order-1")); err != nil {
			t.Fatal(err)
		}
		e.forget(t, c, "order-1")
		res, err := c.Do(ctx, req("order-1", `{"v":1}`), h("order-1"))
		if err != nil || !res.Guarded {
			t.Fatalf("after deletion: %+v, %v; want guarded", res, err)
		}
		e.forget(t, c, "order-1")
		if _, err := c.Do(ctx, req("order-1", `{"v":2}`), h("order-1")); !errors.Is(err, idem.ErrPayloadMismatch) {
			t.Fatalf("another payload after deletion: %v, want ErrPayloadMismatch", err)
		}
		if res, err := c.Do(ctx, req("order-1", `{"v":1}`), h("order-1")); err != nil || !res.Replayed {
			t.Fatalf("applied payload after the mismatch: %+v, %v; want a replay", res, err)
		}
		if n := charges.Load(); n != 1 {
			t.Fatalf("the charge step ran %d times, want 1", n)
		}
	})
}

// partialSender forwards SendMessageBatch to SQS but reports the entries whose body
// contains "refuse" as failed, as SQS does for an entry it rejects.
type partialSender struct{ api *sqs.Client }

func (p *partialSender) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, o ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	keep := *in
	keep.Entries = nil
	var failed []sqstypes.BatchResultErrorEntry
	for _, e := range in.Entries {
		if strings.Contains(aws.ToString(e.MessageBody), "refuse") {
			failed = append(failed, sqstypes.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), SenderFault: false, Message: aws.String("try again")})
			continue
		}
		keep.Entries = append(keep.Entries, e)
	}
	out := &sqs.SendMessageBatchOutput{}
	if len(keep.Entries) > 0 {
		var err error
		if out, err = p.api.SendMessageBatch(ctx, &keep, o...); err != nil {
			return nil, err
		}
	}
	out.Failed = append(out.Failed, failed...)
	return out, nil
}

// TestBatchSendsTheOutboxOnce: a batch's messages go out in one request; a record whose
// message is refused is redelivered, and so are the later records of its FIFO group.
func TestBatchSendsTheOutboxOnce(t *testing.T) {
	onDynamoEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		o := newOutbox(t)
		run := func(c *idem.Client, ev events.SQSEvent) events.SQSEventResponse {
			t.Helper()
			var mu sync.Mutex
			h := idem.HandlerFunc(func(ctx context.Context, r *idem.Request) (idem.Result, error) {
				mu.Lock()
				defer mu.Unlock()
				return idem.Result{Writes: []types.TransactWriteItem{e.bizWrite(r.Key)}, Messages: []idem.Message{o.msg(r.Key, "g-"+r.Key)}}, nil
			})
			var logs bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&logs, nil))
			rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: h, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			p := newProcessor(t, sqsbatch.BatchConfig{Handle: rf, Outbox: c, Logger: log})
			resp, err := p.Process(ctx, ev)
			if err != nil {
				t.Fatal(err)
			}
			// One line per record, with its final outcome.
			lines := logLines(t, &logs)
			if len(lines) != len(ev.Records) {
				t.Errorf("%d log lines for %d records", len(lines), len(ev.Records))
			}
			failedIDs := failureIDs(resp)
			for _, l := range lines {
				id, _ := l["message_id"].(string)
				if failed := slices.Contains(failedIDs, id); failed != (l["level"] == "WARN") {
					t.Errorf("record %s (failed: %v) logged %v", id, failed, l)
				}
			}
			return resp
		}
		c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = o.sqs })
		var ev events.SQSEvent
		for i := range 10 {
			m := keyedMsg(fmt.Sprintf("m%d", i), fmt.Sprintf("k%d", i), "{}")
			m.Attributes = map[string]string{"MessageGroupId": fmt.Sprintf("g%d", i)}
			ev.Records = append(ev.Records, m)
		}
		if resp := run(c, ev); len(resp.BatchItemFailures) != 0 {
			t.Fatalf("failures %v", failureIDs(resp))
		}
		if n := o.calls.Ops()["SendMessageBatch"]; n != 1 {
			t.Fatalf("%d SendMessageBatch requests for 10 records, want 1", n)
		}
		if n := len(o.drain(t)); n != 10 {
			t.Fatalf("%d messages, want 10", n)
		}

		// Group A: a1's message is refused, a2's goes out; group B is fine.
		c2 := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = &partialSender{api: o.sqs} })
		msg := func(id, key, group string) events.SQSMessage {
			m := keyedMsg(id, key, "{}")
			m.Attributes = map[string]string{"MessageGroupId": group}
			return m
		}
		ev2 := events.SQSEvent{Records: []events.SQSMessage{msg("a1", "refuse-a1", "A"), msg("a2", "a2", "A"), msg("b1", "b1", "B")}}
		resp := run(c2, ev2)
		if got := failureIDs(resp); fmt.Sprint(got) != "[a1 a2]" {
			t.Fatalf("failures %v, want a1 (its message refused) and a2 (after it in group A)", got)
		}
		if got := bodies(o.drain(t)); len(got) != 2 {
			t.Fatalf("sent %v, want a2's and b1's", got)
		}
		// SQS redelivers a1 and a2 after the lease; a1's message goes out, a2 is a replay.
		e.clock.Advance(6 * time.Minute)
		resp = run(c, events.SQSEvent{Records: ev2.Records[:2]})
		if len(resp.BatchItemFailures) != 0 {
			t.Fatalf("redelivery failures %v", failureIDs(resp))
		}
		if got := bodies(o.drain(t)); len(got) != 1 || got[0] != "refuse-a1" {
			t.Fatalf("redelivery sent %v, want a1's message only", got)
		}
		for _, k := range []string{"refuse-a1", "a2", "b1"} {
			if n := e.bizCount(t, k); n != 1 {
				t.Errorf("%s: %d effects, want 1", k, n)
			}
		}
	})
}

// checkRedrivable checks that a refused key runs again on its next delivery: the lease
// mode leaves its record FAILED and retryable, the single-transaction mode stores none.
func checkRedrivable(t *testing.T, e *env, c *idem.Client, mode idem.Mode, key string) {
	t.Helper()
	pk, _ := c.RecordKey(key)
	rec, err := e.store.Get(context.Background(), pk, e.clock.Now())
	switch {
	case mode == idem.ModeSingleTransaction && !errors.Is(err, idem.ErrNotFound):
		t.Errorf("%s: record %+v, %v; want none", key, rec, err)
	case mode == idem.ModeLease && (err != nil || rec.Status != persistence.StatusFailed || !rec.Retryable):
		t.Errorf("%s: record %+v, %v; want FAILED and retryable (redrivable after the fix)", key, rec, err)
	}
}

// TestEachOutboundMessageHasItsOwnKey: the messages of one record carry keys of their
// own (OutboundKey), so a consumer built on this package downstream applies each one,
// instead of applying the first and refusing the others as a payload mismatch. Two
// messages with the same explicit key, or the same deduplication id on one FIFO
// queue, are refused before anything commits.
func TestEachOutboundMessageHasItsOwnKey(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		o := newOutbox(t)
		c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = o.sqs })
		three := func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Messages: []idem.Message{o.msg("first", "g"), o.msg("second", "g"), o.msg("third", "g")}}, nil
		}
		if _, err := c.Do(ctx, req("order-1", `{}`), three); err != nil {
			t.Fatal(err)
		}
		got := o.drain(t)
		if len(got) != 3 {
			t.Fatalf("%d messages sent, want 3", len(got))
		}
		pk, _ := c.RecordKey("order-1")
		// Downstream: another consumer on this package, keyed on the messages' own keys.
		down := e.client(t, func(cfg *idem.Config) { cfg.Scope = "downstream" })
		var applied []string
		for i, m := range got {
			key := aws.ToString(m.MessageAttributes[idem.KeyAttribute].StringValue)
			if key != outbox.OutboundKey(pk, i) || m.Attributes["MessageDeduplicationId"] != outbox.DeduplicationID(key) {
				t.Errorf("message %d: key %q, deduplication id %q; want %q and its deduplication id", i, key, m.Attributes["MessageDeduplicationId"], outbox.OutboundKey(pk, i))
			}
			_, err := down.Do(ctx, req(key, aws.ToString(m.Body)), func(_ context.Context, r *idem.Request) (idem.Result, error) {
				applied = append(applied, string(r.Payload))
				return idem.Result{}, nil
			})
			if err != nil {
				t.Errorf("downstream consumer refused message %d: %v", i, err)
			}
		}
		if strings.Join(applied, ",") != "first,second,third" {
			t.Errorf("downstream applied %v, want each message once", applied)
		}
		// A handler that sets the key itself must not give two messages the same one.
		same := func(context.Context, *idem.Request) (idem.Result, error) {
			m := o.msg("a", "g")
			m.Attributes = map[string]string{idem.KeyAttribute: "k"}
			n := m
			n.Body = "b"
			return idem.Result{Messages: []idem.Message{m, n}}, nil
		}
		if _, err := c.Do(ctx, req("order-2", `{}`), same); !errors.Is(err, outbox.ErrInvalidMessage) || !idem.IsPermanent(err) {
			t.Fatalf("two messages with one key: %v, want ErrInvalidMessage", err)
		}
		if n := len(o.drain(t)); n != 0 {
			t.Fatalf("%d messages sent for a refused result", n)
		}
		// Nor the same deduplication id on one FIFO queue: SQS would accept the second
		// and never deliver it.
		sameDedup := func(context.Context, *idem.Request) (idem.Result, error) {
			m, n := o.msg("a", "g"), o.msg("b", "other-group")
			m.DeduplicationID, n.DeduplicationID = "d", "d"
			return idem.Result{Messages: []idem.Message{m, n}}, nil
		}
		if _, err := c.Do(ctx, req("order-4", `{}`), sameDedup); !errors.Is(err, outbox.ErrInvalidMessage) || !idem.IsPermanent(err) {
			t.Fatalf("two messages with one deduplication id: %v, want ErrInvalidMessage", err)
		}
		if n := len(o.drain(t)); n != 0 {
			t.Fatalf("%d messages sent for a refused result", n)
		}
		// Messages that share one attributes map (the handler's own) each get their
		// own key, and the handler's map is left as it was.
		shared := map[string]string{"kind": "receipt"}
		sharing := func(context.Context, *idem.Request) (idem.Result, error) {
			m, n := o.msg("a", "g"), o.msg("b", "g")
			m.Attributes, n.Attributes = shared, shared
			return idem.Result{Messages: []idem.Message{m, n}}, nil
		}
		if _, err := c.Do(ctx, req("order-3", `{}`), sharing); err != nil {
			t.Fatalf("two messages sharing an attributes map: %v", err)
		}
		if len(shared) != 1 {
			t.Errorf("the handler's attributes map was changed: %v", shared)
		}
		if n := len(o.drain(t)); n != 2 {
			t.Fatalf("%d messages sent, want 2", n)
		}
	})
}

// TestWarmCacheOnlyOnceTheOutboxIsSent: a record with outbound messages enters the cache
// when its messages went out, so its duplicate is answered with no request; while they
// are unsent, a duplicate goes to the store and sends them.
func TestWarmCacheOnlyOnceTheOutboxIsSent(t *testing.T) {
	onDynamoEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		o := newOutbox(t)
		var runs atomic.Int64
		h := idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
			runs.Add(1)
			return idem.Result{Response: []byte("ok"), Messages: []idem.Message{o.msg("receipt", "g")}}, nil
		})
		warm := func(s outbox.SQSBatchSender) *idem.Client {
			return e.client(t, withMode(mode), func(c *idem.Config) { c.CacheSize = 10; c.Sender = s })
		}
		sent := warm(o.sqs)
		if _, err := sent.Do(ctx, req("sent", `{}`), h); err != nil {
			t.Fatal(err)
		}
		e.calls.Reset()
		if res, err := sent.Do(ctx, req("sent", `{}`), h); err != nil || !res.Replayed {
			t.Fatalf("duplicate: %+v, %v", res, err)
		}
		if got := e.calls.Ops(); len(got) != 0 {
			t.Errorf("the duplicate of a sent record cost DynamoDB %v, want nothing (the cache)", got)
		}

		failing := warm(&failingSender{})
		if _, err := failing.Do(ctx, req("unsent", `{}`), h); err == nil {
			t.Fatal("a record whose send failed succeeded")
		}
		e.calls.Reset()
		if _, err := failing.Do(ctx, req("unsent", `{}`), h); err == nil {
			t.Fatal("the duplicate of an unsent record was answered from the cache")
		}
		if e.calls.Total() == 0 {
			t.Error("the duplicate of an unsent record made no request")
		}
		// Once a key; in the single-transaction mode the handler runs before the
		// record is read, so the duplicate that reached the store ran it too.
		want := map[idem.Mode]int64{idem.ModeLease: 2, idem.ModeSingleTransaction: 3}[mode]
		if runs.Load() != want {
			t.Errorf("handler ran %d times, want %d", runs.Load(), want)
		}
		if got := bodies(o.drain(t)); len(got) != 1 {
			t.Errorf("sent %v, want the one receipt", got)
		}
	})
}

// attributes are n message attributes a0 to a(n-1).
func attributes(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprint("a", i)] = "v"
	}
	return m
}

// commitFaults is a store whose Complete and FailWith fail with the errors set (nil:
// the store's own answer), and which counts the FailWith calls.
type commitFaults struct {
	persistence.Store
	complete, fail error
	fails          atomic.Int64
}

func (s *commitFaults) Complete(ctx context.Context, l persistence.Lease, c persistence.Completion, now time.Time) error {
	if s.complete != nil {
		return s.complete
	}
	return s.Store.Complete(ctx, l, c, now)
}

func (s *commitFaults) FailWith(ctx context.Context, l persistence.Lease, f persistence.Failure, exp, now time.Time) error {
	s.fails.Add(1)
	if s.fail != nil {
		return s.fail
	}
	return s.Store.FailWith(ctx, l, f, exp, now)
}

// TestFailuresThatCannotBeRecorded: what a delivery returns when the record of its
// outcome cannot be written. A commit that lost its lease writes nothing more (the
// record is the new holder's). A commit refused for good whose failure cannot be
// recorded is retried, not dead-lettered: the record still holds the lease. A handler's
// permanent error whose failure loses the lease stays permanent, with both errors.
func TestFailuresThatCannotBeRecorded(t *testing.T) {
	ctx := context.Background()
	ok := func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Response: []byte("done")}, nil
	}
	refusal := errors.New("the handler's refusal")
	refuses := func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{}, idem.Permanent(refusal)
	}
	for name, c := range map[string]struct {
		store   *commitFaults
		handler idem.HandlerFunc
		check   func(err error, fails int64) string
	}{
		"a commit that lost its lease": {&commitFaults{complete: fmt.Errorf("injected: %w", idem.ErrLeaseLost)}, ok,
			func(err error, fails int64) string {
				if !errors.Is(err, idem.ErrLeaseLost) || fails != 0 {
					return fmt.Sprintf("%v after %d FailWith; want ErrLeaseLost and none", err, fails)
				}
				return ""
			}},
		"a commit refused for good, its failure not recorded": {&commitFaults{complete: fmt.Errorf("injected: %w", idem.ErrInvalidRequest), fail: errors.New("injected: store down")}, ok,
			func(err error, _ int64) string {
				if err == nil || idem.IsPermanent(err) || !strings.Contains(err.Error(), "not recorded") || !strings.Contains(err.Error(), "store down") {
					return fmt.Sprintf("%v; want a retryable error that says the failure was not recorded, and why", err)
				}
				return ""
			}},
		"a permanent refusal whose failure lost the lease": {&commitFaults{fail: fmt.Errorf("injected: %w", idem.ErrLeaseLost)}, refuses,
			func(err error, _ int64) string {
				if !idem.IsPermanent(err) || !errors.Is(err, refusal) || !errors.Is(err, idem.ErrLeaseLost) || strings.Contains(err.Error(), "not recorded") {
					return fmt.Sprintf("%v; want the refusal, permanent, joined to ErrLeaseLost", err)
				}
				return ""
			}},
	} {
		s := c.store
		s.Store = memstore.NewMemoryStore()
		cl, err := idem.New(idem.Config{Store: s, Scope: "s"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Do(ctx, req("k", `{}`), c.handler)
		if msg := c.check(err, s.fails.Load()); msg != "" {
			t.Errorf("%s: %s", name, msg)
		}
	}
}

// TestWritesReturnTheItemThatFailedThem: every business write, whatever its kind, comes
// back with the item as it was when its condition failed (FailedWrite.Item); the
// handler's own values are left as they were.
func TestWritesReturnTheItemThatFailedThem(t *testing.T) {
	runStores(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		if _, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.bizTable),
			Item: e.bizItem("acct", map[string]types.AttributeValue{"n": &types.AttributeValueMemberN{Value: "1"}})}); err != nil {
			t.Fatal(err)
		}
		cond, vals := aws.String("n = :two"), map[string]types.AttributeValue{":two": &types.AttributeValueMemberN{Value: "2"}}
		for kind, w := range map[string]types.TransactWriteItem{
			"Delete":         {Delete: &types.Delete{TableName: aws.String(e.bizTable), Key: e.bizKey("acct"), ConditionExpression: cond, ExpressionAttributeValues: vals}},
			"ConditionCheck": {ConditionCheck: &types.ConditionCheck{TableName: aws.String(e.bizTable), Key: e.bizKey("acct"), ConditionExpression: cond, ExpressionAttributeValues: vals}},
			"Update": {Update: &types.Update{TableName: aws.String(e.bizTable), Key: e.bizKey("acct"), UpdateExpression: aws.String("SET m = :two"),
				ConditionExpression: cond, ExpressionAttributeValues: vals}},
		} {
			_, err := c.Do(ctx, req("refused-"+kind, `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
				return idem.Result{Writes: []types.TransactWriteItem{w}}, nil
			})
			wce, ok := errors.AsType[*idem.WriteConditionError](err)
			if !ok || len(wce.Failed) != 1 {
				t.Errorf("%s: %v; want a WriteConditionError with one failed write", kind, err)
				continue
			}
			if n, _ := wce.Failed[0].Item["n"].(*types.AttributeValueMemberN); n == nil || n.Value != "1" {
				t.Errorf("%s: the failed write came back with %v, want the item as it was", kind, wce.Failed[0].Item)
			}
		}

		// A guard Put gets the payload's fingerprint in the request, not in the handler's item.
		guard := journal(e, "fingerprinted")
		item := guard.Put.Item
		if _, err := c.Do(ctx, req("fingerprinted", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Writes: []types.TransactWriteItem{guard}, Guards: []int{0}}, nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(item) != len(e.bizKey("x")) || guard.Put.ReturnValuesOnConditionCheckFailure != "" {
			t.Errorf("the handler's guard was changed: item %v, ReturnValuesOnConditionCheckFailure %q", item, guard.Put.ReturnValuesOnConditionCheckFailure)
		}
	}, []storeCase{{"dynamodb", newDynamoEnv}, {"simdb", newSimEnv}})
}

// TestPendingOutboxOfAGroupSentByADeliveryWithoutOne: an outbox a FIFO delivery
// committed and could not send is sent by a later delivery of the key that runs in no
// FIFO group (a direct Do): only a delivery in another group leaves it to the
// committing group and the reaper.
func TestPendingOutboxOfAGroupSentByADeliveryWithoutOne(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		ctx := context.Background()
		o := newOutbox(t)
		h := idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Response: []byte("done"), Messages: []idem.Message{o.msg("receipt", "g-out")}}, nil
		})
		crashed := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = &failingSender{} })
		rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: crashed, Handler: h})
		if err != nil {
			t.Fatal(err)
		}
		bp := newProcessor(t, sqsbatch.BatchConfig{Handle: rf, Outbox: crashed})
		resp, err := bp.Process(ctx, events.SQSEvent{Records: []events.SQSMessage{keyedFIFORecord("m-1", "g-in", "grouped", `{}`)}})
		if err != nil || len(resp.BatchItemFailures) != 1 {
			t.Fatalf("batch whose send fails: %+v, %v; want its record retried", resp, err)
		}
		if rec := e.record(t, crashed, "grouped"); len(rec.Outbox) != 1 || rec.OutboxGroup != "g-in" {
			t.Fatalf("record: outbox %d, group %q; want the message pending, committed by group g-in", len(rec.Outbox), rec.OutboxGroup)
		}
		live := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = o.sqs })
		res, err := live.Do(ctx, req("grouped", `{}`), h)
		if err != nil || !res.Replayed || string(res.Response) != "done" {
			t.Fatalf("a delivery without a group: %+v, %v; want a replay", res, err)
		}
		if got := bodies(o.drain(t)); len(got) != 1 {
			t.Fatalf("sent %v, want the pending receipt", got)
		}
	})
}

// unconfirmed is SQS whose answers leave out the entries whose body holds "unconfirmed":
// sent, but neither reported successful nor failed.
type unconfirmed struct{ api *sqs.Client }

func (u unconfirmed) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, o ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out, err := u.api.SendMessageBatch(ctx, in, o...)
	if err != nil {
		return nil, err
	}
	kept := out.Successful[:0]
	for _, s := range out.Successful {
		for _, e := range in.Entries {
			if aws.ToString(e.Id) == aws.ToString(s.Id) && !strings.Contains(aws.ToString(e.MessageBody), "unconfirmed") {
				kept = append(kept, s)
			}
		}
	}
	out.Successful = kept
	return out, nil
}

// TestUnconfirmedMessageIsNotSent: a message SQS's answer does not report is not taken
// as sent: the delivery is retried and the record keeps it pending.
func TestUnconfirmedMessageIsNotSent(t *testing.T) {
	e := newMemoryEnv(t)
	o := newOutbox(t)
	c := e.client(t, func(cfg *idem.Config) { cfg.Sender = unconfirmed{o.sqs} })
	_, err := c.Do(context.Background(), req("k", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Messages: []idem.Message{o.msg("confirmed", "g"), o.msg("unconfirmed", "h")}}, nil
	})
	if err == nil || idem.IsPermanent(err) || !strings.Contains(err.Error(), "not confirmed") {
		t.Fatalf("a message SQS did not confirm: %v; want a retryable error", err)
	}
	if rec := e.record(t, c, "k"); len(rec.Outbox) != 2 {
		t.Fatalf("record after the unconfirmed send: %d messages pending, want 2", len(rec.Outbox))
	}
}

// oddAnswer is an SQS sender whose answer names entries the request did not hold: ids
// that are no number, or past the request's entries. It sends nothing.
type oddAnswer struct{ successful, failed []string }

func (a oddAnswer) SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out := &sqs.SendMessageBatchOutput{}
	for _, id := range a.successful {
		out.Successful = append(out.Successful, sqstypes.SendMessageBatchResultEntry{Id: aws.String(id), MessageId: aws.String("m-" + id)})
	}
	for _, id := range a.failed {
		out.Failed = append(out.Failed, sqstypes.BatchResultErrorEntry{Id: aws.String(id), Code: aws.String("InvalidParameterValue"), SenderFault: true, Message: aws.String("refused")})
	}
	return out, nil
}

// TestAnswersThatNameNoEntry: an answer whose entries are not the request's (an id that
// is no number, or past the request's entries) confirms nothing and refuses nothing: the
// one message is not confirmed, so the delivery is retried and the message stays pending.
func TestAnswersThatNameNoEntry(t *testing.T) {
	for name, a := range map[string]oddAnswer{
		"successful, not a number": {successful: []string{"x"}},
		"successful, past the end": {successful: []string{"1"}},
		"failed, not a number":     {failed: []string{"x"}},
		"failed, past the end":     {failed: []string{"1"}},
	} {
		e := newMemoryEnv(t)
		c := e.client(t, func(cfg *idem.Config) { cfg.Sender = a })
		_, err := c.Do(context.Background(), req("k", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Messages: []idem.Message{{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/q", Body: "b"}}}, nil
		})
		if err == nil || idem.IsPermanent(err) || !strings.Contains(err.Error(), "not confirmed") {
			t.Errorf("%s: %v; want the message not confirmed, retried", name, err)
		}
		if rec := e.record(t, c, "k"); len(rec.Outbox) != 1 {
			t.Errorf("%s: %d messages pending, want 1", name, len(rec.Outbox))
		}
	}
}

// onDynamoEachMode runs fn in each mode, on DynamoDB (moto) alone.
func onDynamoEachMode(t *testing.T, fn func(t *testing.T, e *env, mode idem.Mode)) {
	t.Helper()
	for _, mode := range []idem.Mode{idem.ModeLease, idem.ModeSingleTransaction} {
		t.Run(mode.String(), func(t *testing.T) { fn(t, newDynamoEnv(t), mode) })
	}
}
