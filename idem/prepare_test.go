package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
)

// TestResultShapesRefused: a result whose Guarded or HomeGuard cannot be kept is refused
// for good before anything is committed, and the handler's writes are not applied.
func TestResultShapesRefused(t *testing.T) {
	put := types.TransactWriteItem{Put: &types.Put{TableName: aws.String("t"), Item: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "x"}}}}
	del := types.TransactWriteItem{Delete: &types.Delete{TableName: aws.String("t"), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "x"}}}}
	msg := idem.Message{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/q", Body: "b"}
	for name, res := range map[string]idem.Result{
		"Guarded with a write":                {Guarded: true, Writes: []types.TransactWriteItem{put}},
		"Guarded with a message":              {Guarded: true, Messages: []idem.Message{msg}},
		"HomeGuard without Guards":            {HomeGuard: true, HomeKey: "k", Writes: []types.TransactWriteItem{put}},
		"HomeGuard past the writes":           {HomeGuard: true, HomeKey: "k", Guards: []int{1}, Writes: []types.TransactWriteItem{put}},
		"HomeGuard before the writes":         {HomeGuard: true, HomeKey: "k", Guards: []int{-1}, Writes: []types.TransactWriteItem{put}},
		"HomeGuard on a write that is no Put": {HomeGuard: true, HomeKey: "k", Guards: []int{0}, Writes: []types.TransactWriteItem{del}},
		"messages without a Sender":           {Writes: []types.TransactWriteItem{put}, Messages: []idem.Message{msg}},
	} {
		mem := memstore.NewMemoryStore()
		c, err := idem.New(idem.Config{Store: mem, Scope: "s"}) // no Sender
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Do(context.Background(), &idem.Request{Key: "k", Payload: []byte(`{}`)}, func(context.Context, *idem.Request) (idem.Result, error) {
			return res, nil
		})
		if err == nil || !idem.IsPermanent(err) || len(mem.Committed()) != 0 {
			t.Errorf("%s: %v, %d transactions; want a permanent error and nothing committed", name, err, len(mem.Committed()))
		}
	}
}

// opsFail is a store whose Retry and Reap fail as a changed record makes them fail.
type opsFail struct{ persistence.Store }

func (opsFail) Retry(context.Context, string, string, string, time.Time) error {
	return fmt.Errorf("injected: %w", idem.ErrLeaseLost)
}

func (opsFail) Reap(context.Context, persistence.StaleLease, string, time.Time) error {
	return fmt.Errorf("injected: %w", idem.ErrLeaseLost)
}

// TestUnlockReportsItsErrors: Unlock of a key with no record, and Unlocks whose fenced
// write loses to a change, return the store's error.
func TestUnlockReportsItsErrors(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	mem := memstore.NewMemoryStore()
	if _, err := reaper.Unlock(ctx, mem, "s#none", "operator", now); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Unlock of a key with no record: %v, want ErrNotFound", err)
	}
	for key, status := range map[string]persistence.Status{"s#held": persistence.StatusInProgress, "s#failed": persistence.StatusFailed} {
		rec := &persistence.Record{Key: key, Status: status, LeaseToken: "tok", LeaseUntil: now.Add(time.Minute), Attempt: 1, CreatedAt: now, UpdatedAt: now,
			ExpiresAt: now.Add(time.Hour), Inflight: "0"}
		if _, created, err := mem.Create(ctx, rec, now); err != nil || !created {
			t.Fatalf("create %s: %v %v", key, created, err)
		}
		if _, err := reaper.Unlock(ctx, opsFail{mem}, key, "operator", now); !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("Unlock of a %s record whose write loses: %v, want ErrLeaseLost", status, err)
		}
	}
}

// TestCommitWithEverythingCompressed: a FIFO delivery's commit whose response and outbox
// are both large enough to be stored compressed sets every attribute it writes and
// removes none: DynamoDB takes the update (an empty REMOVE clause is a syntax error).
func TestCommitWithEverythingCompressed(t *testing.T) {
	forEachMode(t, func(t *testing.T, e *env, mode idem.Mode) {
		c := e.client(t, withMode(mode), func(cfg *idem.Config) { cfg.Sender = &okSender{} })
		text := strings.Repeat("all work and no play ", 200) // 4 KiB, compressible
		rf, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Response: []byte(text), Messages: []idem.Message{{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/out.fifo", Body: text, GroupID: "g"}}}, nil
		})})
		if err != nil {
			t.Fatal(err)
		}
		bp := newProcessor(t, sqsbatch.BatchConfig{Handle: rf, Outbox: c})
		resp, err := bp.Process(context.Background(), events.SQSEvent{Records: []events.SQSMessage{keyedFIFORecord("m-1", "in", "compressed", `{}`)}})
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("batch: %+v, %v; want the record applied", resp, err)
		}
		if rec := e.record(t, c, "compressed"); rec.Status != persistence.StatusCompleted || string(rec.Response) != text {
			t.Fatalf("record: %s, response of %d bytes", rec.Status, len(rec.Response))
		}
	})
}

// takeoverFails is a store whose takeovers fail with err.
type takeoverFails struct {
	persistence.Store
	err error
}

func (s takeoverFails) Takeover(context.Context, *persistence.Record, persistence.Lease, time.Time, time.Time) (*persistence.Record, error) {
	return nil, s.err
}

// TestTakeoverOutcomes: a takeover another holder won first is ErrInProgress (retry
// later, see their outcome); another failure of the takeover is the store's error; a
// record of a status the middleware does not know is refused; in none does the handler
// run. A takeover that wins keeps the lease end the store holds, to the millisecond.
func TestTakeoverOutcomes(t *testing.T) {
	ctx := context.Background()
	failing := func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{}, errors.New("transient")
	}
	for name, c := range map[string]struct {
		status persistence.Status
		store  func(persistence.Store) persistence.Store
		want   func(error) bool
	}{
		"lost the race": {persistence.StatusFailed, func(s persistence.Store) persistence.Store {
			return takeoverFails{s, fmt.Errorf("injected: %w", idem.ErrLeaseLost)}
		},
			func(err error) bool { return errors.Is(err, idem.ErrInProgress) }},
		"the store down": {persistence.StatusFailed, func(s persistence.Store) persistence.Store {
			return takeoverFails{s, errors.New("injected: store down")}
		},
			func(err error) bool {
				return err != nil && !errors.Is(err, idem.ErrInProgress) && strings.Contains(err.Error(), "store down")
			}},
		"an unknown status": {"BOGUS", func(s persistence.Store) persistence.Store { return s },
			func(err error) bool { return err != nil && strings.Contains(err.Error(), "unknown status") }},
	} {
		mem := memstore.NewMemoryStore()
		first, err := idem.New(idem.Config{Store: mem, Scope: "s"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := first.Do(ctx, &idem.Request{Key: "k", Payload: []byte(`{}`)}, failing); err == nil {
			t.Fatal("the first attempt: no error")
		}
		if c.status != persistence.StatusFailed { // rewrite the record's status
			rec, _ := mem.Get(ctx, "s#k", time.Now())
			rec.Status = c.status
			mem.Forget("s#k")
			if _, _, err := mem.Create(ctx, rec, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		second, err := idem.New(idem.Config{Store: c.store(mem), Scope: "s"})
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		_, err = second.Do(ctx, &idem.Request{Key: "k", Payload: []byte(`{}`)}, func(context.Context, *idem.Request) (idem.Result, error) {
			ran = true
			return idem.Result{}, nil
		})
		if !c.want(err) || ran {
			t.Errorf("%s: %v, handler ran %v", name, err, ran)
		}
	}

	mem := memstore.NewMemoryStore()
	c, err := idem.New(idem.Config{Store: mem, Scope: "s"}) // the real clock: nanoseconds
	if err != nil {
		t.Fatal(err)
	}
	sameLease := func(want int) idem.HandlerFunc {
		return func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			rec, err := mem.Get(ctx, r.Attempt.RecordKey(), time.Now())
			if err != nil {
				return idem.Result{}, err
			}
			if r.Attempt.Number() != want || !r.Attempt.LeaseUntil().Equal(rec.LeaseUntil) {
				t.Errorf("attempt %d holds its lease until %v, the store until %v", r.Attempt.Number(), r.Attempt.LeaseUntil(), rec.LeaseUntil)
			}
			return idem.Result{}, nil
		}
	}
	if _, err := c.Do(ctx, &idem.Request{Key: "first", Payload: []byte(`{}`)}, sameLease(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do(ctx, &idem.Request{Key: "k", Payload: []byte(`{}`)}, failing); err == nil {
		t.Fatal("the first attempt: no error")
	}
	if _, err := c.Do(ctx, &idem.Request{Key: "k", Payload: []byte(`{}`)}, sameLease(2)); err != nil {
		t.Fatal(err)
	}
}

// TestHomeGuardOnAnotherTable: a HomeGuard whose guard Put goes to another table than
// the record's, or sets an attribute of the record, cannot be folded into the record:
// DynamoStore refuses it for good in both modes, and nothing is committed.
func TestHomeGuardOnAnotherTable(t *testing.T) {
	for _, mode := range []idem.Mode{idem.ModeLease, idem.ModeSingleTransaction} {
		e := newDynamoEnv(t)
		c := e.client(t, withMode(mode))
		pk, _ := c.RecordKey("elsewhere")
		entry := e.store.(*persistence.DynamoStore).Key(pk)
		entry["status"] = &types.AttributeValueMemberS{Value: "HACKED"}
		for what, guard := range map[string]types.TransactWriteItem{
			"on the business table":               {Put: &types.Put{TableName: aws.String(e.bizTable), Item: e.bizItem("elsewhere", nil)}},
			"setting the record's own attributes": {Put: &types.Put{TableName: aws.String(e.table), Item: entry}},
		} {
			_, err := c.Do(context.Background(), req("elsewhere", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
				return idem.Result{HomeGuard: true, HomeKey: "elsewhere", Guards: []int{0}, Writes: []types.TransactWriteItem{guard, e.bizWrite("credit")}}, nil
			})
			if !errors.Is(err, idem.ErrInvalidRequest) || !idem.IsPermanent(err) || e.bizCount(t, "credit") != 0 {
				t.Fatalf("%s: a home guard %s: %v; want a permanent ErrInvalidRequest and nothing written", mode, what, err)
			}
		}
	}
}
