package idem_test

import (
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// TestRoundTrips counts the DynamoDB requests the code makes (awstest.NewOperations: an
// SDK retry of a request whose answer was lost is not one more): first delivery 2,
// duplicate of a completed key 1, warm-cache duplicate 0.
func TestRoundTrips(t *testing.T) {
	e := newDynamoEnv(t)
	ctx := context.Background()
	cold := e.client(t)
	warm := e.client(t, func(c *idem.Config) { c.CacheSize = 100 })
	var runs atomic.Int64
	cases := []struct {
		name   string
		c      *idem.Client
		key    string
		writes bool
		want   map[string]int
	}{
		{"first delivery", cold, "rt-1", false, map[string]int{"PutItem": 1, "UpdateItem": 1}},
		{"first delivery with business write", cold, "rt-2", true, map[string]int{"PutItem": 1, "TransactWriteItems": 1}},
		{"duplicate of completed key", cold, "rt-2", true, map[string]int{"PutItem": 1}},
		{"duplicate, cache being warmed", warm, "rt-2", true, map[string]int{"PutItem": 1}},
		{"warm-cache duplicate", warm, "rt-2", true, map[string]int{}},
	}
	// A holder crashed on rt-3: its record is IN_PROGRESS with a lease that ended.
	pk, _ := cold.RecordKey("rt-3")
	hash, _ := idem.HashPayload([]byte(`{}`))
	now := e.clock.Now()
	if _, created, err := e.store.Create(ctx, &persistence.Record{
		Key: pk, Status: persistence.StatusInProgress, LeaseToken: "crashed", LeaseUntil: now.Add(-time.Minute),
		Inflight: "0", ExpiresAt: now.Add(time.Hour), PayloadHash: hash, Attempt: 1,
	}, now); err != nil || !created {
		t.Fatalf("crashed record: %v", err)
	}
	cases = append(cases, struct {
		name   string
		c      *idem.Client
		key    string
		writes bool
		want   map[string]int
	}{"takeover after a crash", cold, "rt-3", true, map[string]int{"PutItem": 1, "UpdateItem": 1, "TransactWriteItems": 1}})
	for _, tc := range cases {
		e.calls.Reset()
		h := idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
			runs.Add(1)
			res := idem.Result{Response: []byte("ok")}
			if tc.writes {
				res.Writes = []types.TransactWriteItem{e.bizWrite(tc.key)}
			}
			return res, nil
		})
		if _, err := tc.c.Do(ctx, req(tc.key, `{}`), h); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := e.calls.Ops()
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: DynamoDB calls %v, want %v", tc.name, got, tc.want)
		}
		t.Logf("%-36s %d DynamoDB requests %v", tc.name, e.calls.Total(), got)
	}
	if runs.Load() != 3 {
		t.Errorf("handler ran %d times, want 3", runs.Load())
	}
}

// TestStoreUnreachableFailsClosed points the store at a closed port: the error is
// returned and the handler does not run.
func TestStoreUnreachableFailsClosed(t *testing.T) {
	port, err := awstest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg := awstest.ConfigFor(t, fmt.Sprintf("http://127.0.0.1:%d", port))
	cfg.RetryMaxAttempts = 1
	ddb := dynamodb.NewFromConfig(cfg)
	store, err := persistence.NewDynamoStore(ddb, "nowhere")
	if err != nil {
		t.Fatal(err)
	}
	c, err := idem.New(idem.Config{Store: store, Scope: "closed"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var runs atomic.Int64
	_, err = c.Do(ctx, req("k", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
		runs.Add(1)
		return idem.Result{}, nil
	})
	if err == nil || runs.Load() != 0 {
		t.Fatalf("err=%v runs=%d, want an error and no run", err, runs.Load())
	}
	if errors.Is(err, idem.ErrInProgress) || idem.IsPermanent(err) {
		t.Fatalf("store outage misclassified: %v", err)
	}
	t.Logf("closed port: %v", err)
}

// TestMissingTableIsAnError: a misconfigured table name is reported, not ignored.
func TestMissingTableIsAnError(t *testing.T) {
	store, err := persistence.NewDynamoStore(awstest.DynamoDB(t), awstest.Name(t, "absent"))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := idem.New(idem.Config{Store: store, Scope: "x"})
	var runs atomic.Int64
	_, err = c.Do(context.Background(), req("k", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
		runs.Add(1)
		return idem.Result{}, nil
	})
	var rnf *types.ResourceNotFoundException
	if !errors.As(err, &rnf) || runs.Load() != 0 {
		t.Fatalf("err=%v runs=%d, want ResourceNotFoundException and no run", err, runs.Load())
	}
}

// TestCreateTableIsIdempotent creates the table twice and checks the schema the reaper
// and the TTL rely on.
func TestCreateTableIsIdempotent(t *testing.T) {
	ctx := context.Background()
	ddb := awstest.DynamoDB(t)
	name := awstest.Name(t, "tbl")
	for i := range 2 {
		if err := persistence.CreateTable(ctx, ddb, name); err != nil {
			t.Fatalf("create #%d: %v", i+1, err)
		}
	}
	out, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Table.GlobalSecondaryIndexes) != 1 || aws.ToString(out.Table.GlobalSecondaryIndexes[0].IndexName) != persistence.InflightIndex {
		t.Fatalf("GSIs: %+v", out.Table.GlobalSecondaryIndexes)
	}
	ttl, err := ddb.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	if d := ttl.TimeToLiveDescription; d == nil || aws.ToString(d.AttributeName) != "expires_at" || d.TimeToLiveStatus != types.TimeToLiveStatusEnabled {
		t.Fatalf("TTL: %+v", ttl.TimeToLiveDescription)
	}
}

// shakyAdmin is a DynamoDB client on moto whose table calls answer as DynamoDB's can
// and moto's do not: CreateTable refused (create), DescribeTable failing (describe) or
// finding the table still CREATING the first creating times, UpdateTimeToLive refused
// (ttl). describes counts the DescribeTable calls.
type shakyAdmin struct {
	*dynamodb.Client
	create, describe, ttl error
	creating, describes   int
}

func (a *shakyAdmin) CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, o ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	if a.create != nil {
		return nil, a.create
	}
	return a.Client.CreateTable(ctx, in, o...)
}

func (a *shakyAdmin) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, o ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	a.describes++
	switch {
	case a.describe != nil:
		return nil, a.describe
	case a.creating > 0:
		a.creating--
		return &dynamodb.DescribeTableOutput{Table: &types.TableDescription{TableStatus: types.TableStatusCreating}}, nil
	}
	return a.Client.DescribeTable(ctx, in, o...)
}

func (a *shakyAdmin) UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	if a.ttl != nil {
		return nil, a.ttl
	}
	return a.Client.UpdateTimeToLive(ctx, in, o...)
}

// TestCreateTableTellsWhyItWasRefused: a refused creation is the error, with its
// cause, not the missing table met after it.
func TestCreateTableTellsWhyItWasRefused(t *testing.T) {
	denied := errors.New("AccessDeniedException: not authorized to perform dynamodb:CreateTable")
	err := persistence.CreateTable(context.Background(), &shakyAdmin{Client: awstest.DynamoDB(t), create: denied}, awstest.Name(t, "denied"))
	if !errors.Is(err, denied) || !strings.Contains(err.Error(), "create table") {
		t.Fatalf("error %v, want the refusal of the creation", err)
	}
}

// TestCreateTableTellsWhyItCouldNotWait: a table whose state cannot be read after its
// creation is an error, with its cause; TTL is not turned on blind.
func TestCreateTableTellsWhyItCouldNotWait(t *testing.T) {
	down := errors.New("ThrottlingException: rate exceeded")
	err := persistence.CreateTable(context.Background(), &shakyAdmin{Client: awstest.DynamoDB(t), describe: down}, awstest.Name(t, "nodescribe"))
	if !errors.Is(err, down) {
		t.Fatalf("error %v, want the failed describe", err)
	}
}

// TestCreateTableTellsWhyTTLIsOff: a refusal to turn TTL on is an error (the records
// would never expire); only the ValidationException of TTL already on is not.
func TestCreateTableTellsWhyTTLIsOff(t *testing.T) {
	denied := errors.New("AccessDeniedException: not authorized to perform dynamodb:UpdateTimeToLive")
	if err := persistence.CreateTable(context.Background(), &shakyAdmin{Client: awstest.DynamoDB(t), ttl: denied}, awstest.Name(t, "nottl")); !errors.Is(err, denied) {
		t.Fatalf("error %v, want the refusal of TTL", err)
	}
	apiDenied := &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "not authorized"}
	if err := persistence.CreateTable(context.Background(), &shakyAdmin{Client: awstest.DynamoDB(t), ttl: apiDenied}, awstest.Name(t, "nottlapi")); !errors.Is(err, apiDenied) {
		t.Fatalf("error %v, want the API's refusal of TTL", err)
	}
	on := &smithy.GenericAPIError{Code: "ValidationException", Message: "TimeToLive is already enabled"}
	if err := persistence.CreateTable(context.Background(), &shakyAdmin{Client: awstest.DynamoDB(t), ttl: on}, awstest.Name(t, "ttlon")); err != nil {
		t.Fatalf("TTL already on: %v", err)
	}
}

// TestCreateTableWaitsUntilActive: TTL is turned on once the table is ACTIVE, not while
// DynamoDB is still creating it. CreateTable is asynchronous and answers CREATING
// (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CreateTable.html);
// moto creates tables active at once, hence the client that answers CREATING.
func TestCreateTableWaitsUntilActive(t *testing.T) {
	api := &shakyAdmin{Client: awstest.DynamoDB(t), creating: 2}
	start := time.Now()
	if err := persistence.CreateTable(context.Background(), api, awstest.Name(t, "slow")); err != nil {
		t.Fatal(err)
	}
	if api.describes != 3 {
		t.Fatalf("%d describes, want 3: two CREATING, then ACTIVE", api.describes)
	}
	// A describe every 200 ms, not a busy loop: control-plane calls are throttled, and
	// AWS asks not to query them excessively
	// (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-control-plane.html).
	if waited := time.Since(start); waited < 400*time.Millisecond {
		t.Errorf("three describes in %v, want 200 ms between them", waited)
	}
}

// TestUnreadableRecordIsAnError: an item under a record's key that does not decode (an
// attribute of the wrong type) fails the delivery with the decoder's error, retryably;
// the handler does not run.
func TestUnreadableRecordIsAnError(t *testing.T) {
	e := newDynamoEnv(t)
	ctx := context.Background()
	c := e.client(t)
	pk, err := c.RecordKey("garbled")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.table), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk}, "status": &types.AttributeValueMemberN{Value: "1"},
		"expires_at": &types.AttributeValueMemberN{Value: fmt.Sprint(e.clock.Now().Add(time.Hour).Unix())},
	}}); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	_, err = c.Do(ctx, req("garbled", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
		runs.Add(1)
		return idem.Result{}, nil
	})
	if err == nil || idem.IsPermanent(err) || !strings.Contains(err.Error(), "want S") || runs.Load() != 0 {
		t.Fatalf("error %v after %d runs, want the decoder's, retryable, and no run", err, runs.Load())
	}
}

// TestAcquireIsOneConditionalPut checks the exact acquire request: a PutItem with the
// documented condition and ALL_OLD on failure, never a read first.
func TestAcquireIsOneConditionalPut(t *testing.T) {
	e := newDynamoEnv(t)
	spy := &putSpy{DynamoDBAPI: e.ddb}
	store, _ := persistence.NewDynamoStore(spy, e.table)
	c, _ := idem.New(idem.Config{Store: store, Scope: "spy", Clock: e.clock.Now})
	if _, err := c.Do(context.Background(), req("k", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	in := spy.last
	if in == nil || aws.ToString(in.ConditionExpression) != "attribute_not_exists(#key) OR #expires_at < :now_s" ||
		in.ExpressionAttributeNames["#key"] != "pk" || in.ExpressionAttributeNames["#expires_at"] != "expires_at" ||
		in.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
		t.Fatalf("acquire PutItem: %+v", in)
	}
	if v := in.ExpressionAttributeValues[":now_s"].(*types.AttributeValueMemberN).Value; v != fmt.Sprint(e.clock.Now().Unix()) {
		t.Fatalf(":now_s = %s, want epoch seconds %d", v, e.clock.Now().Unix())
	}
}

type putSpy struct {
	persistence.DynamoDBAPI
	last *dynamodb.PutItemInput
}

func (s *putSpy) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	s.last = in
	return s.DynamoDBAPI.PutItem(ctx, in, o...)
}

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
