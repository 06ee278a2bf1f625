package idem_test

import (
	"compress/gzip"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// The DynamoStore tests of this file meet answers DynamoDB documents but the flows of
// the client rarely meet, and answers of a DynamoDBAPI of the caller's own (an
// emulator, a wrapper) that DynamoDB itself would not give: each is an error, never a
// panic or a success.

// completed is the record of key completed at now, for a single-transaction Put.
func completed(key string, now time.Time) *persistence.Record {
	return &persistence.Record{Key: key, Status: persistence.StatusCompleted, LeaseToken: "t", Attempt: 1, Response: []byte("r"),
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour)}
}

// canceledWithoutReasons is DynamoDB canceling every transaction without saying why.
type canceledWithoutReasons struct{ persistence.DynamoDBAPI }

func (canceledWithoutReasons) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return nil, &types.TransactionCanceledException{Message: aws.String("Transaction cancelled")}
}

// TestTransactionCanceledWithoutReasons: a commit whose transaction is canceled without
// a reason is the transaction's error, retryable, in both modes.
func TestTransactionCanceledWithoutReasons(t *testing.T) {
	e := newDynamoEnv(t)
	ctx := context.Background()
	now := e.clock.Now()
	store, err := persistence.NewDynamoStoreLayout(canceledWithoutReasons{e.ddb}, persistence.Layout{Table: e.table})
	if err != nil {
		t.Fatal(err)
	}
	_, l := live(t, e.store, "s#no-reason", now)
	err = store.Complete(ctx, l, persistence.Completion{ExpiresAt: now.Add(time.Hour), Writes: []types.TransactWriteItem{e.bizWrite("no-reason")}}, now)
	if err == nil || idem.IsPermanent(err) || !strings.Contains(err.Error(), "Transaction cancelled") {
		t.Errorf("Complete: %v, want the transaction's retryable error", err)
	}
	_, err = store.Put(ctx, completed("s#no-reason-single", now), []types.TransactWriteItem{e.bizWrite("no-reason-single")}, nil, now)
	if err == nil || idem.IsPermanent(err) || !strings.Contains(err.Error(), "Transaction cancelled") {
		t.Errorf("Put: %v, want the transaction's retryable error", err)
	}
}

// TestTooManyWritesAreRefusedBeforeAnyRequest: a commit of more business writes than a
// transaction holds beside the record is refused (ErrInvalidRequest, permanent) before
// any request is sent, in both modes.
func TestTooManyWritesAreRefusedBeforeAnyRequest(t *testing.T) {
	e := newDynamoEnv(t)
	ctx := context.Background()
	now := e.clock.Now()
	writes := make([]types.TransactWriteItem, persistence.MaxWrites+1)
	for i := range writes {
		writes[i] = e.bizWrite("many-" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
	}
	_, l := live(t, e.store, "s#many", now)
	e.calls.Reset()
	err := e.store.Complete(ctx, l, persistence.Completion{ExpiresAt: now.Add(time.Hour), Writes: writes}, now)
	if !errors.Is(err, idem.ErrInvalidRequest) || !idem.IsPermanent(err) || e.calls.Total() != 0 {
		t.Errorf("Complete: %v after %v; want a permanent ErrInvalidRequest and no request", err, e.calls.Ops())
	}
	_, err = e.store.Put(ctx, completed("s#many-single", now), writes, nil, now)
	if !errors.Is(err, idem.ErrInvalidRequest) || !idem.IsPermanent(err) || e.calls.Total() != 0 {
		t.Errorf("Put: %v after %v; want a permanent ErrInvalidRequest and no request", err, e.calls.Ops())
	}
}

// TestAcquireWhenTheFailureHasNoItem: an acquisition whose condition fails without the
// item it found (an emulator's answer) says so.
func TestAcquireWhenTheFailureHasNoItem(t *testing.T) {
	e := newDynamoEnv(t)
	now := e.clock.Now()
	create(t, e.store, held("s#taken", now), now)
	store, err := persistence.NewDynamoStoreLayout(noOldItem{e.ddb}, persistence.Layout{Table: e.table})
	if err != nil {
		t.Fatal(err)
	}
	rec := held("s#taken", now)
	rec.LeaseToken = "another"
	if _, _, err := store.Create(context.Background(), rec, now); err == nil || !strings.Contains(err.Error(), "the old item was not returned") {
		t.Errorf("Create over a record, the failure without its item: %v", err)
	}
}

// TestCorruptStoredOutboxIsRefused: a record whose outbox says it is compressed and is
// not is refused with the decompressor's error, not read as no outbox.
func TestCorruptStoredOutboxIsRefused(t *testing.T) {
	e := newDynamoEnv(t)
	ctx := context.Background()
	now := e.clock.Now()
	rec, l := live(t, e.store, "s#corrupt", now)
	msg := idem.Message{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/q", Body: "b"}
	if err := e.store.Complete(ctx, l, persistence.Completion{Response: []byte("r"), ExpiresAt: now.Add(time.Hour), Outbox: []idem.Message{msg}}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(e.table), Key: e.store.(*persistence.DynamoStore).Key(rec.Key),
		UpdateExpression: aws.String("SET outbox = :junk, outbox_enc = :gzip"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":junk": &types.AttributeValueMemberB{Value: []byte("this is not gzip")}, ":gzip": &types.AttributeValueMemberS{Value: "gzip"},
		}}); err != nil {
		t.Fatal(err)
	}
	if got, err := e.store.Get(ctx, rec.Key, now); !errors.Is(err, gzip.ErrHeader) {
		t.Errorf("Get of a record whose outbox does not decompress: %+v, %v; want gzip's error", got, err)
	}
}
