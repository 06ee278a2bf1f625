package consumerapp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

func TestMain(m *testing.M) { os.Exit(awstest.MainOwn(m)) }

// fixture is one consumer of the wired example (or the one EXAMPLE names) on the
// template's resources, created on the local endpoint under a stack name of its own.
type fixture struct {
	ex       example.Example
	st       *exampletest.Stack
	cfg      consumerapp.Config
	ddb      *dynamodb.Client
	sqs      *sqs.Client
	outbound string // the queue of the example's outbound messages ("": none to count)
	// outboundVar names the variable of outbound, and confirms tells which message an
	// outbound message confirms (example.Confirmer; nil: none to count).
	outboundVar string
	confirms    func(body string) (string, bool)
	inputARN    string // the consumer's input queue (QUEUE_URL)
	logs        bytes.Buffer
	emf         bytes.Buffer
	rng         *rand.Rand
	run         string
}

var runs atomic.Int64

// newFixture creates the resources and reads the configuration with consumerapp.FromEnv
// from the template's environment, exampletest.TestEnv and then overrides on top.
func newFixture(t testing.TB, overrides ...map[string]string) *fixture {
	t.Helper()
	ex := exampletest.Example(t)
	st := exampletest.Up(t, ex)
	f := &fixture{ex: ex, st: st, ddb: st.DynamoDB, sqs: st.SQS,
		rng: rand.New(rand.NewPCG(1, uint64(runs.Add(1)))), run: fmt.Sprintf("%s%d", awstest.RunID(), runs.Load())}
	f.cfg = f.config(t, overrides...)
	if f.confirms, f.outboundVar = exampletest.Confirms(ex); f.outboundVar != "" {
		f.outbound = st.Must(t, f.outboundVar)
	}
	f.inputARN = st.InputARN(t)
	return f
}

// config is consumerapp.FromEnv of the functions' environment with exampletest.TestEnv
// and overrides on top.
func (f *fixture) config(t testing.TB, overrides ...map[string]string) consumerapp.Config {
	t.Helper()
	cfg, err := consumerapp.FromEnv(exampletest.LookupIn(f.st.Vars(append([]map[string]string{exampletest.TestEnv}, overrides...)...)))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// gen is the example's traffic generator; a test of an example without one is skipped
// (exampletest.Traffic).
func (f *fixture) gen(t testing.TB) example.Traffic {
	t.Helper()
	return exampletest.Traffic(t, f.ex)
}

// traffic returns n valid messages of the example over at most groups FIFO groups, the
// example prepared for them (example.Prepare).
func (f *fixture) traffic(t testing.TB, n, groups int) []example.Message {
	t.Helper()
	msgs := f.gen(t).Traffic(f.rng, f.run, n, groups)
	f.prepare(t, msgs)
	return msgs
}

func (f *fixture) prepare(t testing.TB, msgs []example.Message) {
	t.Helper()
	if err := example.Prepare(context.Background(), f.ex, f.ddb, f.st.Lookup, msgs); err != nil {
		t.Fatal(err)
	}
}

// record is m as Lambda delivers it from the FIFO input queue, with message id id
// (exampletest.Record).
func (f *fixture) record(m example.Message, id string) events.SQSMessage {
	return exampletest.Record(m, id, f.inputARN)
}

// records are the records of msgs, message id prefix + the message's business id.
func (f *fixture) records(msgs []example.Message, prefix string) []events.SQSMessage {
	return exampletest.Records(msgs, prefix, f.inputARN)
}

// handler builds the consumer exactly as main.go does, with wrap wrapping DynamoDB.
func (f *fixture) handler(t testing.TB, wrap func(persistence.DynamoDBAPI) persistence.DynamoDBAPI) lambda.Handler {
	t.Helper()
	var ddb persistence.DynamoDBAPI = f.ddb
	if wrap != nil {
		ddb = wrap(ddb)
	}
	h, err := consumerapp.New(f.cfg, consumerapp.Deps{DynamoDB: ddb, SQS: f.sqs, Logs: &f.logs, Metrics: &f.emf, Owner: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	return lambda.NewHandler(h)
}

// checkApplied checks the example's tables against exactly applied (distinct messages
// of valid) having been applied once: the effects counted in the tables, and each name
// of the expected state. An example without an example.Checker skips the test here.
func (f *fixture) checkApplied(t testing.TB, what string, valid, applied []example.Message) {
	t.Helper()
	checker := exampletest.Checker(t, f.ex)
	want, err := checker.Expect(valid, applied)
	if err != nil {
		t.Fatal(err)
	}
	got, err := checker.Read(context.Background(), f.ddb, f.st.Lookup)
	if err != nil {
		t.Fatal(err)
	}
	if got.Applied != len(applied) {
		t.Errorf("%s: %d effects in the example's tables, want %d", what, got.Applied, len(applied))
	}
	names := slices.Sorted(maps.Keys(want))
	for _, name := range names {
		if got.State[name] != want[name] {
			t.Errorf("%s: %s = %d, want %d", what, name, got.State[name], want[name])
		}
	}
}

// checkOutbound drains the example's outbound queue and checks that it holds one
// message confirming each of applied, and nothing else. Without an example.Confirmer
// there is nothing to count.
func (f *fixture) checkOutbound(t testing.TB, applied []example.Message) {
	t.Helper()
	if f.outbound == "" {
		return
	}
	seen := map[string]int{}
	for _, m := range exampletest.ReceiveAll(t, f.sqs, f.outbound) {
		id, ok := f.confirms(aws.ToString(m.Body))
		if !ok {
			t.Errorf("an outbound message confirms no message: %.200s", aws.ToString(m.Body))
			continue
		}
		seen[id]++
	}
	for _, m := range applied {
		if seen[m.ID] != 1 {
			t.Errorf("%d outbound messages confirm %s, want 1", seen[m.ID], m.ID)
		}
		delete(seen, m.ID)
	}
	for id, n := range seen {
		t.Errorf("%d outbound messages confirm %s, which was not applied", n, id)
	}
}

// throttleOnce fails the transaction that writes the record of one key once, as a
// DynamoDB throttle would after the SDK's retries gave up.
type throttleOnce struct {
	persistence.DynamoDBAPI
	pk   string
	done atomic.Bool
}

func (d *throttleOnce) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	for _, it := range in.TransactItems {
		var key map[string]types.AttributeValue
		switch {
		case it.Update != nil:
			key = it.Update.Key
		case it.Put != nil:
			key = it.Put.Item
		}
		if s, ok := key["pk"].(*types.AttributeValueMemberS); ok && s.Value == d.pk && d.done.CompareAndSwap(false, true) {
			return nil, &smithy.GenericAPIError{Code: "ProvisionedThroughputExceededException", Message: "injected throttle"}
		}
	}
	return d.DynamoDBAPI.TransactWriteItems(ctx, in, o...)
}

// TestFIFOGroupStopsAtFirstFailure: the second message of a group fails (its completion
// is throttled), so the rest of its group is reported unprocessed without running, the
// other groups complete; SQS redelivers the failed records and the tables end exact.
func TestFIFOGroupStopsAtFirstFailure(t *testing.T) {
	f := newFixture(t)
	valid := f.traffic(t, 10, 3) // some group has at least 4 messages
	byGroup := map[string][]int{}
	for i, m := range valid {
		byGroup[m.Group] = append(byGroup[m.Group], i)
	}
	var group []int
	for _, m := range valid {
		if g := byGroup[m.Group]; len(g) >= 3 {
			group = g
			break
		}
	}
	if group == nil {
		t.Fatalf("no group of 3 messages in %d messages over 3 groups", len(valid))
	}
	pk, err := idem.RecordKey(f.cfg.Scope, valid[group[1]].Key, false)
	if err != nil {
		t.Fatal(err)
	}
	h := f.handler(t, func(d persistence.DynamoDBAPI) persistence.DynamoDBAPI { return &throttleOnce{DynamoDBAPI: d, pk: pk} })
	recs := f.records(valid, "m-")
	failed := exampletest.Invoke(t, h, context.Background(), exampletest.Encode(t, recs))
	var want []string
	var again []events.SQSMessage
	var applied []example.Message
	for i, r := range recs {
		if slices.Contains(group[1:], i) {
			want = append(want, r.MessageId)
			again = append(again, r)
		} else {
			applied = append(applied, valid[i])
		}
	}
	if !slices.Equal(failed, want) {
		t.Fatalf("failures %v, want the group's second message and the rest of its group %v", failed, want)
	}
	f.checkApplied(t, "after the first delivery", valid, applied)
	// SQS redelivers the failed records (the others were deleted).
	f.redeliver(t, h, "after the redelivery", valid, again)
}

// redeliver invokes h with the records SQS delivers again, which must all succeed, and
// checks that each of valid was applied and sent once.
func (f *fixture) redeliver(t *testing.T, h lambda.Handler, what string, valid []example.Message, again []events.SQSMessage) {
	t.Helper()
	if len(again) > 0 {
		if failed := exampletest.Invoke(t, h, context.Background(), exampletest.Encode(t, again)); len(failed) != 0 {
			t.Fatalf("redelivery failures %v", failed)
		}
	}
	f.checkApplied(t, what, valid, valid)
	f.checkOutbound(t, valid)
}

// TestDuplicatesAcrossBatches: the same messages arrive in three batches (with new
// message ids, as after the FIFO dedup window) and concurrently: each is applied once.
func TestDuplicatesAcrossBatches(t *testing.T) {
	f := newFixture(t)
	h := f.handler(t, nil)
	valid := f.traffic(t, 8, 3)
	first, other := f.records(valid, "m-"), f.records(valid, "redelivered-")
	done := make(chan []string, 3)
	for _, batch := range [][]events.SQSMessage{first, other, first} {
		go func() { done <- exampletest.Invoke(t, h, context.Background(), exampletest.Encode(t, batch)) }()
	}
	retry := map[string]bool{}
	for range 3 {
		for _, id := range <-done {
			retry[id] = true
		}
	}
	// Records refused as in progress (another batch held the key) are redelivered.
	var again []events.SQSMessage
	for _, r := range append(slices.Clone(first), other...) {
		if retry[r.MessageId] {
			again = append(again, r)
		}
	}
	f.redeliver(t, h, "after three deliveries", valid, again)
}

// TestDeadlineMargin: with the deadline closer than the margin no record starts and all
// are reported as failures; nothing is applied.
func TestDeadlineMargin(t *testing.T) {
	f := newFixture(t)
	h := f.handler(t, nil)
	valid := f.traffic(t, 8, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // margin is 2s
	defer cancel()
	if failed := exampletest.Invoke(t, h, ctx, exampletest.Encode(t, f.records(valid, "m-"))); len(failed) != len(valid) {
		t.Fatalf("%d failures, want all %d", len(failed), len(valid))
	}
	f.checkApplied(t, "near the deadline", valid, nil)
	f.checkOutbound(t, nil)
}

// TestStoreDownFailsClosed: with DynamoDB unreachable every record is reported for
// redelivery, nothing is dead-lettered and no outbound message is sent.
func TestStoreDownFailsClosed(t *testing.T) {
	f := newFixture(t)
	h := f.handler(t, func(persistence.DynamoDBAPI) persistence.DynamoDBAPI { return down{} })
	valid := f.traffic(t, 8, 3)
	// The first record of each group fails and the rest of the group is skipped.
	if failed := exampletest.Invoke(t, h, context.Background(), exampletest.Encode(t, f.records(valid, "m-"))); len(failed) != len(valid) {
		t.Fatalf("%d failures, want %d", len(failed), len(valid))
	}
	if n := len(exampletest.ReceiveAll(t, f.sqs, f.cfg.DLQURL)); n != 0 {
		t.Fatalf("%d messages dead-lettered while the store was down", n)
	}
	f.checkOutbound(t, nil)
	f.checkApplied(t, "with the store down", valid, nil)
}

type down struct{ persistence.DynamoDBAPI }

var errDown = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

func (down) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return nil, errDown
}

func (down) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return nil, errDown
}

// consumerVars are the variables FromEnv requires whatever the example.
var consumerVars = []string{"IDEMPOTENCY_TABLE", "DLQ_URL", "IDEMPOTENCY_SCOPE"}

// exampleVars are the variables the example's template block gives the consumer,
// EXAMPLE aside: the names of its environment region.
func exampleVars(t testing.TB, ex example.Example) []string {
	t.Helper()
	block := string(ex.Template())
	_, rest, ok := strings.Cut(block, "# example:begin environment")
	region, _, ok2 := strings.Cut(rest, "# example:end environment")
	if !ok || !ok2 {
		t.Fatalf("example %s: its block has no environment region", ex.Name())
	}
	var names []string
	for line := range strings.Lines(region) {
		name, _, found := strings.Cut(strings.TrimSpace(line), ":")
		if found && name != "" && !strings.HasPrefix(name, "#") && name != example.Var {
			names = append(names, name)
		}
	}
	return names
}

// minimalEnv is the part of the template's environment FromEnv requires: the
// consumer's required variables, EXAMPLE and the example's variables.
func minimalEnv(t testing.TB, f *fixture) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, name := range append(append(slices.Clone(consumerVars), example.Var), exampleVars(t, f.ex)...) {
		m[name] = f.st.Must(t, name)
	}
	return m
}

func TestFromEnv(t *testing.T) {
	f := newFixture(t)
	env := minimalEnv(t, f)
	env["IDEMPOTENCY_TTL"], env["INFLIGHT_SHARDS"] = "2h", "8"
	cfg, err := consumerapp.FromEnv(exampletest.LookupIn(env))
	if err != nil || cfg.TTL != 2*time.Hour || cfg.Shards != 8 || cfg.Scope != env["IDEMPOTENCY_SCOPE"] || cfg.LeaseGrace != 30*time.Second ||
		cfg.Mode != idem.ModeLease || cfg.KeyField != "" || cfg.Example == nil || cfg.Example.Name() != f.ex.Name() || cfg.Env == nil || cfg.Handler != nil {
		t.Fatalf("cfg=%+v err=%v", cfg, err)
	}
	// The single-transaction mode, unless the example says its handler cannot run in it
	// (example.LeaseOnly): then the init refuses it with the example's reason.
	env["IDEMPOTENCY_MODE"] = "single-transaction"
	cfg, err = consumerapp.FromEnv(exampletest.LookupIn(env))
	if lo, ok := f.ex.(example.LeaseOnly); ok {
		var me *example.ModeError
		if !errors.As(err, &me) || !errors.Is(err, idem.ErrNotInThisMode) || !strings.Contains(err.Error(), lo.LeaseOnly()) {
			t.Fatalf("IDEMPOTENCY_MODE=single-transaction for lease-only example %s: err=%v, want an *example.ModeError with its reason %q", f.ex.Name(), err, lo.LeaseOnly())
		}
	} else if err != nil || cfg.Mode != idem.ModeSingleTransaction {
		t.Fatalf("IDEMPOTENCY_MODE=single-transaction: cfg=%+v err=%v", cfg, err)
	}
	// Everything wrong at once is reported at once.
	_, err = consumerapp.FromEnv(exampletest.LookupIn(map[string]string{example.Var: f.ex.Name(), "IDEMPOTENCY_TTL": "soon", "INFLIGHT_SHARDS": "0", "IDEMPOTENCY_MODE": "fast"}))
	wants := []string{`IDEMPOTENCY_TTL="soon"`, `INFLIGHT_SHARDS="0"`, `IDEMPOTENCY_MODE="fast" is not one of lease, single-transaction`}
	for _, name := range consumerVars {
		wants = append(wants, name+" is not set")
	}
	for _, want := range wants {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %s", err, want)
		}
	}
}

// TestFromEnvExample: an EXAMPLE no example of the build has is refused as
// example.ErrUnknown, together with the consumer's own missing variables; a missing
// variable of the example is named by New, which builds the example's handler.
func TestFromEnvExample(t *testing.T) {
	f := newFixture(t)
	env := minimalEnv(t, f)
	unknown := maps.Clone(env)
	unknown[example.Var] = "no-such-example"
	delete(unknown, "DLQ_URL")
	_, err := consumerapp.FromEnv(exampletest.LookupIn(unknown))
	if !errors.Is(err, example.ErrUnknown) || !strings.Contains(err.Error(), `"no-such-example"`) || !strings.Contains(err.Error(), f.ex.Name()) ||
		!strings.Contains(err.Error(), "DLQ_URL is not set") {
		t.Errorf("EXAMPLE=no-such-example without DLQ_URL: error %v, want example.ErrUnknown naming the name, the build's examples and DLQ_URL", err)
	}
	deps := consumerapp.Deps{DynamoDB: f.ddb, SQS: f.sqs, Logs: io.Discard, Metrics: io.Discard}
	if _, err := consumerapp.New(f.config(t), deps); err != nil {
		t.Fatalf("New with every variable: %v", err)
	}
	required := 0
	for _, name := range exampleVars(t, f.ex) {
		without := maps.Clone(env)
		delete(without, name)
		cfg, err := consumerapp.FromEnv(exampletest.LookupIn(without))
		if err != nil {
			t.Fatalf("without %s of the example: FromEnv: %v, want the example's variables left to New", name, err)
		}
		if _, err := consumerapp.New(cfg, deps); err == nil {
			t.Logf("%s of example %s is optional", name, f.ex.Name())
			continue
		} else if !strings.Contains(err.Error(), name) || !strings.HasPrefix(err.Error(), "consumer configuration: ") {
			t.Errorf("without %s: New: error %v, want it named", name, err)
		}
		required++
	}
	t.Logf("example %s: %d required variables of %v", f.ex.Name(), required, exampleVars(t, f.ex))
}
