package payouts_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/payouts"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/gateway"
)

// TestMain points the tests at a local endpoint, starting moto when AWS_ENDPOINT_URL is
// unset (a moto of the package's own under make test).
func TestMain(m *testing.M) { os.Exit(awstest.MainOwn(m)) }

var ex = payouts.Example{}

// world is the payouts' block of the template on moto (exampletest.Up, which starts
// the gateway's stand-in), and the consumer built on it as main.go builds it.
type world struct {
	st       *exampletest.Stack
	cfg      consumerapp.Config
	gw       *gateway.Server
	table    string
	inputARN string
	seq      atomic.Int64
	clock    func() time.Time // the consumers' clock; nil: time.Now
}

func newWorld(t *testing.T) *world {
	t.Helper()
	st := exampletest.Up(t, ex)
	w := &world{st: st, cfg: st.Config(t), gw: st.Gateways[payouts.GatewayVar], table: st.Must(t, payouts.TableVar), inputARN: st.InputARN(t)}
	if w.gw == nil {
		t.Fatal("exampletest.Up started no stand-in for the payment gateway")
	}
	return w
}

// consumer is a fresh consumer (a cold container); wrap, when set, wraps its DynamoDB
// client (the machinery's and the handler's).
func (w *world) consumer(t *testing.T, wrap func(persistence.DynamoDBAPI) persistence.DynamoDBAPI) lambda.Handler {
	t.Helper()
	var ddb persistence.DynamoDBAPI = w.st.DynamoDB
	if wrap != nil {
		ddb = wrap(ddb)
	}
	h, err := consumerapp.New(w.cfg, consumerapp.Deps{DynamoDB: ddb, SQS: w.st.SQS, Logs: &strings.Builder{}, Metrics: &strings.Builder{}, Owner: t.Name(), Clock: w.clock})
	if err != nil {
		t.Fatal(err)
	}
	return lambda.NewHandler(h)
}

// deliver hands h one batch of msgs, each with a new message id, and returns the ids of
// the failed records' messages (by business id).
func (w *world) deliver(t *testing.T, h lambda.Handler, msgs ...example.Message) []string {
	t.Helper()
	recs := make([]events.SQSMessage, len(msgs))
	byID := map[string]string{}
	for i, m := range msgs {
		id := fmt.Sprintf("m-%d", w.seq.Add(1))
		recs[i] = exampletest.Record(m, id, w.inputARN)
		byID[id] = m.ID
	}
	var failed []string
	for _, id := range exampletest.Invoke(t, h, context.Background(), exampletest.Encode(t, recs)) {
		failed = append(failed, byID[id])
	}
	return failed
}

func (w *world) enable(t *testing.T, payee string) {
	t.Helper()
	if err := payouts.EnablePayee(context.Background(), w.st.DynamoDB, w.table, payee); err != nil {
		t.Fatal(err)
	}
}

func (w *world) payees(t *testing.T) map[string]payouts.Payee {
	t.Helper()
	p, err := payouts.Payees(context.Background(), w.st.DynamoDB, w.table)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// calls returns the gateway's calls per key.
func (w *world) calls(t *testing.T) map[string][]gateway.Call {
	t.Helper()
	per := map[string][]gateway.Call{}
	for _, c := range w.gw.Calls() {
		per[c.Key] = append(per[c.Key], c)
	}
	return per
}

// notices drains the notices queue and returns the notices by payout id.
func (w *world) notices(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, m := range exampletest.DrainAll(t, w.st.SQS, w.st.Must(t, payouts.NoticesVar)) {
		id, ok := ex.Confirms(aws.ToString(m.Body))
		if !ok {
			t.Errorf("a notice confirms nothing: %s", aws.ToString(m.Body))
		}
		out[id]++
	}
	return out
}

func (w *world) record(t *testing.T, key string) *persistence.Record {
	t.Helper()
	store, err := persistence.NewDynamoStore(w.st.DynamoDB, w.cfg.IdempotencyTable)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := idem.RecordKey(w.cfg.Scope, key, false)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := store.Get(context.Background(), pk, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func payout(id, payee string, cents int64) example.Message {
	m, err := ex.Decode(fmt.Appendf(nil, `{"payout_id":%q,"payee_id":%q,"amount_cents":%d}`, id, payee, cents))
	if err != nil {
		panic(err)
	}
	return m
}

// checkPaid checks that payee was paid exactly the payouts of msgs, once each: its row's
// totals, one gateway application per key, one notice per payout.
func (w *world) checkPaid(t *testing.T, payee string, msgs ...example.Message) {
	t.Helper()
	var cents int64
	for _, m := range msgs {
		p, err := payouts.Decode([]byte(m.Body))
		if err != nil {
			t.Fatal(err)
		}
		cents += p.AmountCents
		applied := 0
		for _, c := range w.calls(t)[m.Key] {
			if c.Outcome == gateway.Applied || c.Outcome == gateway.Lost {
				applied++
			}
			if c.Body != fmt.Sprintf(`{"payout_id":%q,"payee_id":%q,"amount_cents":%d}`, p.PayoutID, p.PayeeID, p.AmountCents) {
				t.Errorf("payout %s: the gateway got body %s", m.ID, c.Body)
			}
		}
		if applied != 1 {
			t.Errorf("payout %s: applied %d times by the gateway, want 1 (calls %+v)", m.ID, applied, w.calls(t)[m.Key])
		}
	}
	got := w.payees(t)[payee]
	if got.PaidCents != cents || got.Payouts != int64(len(msgs)) {
		t.Errorf("payee %s: %+v, want %d cents over %d payouts", payee, got, cents, len(msgs))
	}
}

// checkTransfer checks that the payout of m was committed with the id the gateway gave
// its transfer (the step's recorded answer): in its journal entry, and in its record.
func (w *world) checkTransfer(t *testing.T, m example.Message) {
	t.Helper()
	var id string
	for _, c := range w.calls(t)[m.Key] {
		if c.Outcome == gateway.Applied {
			id = c.ID
		}
	}
	out, err := w.st.DynamoDB.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(w.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"payee_id": &types.AttributeValueMemberS{Value: payouts.EntryPrefix + m.ID}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := out.Item["transfer_id"].(*types.AttributeValueMemberS)
	if id == "" || got == nil || got.Value != id {
		t.Errorf("payout %s: journal entry's transfer_id %v, want the gateway's %q", m.ID, out.Item["transfer_id"], id)
	}
	if a := w.record(t, m.Key).Answers[payouts.StepTransfer]; string(a) != id {
		t.Errorf("payout %s: the record's answer of the step is %q, want %q", m.ID, a, id)
	}
}

// TestPayout: a payout reads its payee, calls the gateway once with its key, and is
// written and noticed once; its duplicates (a warm and a cold consumer) call nothing.
func TestPayout(t *testing.T) {
	w := newWorld(t)
	w.enable(t, "pe-1")
	m := payout("po-1", "pe-1", 1250)
	h := w.consumer(t, nil)
	for i := range 2 {
		if failed := w.deliver(t, h, m); len(failed) != 0 {
			t.Fatalf("delivery %d: failed %v", i+1, failed)
		}
	}
	if failed := w.deliver(t, w.consumer(t, nil), m); len(failed) != 0 {
		t.Fatalf("cold duplicate: failed %v", failed)
	}
	calls := w.calls(t)[m.Key]
	if len(calls) != 1 || calls[0].Outcome != gateway.Applied || calls[0].Path != payouts.TransfersPath || calls[0].Method != "POST" {
		t.Fatalf("gateway calls %+v, want one POST %s applied under key %s", calls, payouts.TransfersPath, m.Key)
	}
	w.checkPaid(t, "pe-1", m)
	w.checkTransfer(t, m)
	if n := w.notices(t); n["po-1"] != 1 || len(n) != 1 {
		t.Errorf("notices %v, want one for po-1", n)
	}
	if rec := w.record(t, m.Key); rec.Status != persistence.StatusCompleted || len(rec.Steps) != 1 || rec.Steps[0] != payouts.StepTransfer {
		t.Errorf("record %+v, want COMPLETED with step %s", rec, payouts.StepTransfer)
	}
}

// TestRefusedBeforeTheCall: a payout to a payee that is not enabled is refused from the
// payee's row before the gateway is called: dead-lettered with the reason, nothing
// written or sent, the record retryable. Once the payee is enabled, the redriven payout
// is paid once.
func TestRefusedBeforeTheCall(t *testing.T) {
	w := newWorld(t)
	var bad example.Bad
	for _, b := range ex.Bad("r", nil) {
		if b.Fix != nil {
			bad = b
		}
	}
	if bad.Fix == nil {
		t.Fatal("Bad has no refusal a fix cures")
	}
	h := w.consumer(t, nil)
	for i := range 2 { // a redrive before the fix is refused the same way
		if failed := w.deliver(t, h, bad.Message); len(failed) != 0 {
			t.Fatalf("delivery %d: failed %v (a refusal is dead-lettered, not retried)", i+1, failed)
		}
	}
	dlq := exampletest.DrainAll(t, w.st.SQS, w.cfg.DLQURL)
	if len(dlq) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dlq))
	}
	for _, d := range dlq {
		if reason := aws.ToString(d.MessageAttributes[sqsmsg.DLQReasonAttribute].StringValue); !strings.Contains(reason, bad.Reason) {
			t.Errorf("dead letter reason %q, want %q", reason, bad.Reason)
		}
	}
	if calls := w.gw.Calls(); len(calls) != 0 {
		t.Fatalf("the gateway was called for a refused payout: %+v", calls)
	}
	if len(w.payees(t)) != 0 || len(w.notices(t)) != 0 {
		t.Fatalf("a refused payout left payees %v or notices", w.payees(t))
	}
	if rec := w.record(t, bad.Key); rec.Status != persistence.StatusFailed || !rec.Retryable {
		t.Fatalf("record %+v, want FAILED and retryable", rec)
	}
	if err := bad.Fix(context.Background(), w.st.DynamoDB, w.st.Lookup); err != nil {
		t.Fatal(err)
	}
	if failed := w.deliver(t, h, bad.Message); len(failed) != 0 {
		t.Fatalf("after the fix: failed %v", failed)
	}
	p, _ := payouts.Decode([]byte(bad.Body))
	w.checkPaid(t, p.PayeeID, bad.Message)
	if n := w.notices(t); n[bad.ID] != 1 {
		t.Errorf("notices %v, want one for %s", n, bad.ID)
	}
}

// failOnce makes the first DynamoDB request that match picks fail, before it is sent:
// what a crash leaves at that moment, for the record (the request never arrived).
type failOnce struct {
	persistence.DynamoDBAPI
	match func(op, update string) bool
	done  atomic.Bool
}

var errCrash = errors.New("injected: the process died before this request")

func (f *failOnce) hit(op, update string) bool {
	return f.match(op, update) && f.done.CompareAndSwap(false, true)
}

func (f *failOnce) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f.hit("UpdateItem", aws.ToString(in.UpdateExpression)) {
		return nil, errCrash
	}
	return f.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

func (f *failOnce) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if f.hit("TransactWriteItems", "") {
		return nil, errCrash
	}
	return f.DynamoDBAPI.TransactWriteItems(ctx, in, o...)
}

// isStep matches the request that records a step (idem's ADD to the steps set).
func isStep(op, update string) bool { return op == "UpdateItem" && strings.Contains(update, " :step") }

// TestInterruptedAroundTheStep: an attempt that stops after the gateway's call and before
// its step is recorded is taken over and calls again with the same key: the gateway
// sees the key twice and pays once. One that stops after the step was recorded and
// before the commit is taken over without a second call. Either way the payout is
// written and noticed once.
func TestInterruptedAroundTheStep(t *testing.T) {
	for _, c := range []struct {
		name  string
		match func(op, update string) bool
		calls int
	}{
		{"before the step is recorded", isStep, 2},
		{"after the step, before the commit", func(op, _ string) bool { return op == "TransactWriteItems" }, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			w.enable(t, "pe-1")
			m := payout("po-1", "pe-1", 700)
			h := w.consumer(t, func(d persistence.DynamoDBAPI) persistence.DynamoDBAPI {
				return &failOnce{DynamoDBAPI: d, match: c.match}
			})
			if failed := w.deliver(t, h, m); len(failed) != 1 {
				t.Fatalf("first delivery: failed %v, want the payout retried", failed)
			}
			if failed := w.deliver(t, h, m); len(failed) != 0 {
				t.Fatalf("redelivery: failed %v", failed)
			}
			calls := w.calls(t)[m.Key]
			if len(calls) != c.calls {
				t.Fatalf("the gateway got %d calls for the key, want %d: %+v", len(calls), c.calls, calls)
			}
			w.checkPaid(t, "pe-1", m)
			w.checkTransfer(t, m)
			if rec := w.record(t, m.Key); rec.Attempt != 2 || rec.Status != persistence.StatusCompleted {
				t.Errorf("record %+v, want COMPLETED on its second attempt", rec)
			}
			if n := w.notices(t); n["po-1"] != 1 {
				t.Errorf("notices %v, want one", n)
			}
		})
	}
}

// TestGatewayFaults: the gateway fails, or hangs past the invocation's deadline: the
// delivery fails and its retry calls again with the same key. It loses its answer: Go's
// HTTP client sends the request again at once, since it carries an Idempotency-Key (see
// net/http.Transport), and the gateway answers it from the key. Each payout is paid once.
func TestGatewayFaults(t *testing.T) {
	w := newWorld(t)
	w.enable(t, "pe-1")
	h := w.consumer(t, nil)
	for i, f := range []gateway.Faults{{Fail: 1}, {Lose: 1}, {Hang: 1}} {
		m := payout(fmt.Sprintf("po-%d", i), "pe-1", 100)
		w.gw.Inject(f)
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second) // the margin is 2 s
		failed := exampletest.Invoke(t, h, ctx, exampletest.Encode(t, []events.SQSMessage{exampletest.Record(m, fmt.Sprintf("f-%d", i), w.inputARN)}))
		cancel()
		if f.Lose == 0 {
			if len(failed) != 1 {
				t.Fatalf("fault %+v: failed %v, want the payout retried", f, failed)
			}
			if failed := w.deliver(t, h, m); len(failed) != 0 {
				t.Fatalf("fault %+v: the retry failed %v", f, failed)
			}
		} else if len(failed) != 0 {
			t.Fatalf("fault %+v: failed %v, want the client's own retry to get the answer", f, failed)
		}
		calls := w.calls(t)[m.Key]
		if len(calls) != 2 || calls[1].Outcome != map[bool]string{true: gateway.Replayed, false: gateway.Applied}[f.Lose > 0] {
			t.Errorf("fault %+v: calls %+v, want the faulty one and the retry", f, calls)
		}
	}
	w.checkPaid(t, "pe-1", payout("po-0", "pe-1", 100), payout("po-1", "pe-1", 100), payout("po-2", "pe-1", 100))
}

// TestConcurrentDeliveries: eight consumers get the same payout at once; one holds the
// lease and calls the gateway, the others are retried and answered: one call.
func TestConcurrentDeliveries(t *testing.T) {
	w := newWorld(t)
	w.enable(t, "pe-1")
	m := payout("po-1", "pe-1", 300)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := w.consumer(t, nil)
			for try := 0; try < 50 && len(w.deliver(t, h, m)) != 0; try++ {
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if calls := w.calls(t)[m.Key]; len(calls) != 1 {
		t.Fatalf("%d gateway calls, want 1: %+v", len(calls), calls)
	}
	w.checkPaid(t, "pe-1", m)
}

// TestAfterTheRecordIsGone: once the idempotency record is deleted (as its TTL does), a
// redelivery finds the payout's journal entry (idem.Attempt.Applied) and calls the
// gateway no more, writes nothing and sends nothing.
func TestAfterTheRecordIsGone(t *testing.T) {
	w := newWorld(t)
	w.enable(t, "pe-1")
	m := payout("po-1", "pe-1", 900)
	if failed := w.deliver(t, w.consumer(t, nil), m); len(failed) != 0 {
		t.Fatalf("failed %v", failed)
	}
	w.notices(t)
	pk, err := idem.RecordKey(w.cfg.Scope, m.Key, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.st.DynamoDB.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
		TableName: aws.String(w.cfg.IdempotencyTable), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}},
	}); err != nil {
		t.Fatal(err)
	}
	if failed := w.deliver(t, w.consumer(t, nil), m); len(failed) != 0 {
		t.Fatalf("after the deletion: failed %v", failed)
	}
	if calls := w.calls(t)[m.Key]; len(calls) != 1 {
		t.Fatalf("%d gateway calls, want 1", len(calls))
	}
	w.checkPaid(t, "pe-1", m)
	if n := w.notices(t); len(n) != 0 {
		t.Errorf("notices after the deletion: %v", n)
	}
	var resp payouts.Response
	if rec := w.record(t, m.Key); rec.Status != persistence.StatusCompleted || json.Unmarshal(rec.Response, &resp) != nil || resp.PayoutID != "po-1" {
		t.Errorf("record %+v, want COMPLETED with the payout's response", rec)
	}
}

// TestLeaseOnly: the consumer refuses the single-transaction mode for payouts at init,
// with the example's reason.
func TestLeaseOnly(t *testing.T) {
	st := exampletest.Up(t, ex)
	vars := st.Vars(exampletest.TestEnv, map[string]string{"IDEMPOTENCY_MODE": "single-transaction"})
	_, err := consumerapp.FromEnvOf([]example.Example{ex}, exampletest.LookupIn(vars))
	var me *example.ModeError
	if !errors.As(err, &me) || !errors.Is(err, idem.ErrNotInThisMode) || !strings.Contains(err.Error(), ex.LeaseOnly()) {
		t.Fatalf("single-transaction: %v, want an *example.ModeError with %q", err, ex.LeaseOnly())
	}
}

// TestRetryPastTheKeyWindow (issue 37, hole 5): the transfer is applied, then the
// consumer dies before its step is recorded; the gateway keeps keys 24 hours, and the
// retry comes 25 hours later. Posted again, the transfer would be paid twice. With the
// gateway's lookup the retry finds the transfer and records it; without one it parks the
// message in the dead-letter queue with the reason, its record kept. Either way the
// gateway applied the transfer once.
func TestRetryPastTheKeyWindow(t *testing.T) {
	for _, lookup := range []bool{true, false} {
		t.Run(map[bool]string{true: "with the lookup", false: "without a lookup"}[lookup], func(t *testing.T) {
			w := newWorld(t)
			var now atomic.Int64 // read by the gateway's goroutines
			now.Store(time.Now().UnixNano())
			w.clock = func() time.Time { return time.Unix(0, now.Load()) }
			w.gw.SetKeyWindow(payouts.DefaultKeyWindow, w.clock)
			if !lookup {
				h, err := payouts.NewHandler(payouts.Config{
					PayeesTable: w.table, NoticesQueueURL: w.st.Must(t, payouts.NoticesVar), GatewayURL: w.gw.URL(), NoLookup: true,
				}, payouts.Clients{DynamoDB: w.st.DynamoDB, HTTP: http.DefaultClient})
				if err != nil {
					t.Fatal(err)
				}
				w.cfg.Handler = h
			}
			w.enable(t, "pe-1")
			m := payout("po-1", "pe-1", 700)
			crashing := w.consumer(t, func(d persistence.DynamoDBAPI) persistence.DynamoDBAPI {
				return &failOnce{DynamoDBAPI: d, match: isStep}
			})
			if failed := w.deliver(t, crashing, m); len(failed) != 1 {
				t.Fatalf("first delivery: failed %v, want the payout retried", failed)
			}
			now.Add(int64(payouts.DefaultKeyWindow + time.Hour))
			if failed := w.deliver(t, w.consumer(t, nil), m); len(failed) != 0 {
				t.Fatalf("the retry past the window: failed %v", failed)
			}
			if calls := w.calls(t)[m.Key]; len(calls) != 1 || calls[0].Outcome != gateway.Applied {
				t.Fatalf("the gateway got %+v for the key, want the first call alone", calls)
			}
			if lookup {
				w.checkPaid(t, "pe-1", m)
				w.checkTransfer(t, m)
				return
			}
			dlq := exampletest.DrainAll(t, w.st.SQS, w.cfg.DLQURL)
			if len(dlq) != 1 || !strings.Contains(aws.ToString(dlq[0].MessageAttributes[sqsmsg.DLQReasonAttribute].StringValue), "key window") {
				t.Fatalf("dead letters %+v, want the payout parked with the reason", dlq)
			}
			if rec := w.record(t, m.Key); rec.Status != persistence.StatusFailed || rec.Retryable {
				t.Errorf("record %+v, want it kept, FAILED for good", rec)
			}
		})
	}
}
