package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
)

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
