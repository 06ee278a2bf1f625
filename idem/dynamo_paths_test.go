package idem_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// The DynamoStore tests of this file call the store directly, on moto, where a call's
// request fails or DynamoDB answers in a way the client's flows rarely meet.

// held is an in-progress record of key in shard "0" whose lease ended a minute before now.
func held(key string, now time.Time) *persistence.Record {
	return &persistence.Record{Key: key, Status: persistence.StatusInProgress, LeaseToken: "tok-" + key, LeaseUntil: now.Add(-time.Minute),
		Attempt: 1, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour), Inflight: "0"}
}

// live creates in s an in-progress record of key whose lease ends a minute after now,
// and returns it with its lease.
func live(t *testing.T, s persistence.Store, key string, now time.Time) (*persistence.Record, persistence.Lease) {
	t.Helper()
	rec := held(key, now)
	rec.LeaseUntil = now.Add(time.Minute)
	create(t, s, rec, now)
	return rec, persistence.Lease{Key: rec.Key, Token: rec.LeaseToken, Until: rec.LeaseUntil}
}

func create(t *testing.T, s persistence.Store, rec *persistence.Record, now time.Time) {
	t.Helper()
	if _, created, err := s.Create(context.Background(), rec, now); err != nil || !created {
		t.Fatalf("create %s: %v %v", rec.Key, created, err)
	}
}

// garble writes an item at the record key pk whose status is a number: a record no
// decoder takes. extra attributes are added.
func (e *env) garble(t *testing.T, pk string, extra map[string]types.AttributeValue) {
	t.Helper()
	item := e.store.(*persistence.DynamoStore).Key(pk)
	item["status"] = &types.AttributeValueMemberN{Value: "1"}
	item["expires_at"] = &types.AttributeValueMemberN{Value: fmt.Sprint(e.clock.Now().Add(time.Hour).Unix())}
	for k, v := range extra {
		item[k] = v
	}
	if _, err := e.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(e.table), Item: item}); err != nil {
		t.Fatal(err)
	}
}

// TestDynamoStoreRequestsThatFail: a request DynamoDB refuses (here: a table that does not
// exist) is the call's error, never a success or a panic; a record it cannot decode is an
// error too.
func TestDynamoStoreRequestsThatFail(t *testing.T) {
	e := newDynamoEnv(t)
	ctx := context.Background()
	now := e.clock.Now()
	missing, err := persistence.NewDynamoStoreLayout(e.ddb, persistence.Layout{Table: awstest.Name(t, "missing")})
	if err != nil {
		t.Fatal(err)
	}
	rec := &persistence.Record{Key: "s#put", Status: persistence.StatusCompleted, LeaseToken: "tok", Attempt: 1, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if got, err := missing.Put(ctx, rec, nil, nil, now); err == nil {
		t.Errorf("Put to a table that does not exist: %+v, no error", got)
	}
	if got, err := missing.Get(ctx, "s#get", now); err == nil || errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Get from a table that does not exist: %+v, %v; want the request's error", got, err)
	}
	store := e.store.(*persistence.DynamoStore)
	if item, err := store.ReadGuard(ctx, awstest.Name(t, "missing"), map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "x"}}); err == nil {
		t.Errorf("ReadGuard of a table that does not exist: %v, no error", item)
	}
	// A put whose condition fails on a record no decoder takes.
	e.garble(t, "s#garbled", nil)
	rec.Key = "s#garbled"
	if got, err := store.Put(ctx, rec, nil, nil, now); err == nil || !strings.Contains(err.Error(), "want S") {
		t.Errorf("Put over an unreadable record: %+v, %v; want the decoder's error", got, err)
	}
	if got, err := store.Get(ctx, "s#garbled", now); err == nil || !strings.Contains(err.Error(), "want S") {
		t.Errorf("Get of an unreadable record: %+v, %v; want the decoder's error", got, err)
	}
	// A takeover whose condition holds on a record with an attribute of the wrong type:
	// the record it wrote does not decode, and that is the takeover's error.
	until := now.Add(-time.Minute).Truncate(time.Millisecond)
	e.garble(t, "s#takeover", map[string]types.AttributeValue{
		"status": &types.AttributeValueMemberS{Value: string(persistence.StatusInProgress)}, "lease_token": &types.AttributeValueMemberS{Value: "t1"},
		"lease_until": &types.AttributeValueMemberN{Value: fmt.Sprint(until.UnixMilli())}, "payload_hash": &types.AttributeValueMemberN{Value: "1"},
	})
	seen := &persistence.Record{Key: "s#takeover", Status: persistence.StatusInProgress, LeaseToken: "t1", LeaseUntil: until}
	if got, err := store.Takeover(ctx, seen, persistence.Lease{Key: seen.Key, Token: "t2", Until: now.Add(time.Minute), Shard: "0"}, now.Add(time.Hour), now); err == nil || !strings.Contains(err.Error(), "want S") {
		t.Errorf("Takeover of a record that does not decode: %+v, %v; want the decoder's error", got, err)
	}
}

// noOldItem is DynamoDB as an emulator that returns no item with a failed condition.
type noOldItem struct{ persistence.DynamoDBAPI }

func (n noOldItem) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := n.DynamoDBAPI.PutItem(ctx, in, o...)
	if ccf, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
		ccf.Item = nil
	}
	return out, err
}

// TestPutWhenTheFailureHasNoItem: when a failed condition comes back without the item
// (an emulator, or a service that returned none), the single-transaction put reads the
// record and answers with it.
func TestPutWhenTheFailureHasNoItem(t *testing.T) {
	e := newDynamoEnv(t)
	ctx := context.Background()
	now := e.clock.Now()
	first, _ := live(t, e.store, "s#taken", now)
	store, err := persistence.NewDynamoStoreLayout(noOldItem{e.ddb}, persistence.Layout{Table: e.table})
	if err != nil {
		t.Fatal(err)
	}
	second := &persistence.Record{Key: "s#taken", Status: persistence.StatusCompleted, LeaseToken: "tok-second", Attempt: 1, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour)}
	old, err := store.Put(ctx, second, nil, nil, now)
	if err != nil || old == nil || old.LeaseToken != first.LeaseToken || old.Status != persistence.StatusInProgress {
		t.Fatalf("Put over a live record, the failure without its item: %+v, %v; want the record read back", old, err)
	}
}

// TestStaleListing: the in-flight index's listing in pages of the limit asked (none for
// 0), from a cursor it gave; a cursor it did not give, a record it cannot decode and a
// layout without the index are errors.
func TestStaleListing(t *testing.T) {
	e := newDynamoEnv(t)
	ctx := context.Background()
	now := e.clock.Now()
	for _, k := range []string{"s#a", "s#b", "s#c"} {
		create(t, e.store, held(k, now), now)
	}
	all, next, err := e.store.Stale(ctx, "0", now, 0, "")
	if err != nil || len(all) != 3 || next != "" {
		t.Fatalf("listing without a limit: %d leases, cursor %q, %v; want 3 and no cursor", len(all), next, err)
	}
	seen := map[string]bool{}
	cursor := ""
	for page := 1; ; page++ {
		got, next, err := e.store.Stale(ctx, "0", now, 1, cursor)
		if err != nil || len(got) > 1 || page > 4 {
			t.Fatalf("page %d of 1: %d leases, %v", page, len(got), err)
		}
		for _, l := range got {
			seen[l.Key] = true
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(seen) != 3 {
		t.Fatalf("pages of 1 listed %v, want the 3 leases", seen)
	}
	if got, _, err := e.store.Stale(ctx, "0", now, 1, "not a cursor"); err == nil || !strings.Contains(err.Error(), "bad cursor") {
		t.Errorf("a cursor the listing did not give: %d leases, %v; want it refused", len(got), err)
	}
	e.garble(t, "s#garbled", map[string]types.AttributeValue{
		"inflight":    &types.AttributeValueMemberS{Value: "1"},
		"lease_until": &types.AttributeValueMemberN{Value: fmt.Sprint(now.Add(-time.Minute).UnixMilli())},
		"lease_token": &types.AttributeValueMemberN{Value: "1"}, // the index projects the token
	})
	if got, _, err := e.store.Stale(ctx, "1", now, 0, ""); err == nil || !strings.Contains(err.Error(), "want S") {
		t.Errorf("a listed record no decoder takes: %d leases, %v; want the decoder's error", len(got), err)
	}
	noIndex, err := persistence.NewDynamoStoreLayout(e.ddb, persistence.Layout{Table: e.table, InflightIndex: persistence.NoIndex})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := noIndex.Stale(ctx, "0", now, 0, ""); !errors.Is(err, persistence.ErrNoIndex) {
		t.Errorf("Stale on a layout without the index: %v, want ErrNoIndex", err)
	}
}

// refusedWrite is DynamoDB canceling every transaction for its second action with
// reason, as TransactWriteItems reports an action it refuses as invalid
// (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html:
// ValidationError, ItemCollectionSizeLimitExceeded). Nothing is applied.
type refusedWrite struct {
	persistence.DynamoDBAPI
	reason string
}

func (r refusedWrite) TransactWriteItems(_ context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	reasons := make([]types.CancellationReason, len(in.TransactItems))
	for i := range reasons {
		reasons[i].Code = aws.String("None")
	}
	reasons[1] = types.CancellationReason{Code: aws.String(r.reason), Message: aws.String("Item size has exceeded the maximum allowed size")}
	return nil, &types.TransactionCanceledException{Message: aws.String("Transaction cancelled"), CancellationReasons: reasons}
}

// TestCommitOfAWriteDynamoDBRefuses: a business write DynamoDB cancels the transaction
// for as invalid makes the commit a permanent ErrInvalidRequest that names the write.
func TestCommitOfAWriteDynamoDBRefuses(t *testing.T) {
	e := newDynamoEnv(t)
	ctx := context.Background()
	now := e.clock.Now()
	for _, reason := range []string{"ValidationError", "ItemCollectionSizeLimitExceeded"} {
		_, l := live(t, e.store, "s#"+reason, now)
		store, err := persistence.NewDynamoStoreLayout(refusedWrite{e.ddb, reason}, persistence.Layout{Table: e.table})
		if err != nil {
			t.Fatal(err)
		}
		err = store.Complete(ctx, l, persistence.Completion{ExpiresAt: now.Add(time.Hour), Writes: []types.TransactWriteItem{e.bizWrite(reason)}}, now)
		if !errors.Is(err, idem.ErrInvalidRequest) || !idem.IsPermanent(err) || !strings.Contains(err.Error(), "write 0: "+reason) {
			t.Errorf("a write canceled for %s: %v; want a permanent ErrInvalidRequest naming write 0", reason, err)
		}
	}
}

// TestStoredFieldsOfACompletion: the FIFO group of the delivery that committed an
// outbox is stored with it; a failure without a reason stores "unspecified"; MarkSent
// of messages none of which died stores no list of dead messages; a response and an
// outbox over the limit together are refused with their stored size.
func TestStoredFieldsOfACompletion(t *testing.T) {
	e := newDynamoEnv(t)
	ctx := context.Background()
	now := e.clock.Now()
	out := "https://sqs.us-east-1.amazonaws.com/123456789012/out.fifo"
	rec, l := live(t, e.store, "s#grouped", now)
	msgs := []idem.Message{{QueueURL: out, Body: "b", GroupID: "g-out"}}
	if err := e.store.Complete(ctx, l, persistence.Completion{ExpiresAt: now.Add(time.Hour), Outbox: msgs, Group: "g-in"}, now); err != nil {
		t.Fatal(err)
	}
	if got, err := e.store.Get(ctx, rec.Key, now); err != nil || got.OutboxGroup != "g-in" || len(got.Outbox) != 1 {
		t.Fatalf("record after a FIFO commit: %+v, %v; want its outbox and the group g-in", got, err)
	}
	if err := e.store.MarkSent(ctx, rec.Key, rec.LeaseToken, 1, nil, now); err != nil {
		t.Fatal(err)
	}
	raw, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.table), Key: e.store.(*persistence.DynamoStore).Key(rec.Key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"outbox", "outbox_group", "inflight", "outbox_dead"} {
		if v, ok := raw.Item[gone]; ok {
			t.Errorf("after MarkSent with no dead message the record holds %s = %v", gone, v)
		}
	}

	failed, _ := live(t, e.store, "s#no-reason", now)
	if err := e.store.FailWith(ctx, persistence.Lease{Key: failed.Key, Token: failed.LeaseToken}, persistence.Failure{}, now.Add(time.Hour), now); err != nil {
		t.Fatal(err)
	}
	if got, err := e.store.Get(ctx, failed.Key, now); err != nil || got.Status != persistence.StatusFailed || got.Error != "unspecified" {
		t.Errorf("a failure without a reason: %+v, %v; want FAILED, unspecified", got, err)
	}

	big, _ := live(t, e.store, "s#too-large", now)
	noise := make([]byte, 200*1024)
	r := rand.New(rand.NewChaCha8([32]byte{7}))
	for i := range noise {
		noise[i] = byte(r.Uint32())
	}
	text := base64.StdEncoding.EncodeToString(noise[:180*1024])
	err = e.store.Complete(ctx, persistence.Lease{Key: big.Key, Token: big.LeaseToken}, persistence.Completion{ExpiresAt: now.Add(time.Hour), Response: noise,
		Outbox: []idem.Message{{QueueURL: out, Body: text, GroupID: "g"}}}, now)
	m := regexp.MustCompile(`are (-?\d+) bytes stored`).FindStringSubmatch(fmt.Sprint(err))
	if !errors.Is(err, idem.ErrResponseTooLarge) || m == nil {
		t.Fatalf("a response and an outbox over the limit together: %v", err)
	}
	if n, _ := strconv.Atoi(m[1]); n <= persistence.MaxStoredResponse || n < len(noise) {
		t.Errorf("the refusal says %d bytes stored; the response alone is %d, the limit %d", n, len(noise), persistence.MaxStoredResponse)
	}

	// An outbox over the limit alone, with no response: refused, nothing committed.
	alone, _ := live(t, e.store, "s#outbox-too-large", now)
	var three []idem.Message
	for i := range 3 {
		r.Shuffle(len(noise), func(i, j int) { noise[i], noise[j] = noise[j], noise[i] })
		three = append(three, idem.Message{QueueURL: out, Body: base64.StdEncoding.EncodeToString(noise[:150*1024]), GroupID: fmt.Sprint("g", i)})
	}
	err = e.store.Complete(ctx, persistence.Lease{Key: alone.Key, Token: alone.LeaseToken}, persistence.Completion{ExpiresAt: now.Add(time.Hour), Outbox: three}, now)
	if !errors.Is(err, idem.ErrResponseTooLarge) {
		t.Errorf("an outbox of three 200 KiB messages: %v, want ErrResponseTooLarge", err)
	}
	if got, err := e.store.Get(ctx, alone.Key, now); err != nil || got.Status != persistence.StatusInProgress {
		t.Errorf("record after the refused commit: %+v, %v; want it still in progress", got, err)
	}
}
