package idem_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/simdb"
)

// fakeClock is the injectable clock of the tests: it moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Now().UTC().Truncate(time.Second)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is one store under test plus a business "effect counter" committed through
// Result.Writes, so tests can count effects the way a user would observe them.
type env struct {
	store      persistence.Store
	clock      *fakeClock
	bizTable   string                                          // where business effects go
	bizKeyAttr string                                          // the business items' key attribute that says one exists
	bizKey     func(id string) map[string]types.AttributeValue // the key of business item id
	bizCount   func(t *testing.T, id string) int
	calls      *awstest.Calls // DynamoDB requests; nil for the memory store and the simulator's
	ddb        dynamoClient   // nil for the memory store
	table      string
}

// dynamoClient is what the tests call on DynamoDB directly: *dynamodb.Client on moto, or
// the simulator's in-memory DynamoDB (internal/simdb).
type dynamoClient interface {
	persistence.DynamoDBAPI
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

func (e *env) client(t *testing.T, mod ...func(*idem.Config)) *idem.Client {
	t.Helper()
	cfg := idem.Config{Store: e.store, Scope: "contract", Clock: e.clock.Now, Owner: t.Name()}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := idem.New(cfg)
	if err != nil {
		t.Fatalf("idem.New: %v", err)
	}
	return c
}

func newMemoryEnv(t *testing.T) *env {
	s := memstore.NewMemoryStore()
	return &env{
		store: s, clock: newClock(), bizTable: "effects", bizKeyAttr: "id",
		bizKey: func(id string) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}
		},
		bizCount: func(t *testing.T, id string) int {
			n := 0
			for _, ws := range s.Committed() {
				for _, w := range ws {
					if w.Update == nil {
						continue
					}
					if v, ok := w.Update.Key["id"].(*types.AttributeValueMemberS); ok && v.Value == id {
						n++
					}
				}
			}
			return n
		},
	}
}

// The layouts the contract runs on: the default (a table of the records' own), the
// Powertools one, and a single table whose records live beside business items.
const (
	layoutDefault    = ""
	layoutPowertools = "powertools"
	layoutSingle     = "single-table"
)

func newDynamoEnv(t *testing.T) *env { return newDynamoLayoutEnv(t, layoutDefault) }

func newDynamoLayoutEnv(t *testing.T, layout string) *env {
	t.Helper()
	calls := awstest.NewOperations()
	ddb := awstest.DynamoDB(t, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, calls.APIOption) })
	e := newDynamoStoreEnv(t, ddb, layout)
	calls.Reset()
	e.calls = calls
	return e
}

// newSimEnv is DynamoStore on the simulator's in-memory DynamoDB: the simulator's
// store must keep the contract moto keeps.
func newSimEnv(t *testing.T) *env { return newSimLayoutEnv(t, layoutDefault) }

func newSimLayoutEnv(t *testing.T, layout string) *env {
	t.Helper()
	return newDynamoStoreEnv(t, simdb.New(), layout)
}

// dynamoAdmin is a DynamoDB that can also create tables.
type dynamoAdmin interface {
	dynamoClient
	persistence.TableAdmin
}

func newDynamoStoreEnv(t *testing.T, ddb dynamoAdmin, layout string) *env {
	t.Helper()
	ctx := context.Background()
	table := awstest.Name(t, "idem")
	l := persistence.Layout{Table: table}
	e := &env{clock: newClock(), ddb: ddb, table: table, bizKeyAttr: "id"}
	e.bizKey = func(id string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}
	}
	switch layout {
	case layoutPowertools:
		l = persistence.PowertoolsLayout(table)
	case layoutSingle:
		// One table for everything: records under the static partition key IDEMPOTENCY,
		// business items under BUSINESS.
		l = persistence.Layout{Table: table, PartitionKey: "PK", SortKey: "SK", StaticPartitionKey: "IDEMPOTENCY", KeyPrefix: "record#"}
		e.bizTable, e.bizKeyAttr = table, "SK"
		e.bizKey = func(id string) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "BUSINESS"}, "SK": &types.AttributeValueMemberS{Value: id}}
		}
	}
	if err := persistence.CreateTableFor(ctx, ddb, l); err != nil {
		t.Fatalf("create table: %v", err)
	}
	if e.bizTable == "" {
		e.bizTable = awstest.Name(t, "effects")
		err := awstest.CreateTable(ctx, ddb, &dynamodb.CreateTableInput{
			TableName:            aws.String(e.bizTable),
			BillingMode:          types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		})
		if err != nil {
			t.Fatalf("create effects table: %v", err)
		}
	}
	store, err := persistence.NewDynamoStoreLayout(ddb, l)
	if err != nil {
		t.Fatal(err)
	}
	e.store = store
	e.bizCount = func(t *testing.T, id string) int {
		out, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.bizTable), ConsistentRead: aws.Bool(true), Key: e.bizKey(id)})
		if err != nil {
			t.Fatalf("read effect %s: %v", id, err)
		}
		v, ok := out.Item["n"].(*types.AttributeValueMemberN)
		if !ok {
			return 0
		}
		n, _ := strconv.Atoi(v.Value)
		return n
	}
	return e
}

// bizWrite is the business effect of id: a counter, committed with the record.
func (e *env) bizWrite(id string) types.TransactWriteItem {
	u := &types.Update{TableName: aws.String(e.bizTable), Key: e.bizKey(id), UpdateExpression: aws.String("ADD n :one")}
	if e.ddb != nil {
		u.ExpressionAttributeValues = map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}}
	}
	return types.TransactWriteItem{Update: u}
}

// bizItem is a business item of id with attrs: its key, and attrs.
func (e *env) bizItem(id string, attrs map[string]types.AttributeValue) map[string]types.AttributeValue {
	item := e.bizKey(id)
	maps.Copy(item, attrs)
	return item
}

// forEachStore runs fn against the in-memory store, DynamoDB on the local endpoint and
// the simulator's DynamoDB, the latter in the three layouts: the same contract for all.
func forEachStore(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	runStores(t, fn, []storeCase{
		{"memory", newMemoryEnv}, {"dynamodb", newDynamoEnv}, {"simdb", newSimEnv},
		{"simdb-" + layoutPowertools, func(t *testing.T) *env { return newSimLayoutEnv(t, layoutPowertools) }},
		{"simdb-" + layoutSingle, func(t *testing.T) *env { return newSimLayoutEnv(t, layoutSingle) }},
	})
}

// forEachLayout is forEachStore with DynamoDB on the local endpoint in the three
// layouts too: the store's contract tests run on moto in each.
func forEachLayout(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	runStores(t, fn, []storeCase{
		{"memory", newMemoryEnv}, {"dynamodb", newDynamoEnv}, {"simdb", newSimEnv},
		{"dynamodb-" + layoutPowertools, func(t *testing.T) *env { return newDynamoLayoutEnv(t, layoutPowertools) }},
		{"dynamodb-" + layoutSingle, func(t *testing.T) *env { return newDynamoLayoutEnv(t, layoutSingle) }},
		{"simdb-" + layoutPowertools, func(t *testing.T) *env { return newSimLayoutEnv(t, layoutPowertools) }},
		{"simdb-" + layoutSingle, func(t *testing.T) *env { return newSimLayoutEnv(t, layoutSingle) }},
	})
}

type storeCase struct {
	name string
	mk   func(*testing.T) *env
}

func runStores(t *testing.T, fn func(t *testing.T, e *env), cases []storeCase) {
	t.Helper()
	for _, b := range cases {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b.mk(t))
		})
	}
}

// effect returns a handler that counts its runs and commits one business effect.
func effect(e *env, runs *atomic.Int64, id, response string) idem.HandlerFunc {
	return func(ctx context.Context, r *idem.Request) (idem.Result, error) {
		runs.Add(1)
		return idem.Result{Response: []byte(response), Writes: []types.TransactWriteItem{e.bizWrite(id)}}, nil
	}
}

func req(key, payload string) *idem.Request { return &idem.Request{Key: key, Payload: []byte(payload)} }

func TestFirstDeliveryRunsAndDuplicateReplays(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		var runs atomic.Int64
		res, err := c.Do(ctx, req("k1", `{"a":1,"b":[1,2]}`), effect(e, &runs, "k1", "done"))
		if err != nil || res.Replayed || string(res.Response) != "done" || res.Attempt != 1 {
			t.Fatalf("first: res=%+v err=%v", res, err)
		}
		// Same payload with other key order and spacing: canonical JSON makes it equal.
		res, err = c.Do(ctx, req("k1", `{ "b":[1,2], "a":1 }`), effect(e, &runs, "k1", "again"))
		if err != nil || !res.Replayed || string(res.Response) != "done" {
			t.Fatalf("duplicate: res=%+v err=%v", res, err)
		}
		if runs.Load() != 1 || e.bizCount(t, "k1") != 1 {
			t.Fatalf("runs=%d effects=%d, want 1 and 1", runs.Load(), e.bizCount(t, "k1"))
		}
		pk, _ := c.RecordKey("k1")
		rec, err := e.store.Get(ctx, pk, e.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status != persistence.StatusCompleted || rec.Inflight != "" || string(rec.Response) != "done" ||
			!rec.ExpiresAt.Equal(e.clock.Now().Add(7*24*time.Hour)) || rec.Attempt != 1 {
			t.Fatalf("record after completion: %+v", rec)
		}
	})
}

func TestPayloadMismatchIsPermanentAndHandlerDoesNotRun(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		var runs atomic.Int64
		if _, err := c.Do(ctx, req("pay", `{"amount":10}`), effect(e, &runs, "pay", "ok")); err != nil {
			t.Fatal(err)
		}
		_, err := c.Do(ctx, req("pay", `{"amount":11}`), effect(e, &runs, "pay", "ok"))
		if !errors.Is(err, idem.ErrPayloadMismatch) || !idem.IsPermanent(err) {
			t.Fatalf("err = %v, want permanent ErrPayloadMismatch", err)
		}
		if runs.Load() != 1 {
			t.Fatalf("handler ran %d times, want 1", runs.Load())
		}
	})
}

func TestInvalidKeysRejectedBeforeAnyWrite(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		c := e.client(t)
		for name, key := range map[string]string{"empty": "", "not utf-8": "bad\xff\xfekey"} {
			var runs atomic.Int64
			_, err := c.Do(context.Background(), req(key, `{}`), effect(e, &runs, "x", "ok"))
			if !errors.Is(err, idem.ErrInvalidKey) || !idem.IsPermanent(err) || runs.Load() != 0 {
				t.Errorf("%s key: err=%v runs=%d", name, err, runs.Load())
			}
		}
		if e.calls != nil && e.calls.Total() != 0 {
			t.Errorf("invalid keys made %d DynamoDB calls, want 0", e.calls.Total())
		}
	})
}

func TestLongKeyIsHashedUnderTheKeyLimit(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		c := e.client(t)
		long := strings.Repeat("k", 3000)
		var runs atomic.Int64
		if _, err := c.Do(context.Background(), req(long, `{}`), effect(e, &runs, "long", "ok")); err != nil {
			t.Fatal(err)
		}
		res, err := c.Do(context.Background(), req(long, `{}`), effect(e, &runs, "long", "ok"))
		if err != nil || !res.Replayed || runs.Load() != 1 {
			t.Fatalf("replay of long key: res=%+v err=%v runs=%d", res, err, runs.Load())
		}
		pk, _ := c.RecordKey(long)
		if len(pk) >= 2048 || !strings.HasPrefix(pk, "contract#sha256:") {
			t.Fatalf("record key %q (len %d) not hashed", pk[:40], len(pk))
		}
		// A different long key with the same prefix is a different record.
		other := long[:2999] + "x"
		if _, err := c.Do(context.Background(), req(other, `{}`), effect(e, &runs, "long2", "ok")); err != nil || runs.Load() != 2 {
			t.Fatalf("other long key: err=%v runs=%d", err, runs.Load())
		}
	})
}

// TestHashedLookalikeKeyIsItsOwnRecord: the key "sha256:<hex>" that a long key's record
// is stored under, sent as a key of its own with another body, is another operation:
// applied, not refused as the long key's payload mismatch nor answered with its
// response (issue 26, hole 3).
func TestHashedLookalikeKeyIsItsOwnRecord(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		long := strings.Repeat("q", idem.MaxRawKeyBytes+1)
		pk, _ := c.RecordKey(long)
		lookalike := strings.TrimPrefix(pk, c.Scope()+"#")
		var runs atomic.Int64
		if _, err := c.Do(ctx, req(long, `{"op":1}`), effect(e, &runs, "long", "first")); err != nil {
			t.Fatal(err)
		}
		res, err := c.Do(ctx, req(lookalike, `{"op":2}`), effect(e, &runs, "lookalike", "second"))
		if err != nil || res.Replayed || string(res.Response) != "second" {
			t.Fatalf("the lookalike key: %+v, %v; want its own first run", res, err)
		}
		if runs.Load() != 2 || e.bizCount(t, "long") != 1 || e.bizCount(t, "lookalike") != 1 {
			t.Fatalf("runs=%d effects=%d+%d, want 2 runs and one effect each", runs.Load(), e.bizCount(t, "long"), e.bizCount(t, "lookalike"))
		}
	})
}

func TestLiveLeaseGivesErrInProgress(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.CacheSize = 10 })
		var inner error
		var runs atomic.Int64
		_, err := c.Do(ctx, req("busy", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			_, inner = c.Do(ctx, req("busy", `{}`), effect(e, &runs, "busy", "nested"))
			return idem.Result{Response: []byte("outer")}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(inner, idem.ErrInProgress) || idem.IsPermanent(inner) || runs.Load() != 0 {
			t.Fatalf("nested acquire: err=%v runs=%d, want ErrInProgress and no run", inner, runs.Load())
		}
	})
}

func TestHolderPastItsLeaseIsFencedOut(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.DefaultLease = time.Minute })
		started, release := make(chan struct{}), make(chan struct{})
		type out struct {
			stepErr, extendErr, doErr error
		}
		done := make(chan out, 1)
		var staleStepRan atomic.Bool
		go func() {
			var o out
			_, o.doErr = c.Do(ctx, req("fenced", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
				close(started)
				<-release
				o.stepErr = r.Attempt.Step(ctx, "late", func(context.Context) error { staleStepRan.Store(true); return nil })
				o.extendErr = r.Attempt.Extend(ctx, time.Minute)
				return idem.Result{Response: []byte("stale"), Writes: []types.TransactWriteItem{e.bizWrite("fenced")}}, nil
			})
			done <- o
		}()
		<-started
		e.clock.Advance(time.Minute + time.Second) // the first holder's lease ran out
		var runs atomic.Int64
		res, err := c.Do(ctx, req("fenced", `{}`), effect(e, &runs, "fenced", "fresh"))
		if err != nil || res.Attempt != 2 || runs.Load() != 1 {
			t.Fatalf("takeover: res=%+v err=%v runs=%d", res, err, runs.Load())
		}
		close(release)
		o := <-done
		for name, err := range map[string]error{"step": o.stepErr, "extend": o.extendErr, "complete": o.doErr} {
			if !errors.Is(err, idem.ErrLeaseLost) {
				t.Errorf("stale %s: err=%v, want ErrLeaseLost", name, err)
			}
		}
		if staleStepRan.Load() {
			t.Error("stale holder started a step after its lease ended")
		}
		if n := e.bizCount(t, "fenced"); n != 1 {
			t.Fatalf("business effect committed %d times, want 1", n)
		}
		pk, _ := c.RecordKey("fenced")
		rec, err := e.store.Get(ctx, pk, e.clock.Now())
		if err != nil || rec.Status != persistence.StatusCompleted || string(rec.Response) != "fresh" {
			t.Fatalf("record: %+v err=%v", rec, err)
		}
	})
}

// TestStaleHolderCannotCommitWhileTheTakerHolds: the holder whose lease was taken over
// commits while the taker still holds the record (IN_PROGRESS, the taker's token). The
// commit must be fenced on the token, not on the status alone: a status check lets the
// stale holder commit its writes and response under the taker's lease (the simulator's
// hole 12).
func TestStaleHolderCannotCommitWhileTheTakerHolds(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.DefaultLease = time.Minute })
		staleIn, staleGo := make(chan struct{}), make(chan struct{})
		staleDone := make(chan error, 1)
		go func() {
			_, err := c.Do(ctx, req("taken", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
				close(staleIn)
				<-staleGo
				return idem.Result{Response: []byte("stale"), Writes: []types.TransactWriteItem{e.bizWrite("taken")}}, nil
			})
			staleDone <- err
		}()
		<-staleIn
		e.clock.Advance(time.Minute + time.Second) // the first holder's lease ran out
		takerIn, takerGo := make(chan struct{}), make(chan struct{})
		takerDone := make(chan error, 1)
		go func() {
			_, err := c.Do(ctx, req("taken", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
				close(takerIn)
				<-takerGo
				return idem.Result{Response: []byte("fresh"), Writes: []types.TransactWriteItem{e.bizWrite("taken")}}, nil
			})
			takerDone <- err
		}()
		<-takerIn
		close(staleGo) // the stale holder commits while the taker holds the record
		if err := <-staleDone; !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("the stale holder's commit under the taker's lease: %v, want ErrLeaseLost", err)
		}
		if n := e.bizCount(t, "taken"); n != 0 {
			t.Fatalf("the stale holder's writes landed (%d) while the taker held the record", n)
		}
		close(takerGo)
		if err := <-takerDone; err != nil {
			t.Fatalf("the taker's commit: %v", err)
		}
		pk, _ := c.RecordKey("taken")
		rec, err := e.store.Get(ctx, pk, e.clock.Now())
		if err != nil || rec.Status != persistence.StatusCompleted || string(rec.Response) != "fresh" || e.bizCount(t, "taken") != 1 {
			t.Fatalf("record %+v, %v, %d effects: want the taker's response and one effect", rec, err, e.bizCount(t, "taken"))
		}
	})
}

func TestStaleHolderCannotFail(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.DefaultLease = time.Minute })
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := c.Do(ctx, req("f", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
				close(started)
				<-release
				return idem.Result{}, idem.Permanent(errors.New("late verdict"))
			})
			done <- err
		}()
		<-started
		e.clock.Advance(2 * time.Minute)
		var runs atomic.Int64
		if _, err := c.Do(ctx, req("f", `{}`), effect(e, &runs, "f", "winner")); err != nil {
			t.Fatal(err)
		}
		close(release)
		if err := <-done; !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("stale fail: %v, want ErrLeaseLost joined", err)
		}
		res, err := c.Do(ctx, req("f", `{}`), effect(e, &runs, "f", "third"))
		if err != nil || !res.Replayed || string(res.Response) != "winner" {
			t.Fatalf("after stale fail: res=%+v err=%v", res, err)
		}
	})
}

func TestCrashAfterStepResumesAtNextStep(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.DefaultLease = 30 * time.Second })
		var stepRuns [3]atomic.Int64
		crashed, abandon := make(chan struct{}), make(chan struct{})
		handler := func(crashAfter int) idem.HandlerFunc {
			return func(ctx context.Context, r *idem.Request) (idem.Result, error) {
				for i := range 3 {
					if err := r.Attempt.Step(ctx, fmt.Sprintf("step-%d", i+1), func(context.Context) error {
						stepRuns[i].Add(1)
						return nil
					}); err != nil {
						return idem.Result{}, err
					}
					if i+1 == crashAfter {
						close(crashed)
						<-abandon // the process is gone: this goroutine never writes again in time
						return idem.Result{}, errors.New("process died")
					}
				}
				return idem.Result{Response: []byte(fmt.Sprintf("attempt %d", r.Attempt.Number()))}, nil
			}
		}
		first := make(chan error, 1)
		go func() { _, err := c.Do(ctx, req("steps", `{}`), handler(1)); first <- err }()
		<-crashed
		e.clock.Advance(31 * time.Second)
		res, err := c.Do(ctx, req("steps", `{}`), handler(0))
		if err != nil || string(res.Response) != "attempt 2" {
			t.Fatalf("resume: res=%+v err=%v", res, err)
		}
		for i, want := range []int64{1, 1, 1} {
			if got := stepRuns[i].Load(); got != want {
				t.Errorf("step-%d ran %d times, want %d", i+1, got, want)
			}
		}
		close(abandon)
		if err := <-first; !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("abandoned attempt: %v, want ErrLeaseLost", err)
		}
		pk, _ := c.RecordKey("steps")
		rec, _ := e.store.Get(ctx, pk, e.clock.Now())
		if rec == nil || len(rec.Steps) != 3 || rec.Attempt != 2 {
			t.Fatalf("record: %+v", rec)
		}
	})
}

func TestExpiredRecordIsTreatedAsAbsent(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.TTL = time.Hour })
		var runs atomic.Int64
		if _, err := c.Do(ctx, req("ttl", `{"v":1}`), effect(e, &runs, "ttl", "one")); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Hour + 2*time.Second) // TTL passed; the item is still there
		pk, _ := c.RecordKey("ttl")
		if _, err := e.store.Get(ctx, pk, e.clock.Now()); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("Get of expired record: %v, want ErrNotFound", err)
		}
		// Even a different payload is accepted: the old record no longer exists.
		res, err := c.Do(ctx, req("ttl", `{"v":2}`), effect(e, &runs, "ttl", "two"))
		if err != nil || res.Replayed || res.Attempt != 1 || runs.Load() != 2 {
			t.Fatalf("after expiry: res=%+v err=%v runs=%d", res, err, runs.Load())
		}
	})
}

func TestFailedRecords(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		var runs atomic.Int64
		boom := errors.New("downstream timeout")
		_, err := c.Do(ctx, req("retry", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			runs.Add(1)
			return idem.Result{}, boom
		})
		if !errors.Is(err, boom) || idem.IsPermanent(err) {
			t.Fatalf("retryable failure: %v", err)
		}
		res, err := c.Do(ctx, req("retry", `{}`), effect(e, &runs, "retry", "ok"))
		if err != nil || res.Attempt != 2 || runs.Load() != 2 || e.bizCount(t, "retry") != 1 {
			t.Fatalf("retry after retryable failure: res=%+v err=%v runs=%d", res, err, runs.Load())
		}

		bad := errors.New("account closed")
		_, err = c.Do(ctx, req("perm", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{}, idem.Permanent(bad)
		})
		if !errors.Is(err, bad) || !idem.IsPermanent(err) {
			t.Fatalf("permanent failure: %v", err)
		}
		runs.Store(0)
		_, err = c.Do(ctx, req("perm", `{}`), effect(e, &runs, "perm", "never"))
		var stored *idem.StoredError
		if !errors.As(err, &stored) || !strings.Contains(stored.Message, "account closed") || runs.Load() != 0 {
			t.Fatalf("replay of permanent failure: err=%v runs=%d", err, runs.Load())
		}
	})
}

func TestHandlerPanicReleasesTheLease(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		c := e.client(t)
		_, err := c.Do(context.Background(), req("panic", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			panic("nil map")
		})
		if err == nil || !strings.Contains(err.Error(), "panicked") || idem.IsPermanent(err) {
			t.Fatalf("panic: %v", err)
		}
		var runs atomic.Int64
		if res, err := c.Do(context.Background(), req("panic", `{}`), effect(e, &runs, "panic", "ok")); err != nil || res.Attempt != 2 {
			t.Fatalf("after panic: res=%+v err=%v", res, err)
		}
	})
}

func TestResponseSizes(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		// Large but compressible: stored gzip-compressed and replayed intact.
		big := bytes.Repeat([]byte(`{"line":"all work and no play"}`), 30000) // ~900 KB raw
		var runs atomic.Int64
		if _, err := c.Do(ctx, req("big", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Response: big}, nil
		}); err != nil {
			t.Fatalf("compressible response: %v", err)
		}
		res, err := c.Do(ctx, req("big", `{}`), effect(e, &runs, "big", "x"))
		if err != nil || !res.Replayed || !bytes.Equal(res.Response, big) {
			t.Fatalf("replay of large response: err=%v len=%d", err, len(res.Response))
		}
		// Incompressible and over the limit: refused before the write, nothing committed.
		noise := make([]byte, persistence.MaxStoredResponse+1)
		var x uint32 = 1
		for i := range noise {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			noise[i] = byte(x)
		}
		_, err = c.Do(ctx, req("huge", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Response: noise, Writes: []types.TransactWriteItem{e.bizWrite("huge")}}, nil
		})
		if !errors.Is(err, idem.ErrResponseTooLarge) || !idem.IsPermanent(err) {
			t.Fatalf("oversize response: %v", err)
		}
		if e.bizCount(t, "huge") != 0 {
			t.Fatal("business write committed despite oversize response")
		}
		pk, _ := c.RecordKey("huge")
		rec, err := e.store.Get(ctx, pk, e.clock.Now())
		if err != nil || rec.Status != persistence.StatusFailed || rec.Retryable {
			t.Fatalf("record after oversize: %+v err=%v", rec, err)
		}
		// Exactly at the limit: stored as it is, and replayed.
		limit := noise[:persistence.MaxStoredResponse]
		if _, err := c.Do(ctx, req("at the limit", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Response: limit}, nil
		}); err != nil {
			t.Fatalf("a response of exactly MaxStoredResponse bytes: %v", err)
		}
		if res, err := c.Do(ctx, req("at the limit", `{}`), effect(e, &runs, "at the limit", "x")); err != nil || !res.Replayed || !bytes.Equal(res.Response, limit) {
			t.Fatalf("replay at the limit: err=%v len=%d", err, len(res.Response))
		}
		// The response and the outbox count together: each under the limit, both over it.
		text := base64.StdEncoding.EncodeToString(noise[:180*1024]) // 240 KiB of text, about 180 KiB compressed
		withSender := e.client(t, func(cfg *idem.Config) { cfg.Sender = &okSender{} })
		_, err = withSender.Do(ctx, req("both", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Response: noise[:200*1024], Messages: []idem.Message{{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/out", Body: text}}}, nil
		})
		if !errors.Is(err, idem.ErrResponseTooLarge) || !idem.IsPermanent(err) {
			t.Fatalf("a response and an outbox over the limit together: %v", err)
		}
		// A store refuses to create a record whose response is over the limit.
		over := &persistence.Record{Key: pk + "-created", Status: persistence.StatusCompleted, ExpiresAt: e.clock.Now().Add(time.Hour), Response: noise}
		if _, _, err := e.store.Create(ctx, over, e.clock.Now()); !errors.Is(err, idem.ErrResponseTooLarge) {
			t.Fatalf("Create of a record with an oversize response: %v", err)
		}
		// The single-transaction mode puts the record whole: the same refusal. The item
		// would fit DynamoDB's 400 KB item limit, so only our limit refuses it
		// (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Constraints.html).
		single := e.client(t, withMode(idem.ModeSingleTransaction))
		if _, err := single.Do(ctx, req("huge, one request", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
			return idem.Result{Response: noise}, nil
		}); !errors.Is(err, idem.ErrResponseTooLarge) || !idem.IsPermanent(err) {
			t.Fatalf("oversize response in the single-transaction mode: %v", err)
		}
	})
}

func TestExtendKeepsTheLease(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.DefaultLease = time.Minute })
		var inner error
		var runs atomic.Int64
		_, err := c.Do(ctx, req("long", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			if err := r.Attempt.Extend(ctx, 10*time.Minute); err != nil {
				return idem.Result{}, err
			}
			e.clock.Advance(5 * time.Minute) // past the original lease, inside the extension
			_, inner = c.Do(ctx, req("long", `{}`), effect(e, &runs, "long", "thief"))
			return idem.Result{Response: []byte("mine")}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(inner, idem.ErrInProgress) || runs.Load() != 0 {
			t.Fatalf("acquire during extended lease: %v runs=%d", inner, runs.Load())
		}
	})
}

func TestReaperFailsOnlyStaleLeases(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.DefaultLease = time.Minute; cfg.Shards = 3 })
		// Three crashed holders (stale), one live holder, one completed record.
		release := make(chan struct{})
		var wg sync.WaitGroup
		hold := func(key string) {
			started := make(chan struct{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = c.Do(ctx, req(key, `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
					close(started)
					<-release
					return idem.Result{}, errors.New("gone")
				})
			}()
			<-started
		}
		for _, k := range []string{"s1", "s2", "s3"} {
			hold(k)
		}
		var runs atomic.Int64
		if _, err := c.Do(ctx, req("done", `{}`), effect(e, &runs, "done", "ok")); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(2 * time.Minute)
		hold("live") // acquired now: lease ends a minute from now
		r := &reaper.Reaper{Store: e.store, Shards: 3, Grace: 30 * time.Second, PageSize: 2, Clock: e.clock.Now}
		res, err := r.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Reaped != 3 || res.Lost != 0 || res.Truncated {
			t.Fatalf("sweep: %+v, want 3 reaped", res)
		}
		// Their leases ended a minute ago and became reapable 30s (the grace) later.
		if res.MaxLate != 30*time.Second {
			t.Errorf("sweep MaxLate = %s, want 30s", res.MaxLate)
		}
		for key, want := range map[string]persistence.Status{"s1": persistence.StatusFailed, "s2": persistence.StatusFailed, "s3": persistence.StatusFailed, "live": persistence.StatusInProgress, "done": persistence.StatusCompleted} {
			pk, _ := c.RecordKey(key)
			rec, err := e.store.Get(ctx, pk, e.clock.Now())
			if err != nil || rec.Status != want {
				t.Errorf("%s: %+v err=%v, want %s", key, rec, err, want)
				continue
			}
			if want == persistence.StatusFailed && (!rec.Retryable || rec.Error != reaper.ReasonLeaseExpired) {
				t.Errorf("%s reaped as %+v", key, rec)
			}
		}
		if res, _ := r.Sweep(ctx); res.Reaped != 0 {
			t.Errorf("second sweep reaped %d, want 0", res.Reaped)
		}
		// A reaped key is taken over by its next delivery.
		if res, err := c.Do(ctx, req("s1", `{}`), effect(e, &runs, "s1", "ok")); err != nil || res.Attempt != 2 {
			t.Errorf("retry after reap: %+v %v", res, err)
		}
		close(release)
		wg.Wait()
	})
}

// TestReaperOnATableSharedByTwoConsumers: consumers keep their records in one table,
// apart by static partition key (as docs/storage.md suggests): two with key prefixes of
// their own, one with the first one's prefix, one with its static partition key; and a
// fifth shares the first one's layout
// under another scope. The in-flight index is the table's, so each
// reaper lists the others' stale leases too: it must reap its own and leave theirs,
// not fail the sweep on the first record it cannot read (issue 26, hole 4).
func TestReaperOnATableSharedByTwoConsumers(t *testing.T) {
	runStores(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		table := awstest.Name(t, "shared")
		layoutA := persistence.Layout{Table: table, PartitionKey: "PK", SortKey: "SK", StaticPartitionKey: "IDEMPOTENCY#a", KeyPrefix: "rec#"}
		layoutB := layoutA
		layoutB.StaticPartitionKey, layoutB.KeyPrefix = "IDEMPOTENCY#b", "req#"
		// C differs from A by its static partition key alone: the same key prefix.
		layoutC := layoutA
		layoutC.StaticPartitionKey = "IDEMPOTENCY#c"
		// D differs from A by its key prefix alone: the same static partition key.
		layoutD := layoutA
		layoutD.KeyPrefix = "d-rec#"
		if err := persistence.CreateTableFor(ctx, e.ddb.(dynamoAdmin), layoutA); err != nil {
			t.Fatal(err)
		}
		storeA, errA := persistence.NewDynamoStoreLayout(e.ddb, layoutA)
		storeB, errB := persistence.NewDynamoStoreLayout(e.ddb, layoutB)
		storeC, errC := persistence.NewDynamoStoreLayout(e.ddb, layoutC)
		storeD, errD := persistence.NewDynamoStoreLayout(e.ddb, layoutD)
		if err := errors.Join(errA, errB, errC, errD); err != nil {
			t.Fatal(err)
		}
		now := e.clock.Now()
		crashed := func(s persistence.Store, key string) {
			t.Helper()
			rec := &persistence.Record{Key: key, Status: persistence.StatusInProgress, LeaseToken: "tok-" + key, LeaseUntil: now.Add(-time.Hour),
				Inflight: "0", ExpiresAt: now.Add(time.Hour), Attempt: 1, CreatedAt: now.Add(-2 * time.Hour), UpdatedAt: now.Add(-2 * time.Hour)}
			if _, created, err := s.Create(ctx, rec, now); err != nil || !created {
				t.Fatalf("stale lease %s: created=%v err=%v", key, created, err)
			}
		}
		// Interleaved, so that every page of the index mixes the consumers.
		for i := range 3 {
			crashed(storeB, fmt.Sprintf("b#k%d", i))
			crashed(storeA, fmt.Sprintf("a#k%d", i))
			crashed(storeA, fmt.Sprintf("other#k%d", i))
			crashed(storeC, fmt.Sprintf("c#k%d", i))
			crashed(storeD, fmt.Sprintf("d#k%d", i))
		}
		sweep := func(s persistence.Store, scope string) reaper.SweepResult {
			t.Helper()
			res, err := (&reaper.Reaper{Store: s, Scope: scope, Shards: 1, PageSize: 2, Clock: e.clock.Now}).Sweep(ctx)
			if err != nil {
				t.Fatalf("reaper of scope %q: %v (after %+v)", scope, err, res)
			}
			return res
		}
		if res := sweep(storeA, "a"); res.Reaped != 3 || res.Skipped != 3 {
			t.Fatalf("reaper a: %+v, want 3 reaped and the 3 of scope other skipped", res)
		}
		if res := sweep(storeB, "b"); res.Reaped != 3 || res.Skipped != 0 {
			t.Fatalf("reaper b: %+v, want 3 reaped", res)
		}
		if res := sweep(storeC, "c"); res.Reaped != 3 || res.Skipped != 0 {
			t.Fatalf("reaper c: %+v, want 3 reaped", res)
		}
		if res := sweep(storeD, "d"); res.Reaped != 3 || res.Skipped != 0 {
			t.Fatalf("reaper d: %+v, want 3 reaped", res)
		}
		for _, c := range []struct {
			s      persistence.Store
			prefix string
			want   persistence.Status
		}{{storeA, "a#", persistence.StatusFailed}, {storeB, "b#", persistence.StatusFailed}, {storeC, "c#", persistence.StatusFailed}, {storeD, "d#", persistence.StatusFailed}, {storeA, "other#", persistence.StatusInProgress}} {
			for i := range 3 {
				rec, err := c.s.Get(ctx, fmt.Sprintf("%sk%d", c.prefix, i), e.clock.Now())
				if err != nil || rec.Status != c.want {
					t.Errorf("%sk%d: %+v, %v; want %s", c.prefix, i, rec, err, c.want)
				}
			}
		}
		// The reaper of the third consumer, of every scope of layout A, reaps what is left.
		if res := sweep(storeA, ""); res.Reaped != 3 || res.Scanned != 3 {
			t.Fatalf("reaper of layout a, every scope: %+v, want the 3 of scope other", res)
		}
	}, []storeCase{{"dynamodb", newDynamoEnv}, {"simdb", newSimEnv}})
}

func TestReaperLosesRaceToLateCompletion(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.DefaultLease = time.Minute; cfg.Shards = 1 })
		var listed []persistence.StaleLease
		res, err := c.Do(ctx, req("late", `{}`), func(ctx context.Context, r *idem.Request) (idem.Result, error) {
			e.clock.Advance(2 * time.Minute)
			var err error
			listed, _, err = e.store.Stale(ctx, "0", e.clock.Now().Add(-30*time.Second), 10, "")
			return idem.Result{Response: []byte("late but fine"), Writes: []types.TransactWriteItem{e.bizWrite("late")}}, err
		})
		if err != nil || len(listed) != 1 {
			t.Fatalf("late completion: res=%+v err=%v listed=%d", res, err, len(listed))
		}
		// The reaper read the lease before the completion and acts after it.
		if err := e.store.Reap(ctx, listed[0], reaper.ReasonLeaseExpired, e.clock.Now()); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("reap after completion: %v, want ErrLeaseLost", err)
		}
		pk, _ := c.RecordKey("late")
		rec, err := e.store.Get(ctx, pk, e.clock.Now())
		if err != nil || rec.Status != persistence.StatusCompleted || string(rec.Response) != "late but fine" || e.bizCount(t, "late") != 1 {
			t.Fatalf("completion not intact: %+v err=%v", rec, err)
		}
	})
}

func TestUnlockFailsAStuckLockFenced(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := c.Do(ctx, req("stuck", `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
				close(started)
				<-release
				return idem.Result{Response: []byte("too late")}, nil
			})
			done <- err
		}()
		<-started
		pk, _ := c.RecordKey("stuck")
		if _, err := reaper.Unlock(ctx, e.store, pk, "operator unlock", e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		close(release)
		if err := <-done; !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("holder after unlock: %v", err)
		}
		if _, err := reaper.Unlock(ctx, e.store, pk, "again", e.clock.Now()); err == nil {
			t.Fatal("unlock of a FAILED record succeeded")
		}
	})
}

// TestConcurrentAcquireRunsOnce races 64 goroutines on each of 16 keys (200 keys with
// RELIABILITY=full, make reliability): exactly one runs the handler, the others get the
// stored response or ErrInProgress. Every key sees the whole race (the acquire, racers
// refused in progress, racers answered from the completed record); more keys repeat it.
// The 12 800 acquires of the full size were sized to catch moto's non-atomic writes,
// which awstest's TestConditionalPutsAreAtomic now guards against in seconds.
func TestConcurrentAcquireRunsOnce(t *testing.T) {
	racers, keys, keysAtOnce := 64, 16, 4
	if os.Getenv("RELIABILITY") == "full" {
		keys = 200
	}
	forEachLayout(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, func(cfg *idem.Config) { cfg.Clock = time.Now })
		var ran, replayed, inProgress atomic.Int64
		execs := make([]atomic.Int64, keys)
		sem := make(chan struct{}, keysAtOnce)
		var wg sync.WaitGroup
		for k := range keys {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				key := fmt.Sprintf("race-%d", k)
				want := "response of " + key
				start := make(chan struct{})
				var inner sync.WaitGroup
				for range racers {
					inner.Add(1)
					go func() {
						defer inner.Done()
						<-start
						res, err := c.Do(ctx, req(key, `{}`), func(context.Context, *idem.Request) (idem.Result, error) {
							execs[k].Add(1)
							return idem.Result{Response: []byte(want)}, nil
						})
						switch {
						case err == nil && !res.Replayed && string(res.Response) == want:
							ran.Add(1)
						case err == nil && res.Replayed && string(res.Response) == want:
							replayed.Add(1)
						case errors.Is(err, idem.ErrInProgress):
							inProgress.Add(1)
						default:
							t.Errorf("%s: unexpected outcome res=%+v err=%v", key, res, err)
						}
					}()
				}
				close(start)
				inner.Wait()
			}()
		}
		wg.Wait()
		for k := range keys {
			if n := execs[k].Load(); n != 1 {
				t.Errorf("race-%d: handler ran %d times, want exactly 1", k, n)
			}
		}
		if ran.Load() != int64(keys) || ran.Load()+replayed.Load()+inProgress.Load() != int64(racers*keys) {
			t.Errorf("outcomes: ran=%d replayed=%d in-progress=%d", ran.Load(), replayed.Load(), inProgress.Load())
		}
		t.Logf("%d keys x %d racers: ran=%d replayed=%d in-progress=%d", keys, racers, ran.Load(), replayed.Load(), inProgress.Load())
	})
}

func TestEmptyResponseRoundTrips(t *testing.T) {
	forEachLayout(t, func(t *testing.T, e *env) {
		c := e.client(t)
		var runs atomic.Int64
		h := func(context.Context, *idem.Request) (idem.Result, error) { runs.Add(1); return idem.Result{}, nil }
		for i := range 2 {
			res, err := c.Do(context.Background(), req("empty", `{}`), h)
			if err != nil || len(res.Response) != 0 || res.Replayed != (i == 1) {
				t.Fatalf("delivery %d: res=%+v err=%v", i+1, res, err)
			}
		}
		if runs.Load() != 1 {
			t.Fatalf("runs=%d", runs.Load())
		}
	})
}

// txSpy records the size of every transaction it passes on.
type txSpy struct {
	persistence.DynamoDBAPI
	mu    sync.Mutex
	items []int
}

func (s *txSpy) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	s.mu.Lock()
	s.items = append(s.items, len(in.TransactItems))
	s.mu.Unlock()
	return s.DynamoDBAPI.TransactWriteItems(ctx, in, o...)
}

// TestRecordFoldedIntoItsGuard: a handler whose guard write is the record's home
// (Result.HomeGuard) commits one item fewer: the record is the journal entry, at the
// record's key, with the journal's attributes beside its own and no TTL. Duplicates
// replay, another payload is refused, a refusal leaves it redrivable, and the outbound
// message goes out once: in both modes, on moto and on the simulator's DynamoDB, in the
// single-table layout.
func TestRecordFoldedIntoItsGuard(t *testing.T) {
	for _, mode := range []idem.Mode{idem.ModeLease, idem.ModeSingleTransaction} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			runStores(t, func(t *testing.T, e *env) {
				ctx := context.Background()
				store := e.store.(*persistence.DynamoStore)
				spy := &txSpy{DynamoDBAPI: e.ddb}
				folded, err := persistence.NewDynamoStoreLayout(spy, persistence.Layout{Table: e.table, PartitionKey: "PK", SortKey: "SK", StaticPartitionKey: "IDEMPOTENCY", KeyPrefix: "record#"})
				if err != nil {
					t.Fatal(err)
				}
				o := newOutbox(t)
				c, err := idem.New(idem.Config{Store: folded, Scope: "fold", Clock: e.clock.Now, Mode: mode, Sender: o.sqs})
				if err != nil {
					t.Fatal(err)
				}
				var runs atomic.Int64
				h := func(amount string) idem.HandlerFunc {
					return func(_ context.Context, r *idem.Request) (idem.Result, error) {
						runs.Add(1)
						pk, _ := c.RecordKey(r.Key)
						entry := store.Key(pk)
						entry["amount"] = &types.AttributeValueMemberN{Value: amount}
						return idem.Result{
							Response: []byte("credited " + amount),
							Writes: []types.TransactWriteItem{{Put: &types.Put{
								TableName: aws.String(e.table), Item: entry,
								ConditionExpression: aws.String("attribute_not_exists(SK)"),
							}}, e.bizWrite("acct")},
							Guards: []int{0}, HomeGuard: true, HomeKey: r.Key,
							Messages: []idem.Message{o.msg("receipt "+r.Key, "g")},
						}, nil
					}
				}
				for i := range 3 {
					res, err := c.Do(ctx, req("pay-1", `{"amount":5}`), h("5"))
					if err != nil || res.Replayed != (i > 0) || string(res.Response) != "credited 5" {
						t.Fatalf("delivery %d: %+v, %v", i, res, err)
					}
				}
				// Lease mode: one transaction; single-transaction mode: a duplicate that misses the
				// warm cache runs the handler and is answered by its transaction's refusal.
				if len(spy.items) == 0 || slices.ContainsFunc(spy.items, func(n int) bool { return n != 2 }) || mode == idem.ModeLease && len(spy.items) != 1 {
					t.Fatalf("transactions of %v items, want 2 each (the credit, and the record that is the journal entry)", spy.items)
				}
				pk, _ := c.RecordKey("pay-1")
				got, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.table), Key: store.Key(pk), ConsistentRead: aws.Bool(true)})
				if err != nil {
					t.Fatal(err)
				}
				item := got.Item
				if s, _ := item["status"].(*types.AttributeValueMemberS); s == nil || s.Value != string(persistence.StatusCompleted) {
					t.Fatalf("the journal entry is not the completed record: %v", item)
				}
				if a, _ := item["amount"].(*types.AttributeValueMemberN); a == nil || a.Value != "5" {
					t.Fatalf("the record lost the journal's attributes: %v", item)
				}
				if _, ok := item["expires_at"]; ok {
					t.Fatalf("the folded record expires: %v; it must live as long as the journal", item["expires_at"])
				}
				if got := bodies(o.drain(t)); len(got) != 1 || got[0] != "receipt pay-1" {
					t.Fatalf("receipts %v, want one", got)
				}
				if n := e.bizCount(t, "acct"); n != 1 {
					t.Fatalf("%d credits, want 1", n)
				}
				if mode == idem.ModeLease && runs.Load() != 1 {
					t.Fatalf("handler ran %d times, want 1", runs.Load())
				}
				// The same key with another payload: refused, nothing credited, nothing sent.
				e.clock.Advance(30 * 24 * time.Hour) // past any TTL: the folded record still holds
				if _, err := c.Do(ctx, req("pay-1", `{"amount":6}`), h("6")); !errors.Is(err, idem.ErrPayloadMismatch) {
					t.Fatalf("another payload a month later: %v, want ErrPayloadMismatch", err)
				}
				if res, err := c.Do(ctx, req("pay-1", `{"amount":5}`), h("5")); err != nil || !res.Replayed {
					t.Fatalf("the same payload a month later: %+v, %v; want a replay", res, err)
				}
				if n := e.bizCount(t, "acct"); n != 1 || len(o.drain(t)) != 0 {
					t.Fatalf("%d credits, want 1, and no more receipt", n)
				}
				// A guard that stands for another key than the request's: folded at the
				// request's key it would guard nothing else, so it is refused whole.
				other := func(_ context.Context, r *idem.Request) (idem.Result, error) {
					res, err := h("7")(ctx, r)
					res.HomeKey = "pay-2"
					return res, err
				}
				if _, err := c.Do(ctx, req("client-key-9", `{"amount":7}`), other); !errors.Is(err, idem.ErrHomeKey) || !idem.IsPermanent(err) {
					t.Fatalf("a fold under another key: %v, want a permanent ErrHomeKey", err)
				}
				if n := e.bizCount(t, "acct"); n != 1 || len(o.drain(t)) != 0 {
					t.Fatalf("%d credits after a refused fold, want 1, and no receipt", n)
				}
			}, []storeCase{
				{"dynamodb", func(t *testing.T) *env { return newDynamoLayoutEnv(t, layoutSingle) }},
				{"simdb", func(t *testing.T) *env { return newSimLayoutEnv(t, layoutSingle) }},
			})
		})
	}
}
