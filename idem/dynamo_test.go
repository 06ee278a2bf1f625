package idem_test

import (
	"context"
	"errors"
	"fmt"
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
