package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// stack is the ledger handler on real AWS APIs (moto): its own ledger table,
// idempotency table and receipts queue.
type stack struct {
	exampletest.Middleware // the ledger handler under the idem middleware
	table                  string
	queueURL               string
	skew                   atomic.Int64 // nanoseconds added to the middleware's clock
	// rule is how the consumer keys a message in this layout (ledger.RecordsKeyRule with
	// the records in the ledger), and record the consumer's handler of one SQS message
	// under it: what a deployed consumer runs per record.
	rule   idem.KeyRule
	record sqsbatch.RecordFunc
}

func newStack(t *testing.T) (context.Context, *stack) { return newStackIn(t, false) }

// layouts runs f with the records in a table of their own, then in the ledger table
// (Config.RecordsInLedger: each journal entry is its payment's record).
func layouts(t *testing.T, f func(t *testing.T, inLedger bool)) {
	for _, inLedger := range []bool{false, true} {
		t.Run(map[bool]string{false: "records apart", true: "records in the ledger"}[inLedger], func(t *testing.T) { f(t, inLedger) })
	}
}

// newStackIn builds the stack with the records in the ledger table (inLedger) or in an
// idempotency table of their own, and a context that ends after 30s or with the test.
func newStackIn(t *testing.T, inLedger bool) (context.Context, *stack) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	st := &stack{Middleware: exampletest.Middleware{DynamoDB: awstest.DynamoDB(t), SQS: awstest.SQS(t)}}
	layout := persistence.Layout{Table: awstest.Name(t, "idem")}
	if inLedger {
		layout = ledger.RecordsLayout(awstest.Name(t, "ledger"))
		st.table = layout.Table
		awstest.DeleteTableAtEnd(t, st.DynamoDB, st.table)
	} else {
		st.table = awstest.HashTable(ctx, t, st.DynamoDB, "ledger", "account_id")
		awstest.DeleteTableAtEnd(t, st.DynamoDB, layout.Table)
	}
	if err := persistence.CreateTableFor(ctx, st.DynamoDB, layout); err != nil {
		t.Fatal(err)
	}
	st.queueURL = awstest.FIFOQueue(ctx, t, st.SQS, "receipts", nil)

	store, err := persistence.NewDynamoStoreLayout(st.DynamoDB, layout)
	if err != nil {
		t.Fatal(err)
	}
	st.Store = store
	client, err := idem.New(idem.Config{Store: store, Scope: "test", TTL: time.Hour, Sender: st.SQS,
		Clock: func() time.Time { return time.Now().Add(time.Duration(st.skew.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	st.Client = client
	h, err := ledger.NewHandler(ledger.Config{LedgerTable: st.table, ReceiptsQueueURL: st.queueURL, RecordsInLedger: inLedger})
	if err != nil {
		t.Fatal(err)
	}
	st.Handler = client.Middleware(h)
	st.rule = idem.KeyRule{Field: "payment_id"}
	if inLedger {
		st.rule = ledger.RecordsKeyRule()
	}
	if st.record, err = sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: client, Handler: h, KeyField: st.rule.Field, KeySource: st.rule.Source}); err != nil {
		t.Fatal(err)
	}
	return ctx, st
}

// send plays one SQS delivery of p with the idempotency-key attribute key, through the
// consumer's handler of a record, and returns its outcome.
func (st *stack) send(ctx context.Context, t *testing.T, key string, p ledger.Payment) error {
	t.Helper()
	msg := exampletest.FIFORecord("m-"+key, p.AccountID, exampletest.JSON(t, p), map[string]events.SQSMessageAttribute{
		idem.KeyAttribute: {DataType: "String", StringValue: aws.String(key)},
	})
	msg.Attributes["MessageDeduplicationId"] = "d-" + key
	return exampletest.Redeliver(ctx, nil, func() error { return st.record(ctx, msg) })
}

// deliver plays SQS for p under key (exampletest.Middleware.Deliver).
func (st *stack) deliver(ctx context.Context, key string, p ledger.Payment) (idem.Result, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return idem.Result{}, err
	}
	return st.Deliver(ctx, key, string(body))
}

// checkAccounts checks that the ledger's accounts are want, and no other.
func (st *stack) checkAccounts(ctx context.Context, t *testing.T, want map[string]ledger.Account) {
	t.Helper()
	got, err := ledger.Accounts(ctx, st.DynamoDB, st.table)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("accounts %+v, want %+v", got, want)
	}
}

// receipts receives and deletes every message of the receipts queue (awstest.Drain)
// and returns the receipts.
func (st *stack) receipts(ctx context.Context, t *testing.T) []ledger.Receipt {
	t.Helper()
	msgs, err := awstest.Drain(ctx, st.SQS, st.queueURL)
	if err != nil {
		t.Fatalf("receipts: %v", err)
	}
	var all []ledger.Receipt
	for _, m := range msgs {
		var r ledger.Receipt
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &r); err != nil {
			t.Fatalf("receipt body %q: %v", aws.ToString(m.Body), err)
		}
		// The receipt's own key: the payment's record key and its position (one receipt).
		pk, err := st.Client.RecordKey(r.IdempotencyKey)
		if err != nil {
			t.Fatal(err)
		}
		if got := aws.ToString(m.MessageAttributes["idempotency-key"].StringValue); got != outbox.OutboundKey(pk, 0) {
			t.Errorf("receipt %s: idempotency-key attribute %q, want %q (the payment's key is %q)", r.PaymentID, got, outbox.OutboundKey(pk, 0), r.IdempotencyKey)
		}
		all = append(all, r)
	}
	return all
}

func TestIntegrationExactlyOnce(t *testing.T) { layouts(t, exactlyOnce) }

func exactlyOnce(t *testing.T, inLedger bool) {
	ctx, st := newStackIn(t, inLedger)

	// 20 payments over 3 single-currency accounts. One account ID and one payment ID are
	// outside SQS's ID alphabet, so the hashed group and deduplication IDs meet real SQS.
	accounts := []struct{ id, currency string }{{"acct-A", "EUR"}, {"acct-B", "USD"}, {"Konto C/ü", "JPY"}}
	var payments []ledger.Payment
	for i := range 20 {
		a := accounts[i%len(accounts)]
		id := fmt.Sprintf("pay-%02d", i)
		if i == 7 {
			id = "zahlung nr. 7 ü"
		}
		payments = append(payments, ledger.Payment{PaymentID: id, AccountID: a.id, AmountCents: int64(100 + 37*i), Currency: a.currency})
	}

	// Each payment is delivered three times, under its payment ID as the key: twice
	// concurrently (all 40 at once), then once more after everything settled.
	type outcome struct {
		res idem.Result
		err error
	}
	results := make([][]outcome, len(payments))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, p := range payments {
		for range 2 {
			wg.Go(func() {
				res, err := st.deliver(ctx, p.PaymentID, p)
				mu.Lock()
				results[i] = append(results[i], outcome{res, err})
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	for i, p := range payments {
		res, err := st.deliver(ctx, p.PaymentID, p)
		if err == nil && !res.Replayed {
			t.Errorf("payment %s: third delivery ran the handler again", p.PaymentID)
		}
		results[i] = append(results[i], outcome{res, err})
	}

	for i, p := range payments {
		ran := 0
		for _, o := range results[i] {
			if o.err != nil {
				t.Fatalf("payment %s: delivery failed: %v", p.PaymentID, o.err)
			}
			if !o.res.Replayed {
				ran++
			}
			if string(o.res.Response) != string(results[i][0].res.Response) {
				t.Errorf("payment %s: responses differ: %s vs %s", p.PaymentID, o.res.Response, results[i][0].res.Response)
			}
		}
		if ran != 1 {
			t.Errorf("payment %s: handler completed %d times, want 1", p.PaymentID, ran)
		}
	}

	t.Logf("%d deliveries were retried (key in progress elsewhere)", st.Retried.Load())

	if got, want := balances(t, st.DynamoDB, st.table), expectedBalances(payments); !maps.Equal(got, want) {
		t.Fatalf("balances = %v, want %v", got, want)
	}

	count := map[string]int{}
	receipts := st.receipts(ctx, t)
	for _, r := range receipts {
		count[r.PaymentID]++
	}
	if len(receipts) != len(payments) || len(count) != len(payments) {
		t.Fatalf("%d receipts for %d distinct payments, want exactly one for each of %d: %v", len(receipts), len(count), len(payments), count)
	}
	for _, p := range payments {
		if count[p.PaymentID] != 1 {
			t.Errorf("payment %s: %d receipts, want 1", p.PaymentID, count[p.PaymentID])
		}
	}
}

// TestIntegrationCurrencyMismatch: a payment the ledger refuses is dead-lettered with the
// ledger's own reason, gets no receipt, and once the account is corrected the same
// message, redriven, is applied once.
func TestIntegrationCurrencyMismatch(t *testing.T) { layouts(t, currencyMismatch) }

func currencyMismatch(t *testing.T, inLedger bool) {
	ctx, st := newStackIn(t, inLedger)

	eur := ledger.Payment{PaymentID: "p-1", AccountID: "acct-1", AmountCents: 500, Currency: "EUR"}
	if _, err := st.Handler.Handle(ctx, request("p-1", exampletest.JSON(t, eur))); err != nil {
		t.Fatalf("first payment: %v", err)
	}
	usd := ledger.Payment{PaymentID: "p-2", AccountID: "acct-1", AmountCents: 700, Currency: "USD"}
	_, err := st.Handler.Handle(ctx, request("p-2", exampletest.JSON(t, usd)))
	var wce *idem.WriteConditionError
	if !errors.As(err, &wce) || wce.Index != 1 || !idem.IsPermanent(err) {
		t.Fatalf("payment in another currency: error %v, want a permanent *idem.WriteConditionError on write 1 (the credit)", err)
	}
	if want := "currency USD does not match the account's EUR"; !strings.Contains(err.Error(), want) {
		t.Fatalf("refusal %q does not carry the ledger's reason %q", err, want)
	}

	// A payment to another account in another currency is fine.
	gbp := ledger.Payment{PaymentID: "p-3", AccountID: "acct-2", AmountCents: 9, Currency: "GBP"}
	if _, err := st.Handler.Handle(ctx, request("p-3", exampletest.JSON(t, gbp))); err != nil {
		t.Fatalf("payment to another account: %v", err)
	}
	if got := receiptIDs(st.receipts(ctx, t)); !maps.Equal(got, map[string]int{"p-1": 1, "p-3": 1}) {
		t.Fatalf("receipts %v, want one each for p-1 and p-3 and none for the refused p-2", got)
	}

	// The operator fixes the cause (acct-1 was opened in the wrong currency and is empty
	// once p-1 is refunded elsewhere; here: its currency is corrected), then redrives p-2:
	// it runs again and is applied once, with one receipt.
	_, err = st.DynamoDB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.table),
		Key:                       map[string]types.AttributeValue{"account_id": &types.AttributeValueMemberS{Value: "acct-1"}},
		UpdateExpression:          aws.String("SET currency = :usd, balance_cents = :zero"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":usd": &types.AttributeValueMemberS{Value: "USD"}, ":zero": &types.AttributeValueMemberN{Value: "0"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		res, err := st.Handler.Handle(ctx, request("p-2", exampletest.JSON(t, usd)))
		if err != nil || res.Replayed != (i == 1) {
			t.Fatalf("redrive %d after the fix: %+v, %v; want applied, then replayed", i, res, err)
		}
	}
	if got, want := balances(t, st.DynamoDB, st.table), map[string]int64{"acct-1": 700, "acct-2": 9}; !maps.Equal(got, want) {
		t.Fatalf("balances = %v, want %v", got, want)
	}
	if got := receiptIDs(st.receipts(ctx, t)); !maps.Equal(got, map[string]int{"p-2": 1}) {
		t.Fatalf("receipts after the redrive %v, want one for p-2", got)
	}
}

// TestIntegrationAfterDeletion: once DynamoDB's TTL has deleted a payment's record, a
// redelivery repeats nothing (no credit, no receipt), and the same payment id with
// another amount is refused as a payload mismatch instead of being acknowledged.
func TestIntegrationAfterDeletion(t *testing.T) {
	ctx, st := newStack(t)
	p := ledger.Payment{PaymentID: "pay-1", AccountID: "acct-del", AmountCents: 700, Currency: "EUR"}
	if res, err := st.deliver(ctx, ledger.Key(p), p); err != nil || res.Replayed || res.Guarded {
		t.Fatalf("first delivery: %+v, %v", res, err)
	}
	st.Forget(ctx, t, ledger.Key(p))
	res, err := st.deliver(ctx, ledger.Key(p), p)
	if err != nil || !res.Guarded {
		t.Fatalf("redelivery after deletion: %+v, %v; want a guarded duplicate", res, err)
	}
	st.Forget(ctx, t, ledger.Key(p))
	changed := p
	changed.AmountCents = 999
	if _, err := st.deliver(ctx, ledger.Key(p), changed); !errors.Is(err, idem.ErrPayloadMismatch) || !idem.IsPermanent(err) {
		t.Fatalf("changed payload after deletion: %v, want a permanent ErrPayloadMismatch", err)
	}
	// The record now says the key was applied for the first payload: its duplicates are
	// replayed, and the changed one is refused again.
	if res, err := st.deliver(ctx, ledger.Key(p), p); err != nil || !res.Replayed {
		t.Fatalf("original payload after the mismatch: %+v, %v; want a replay", res, err)
	}
	if _, err := st.deliver(ctx, ledger.Key(p), changed); !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Fatalf("changed payload again: %v, want ErrPayloadMismatch", err)
	}
	st.checkAccounts(ctx, t, map[string]ledger.Account{"acct-del": {BalanceCents: 700, Payments: 1}})
	rs := st.receipts(ctx, t)
	if len(rs) != 1 || rs[0].AmountCents != 700 {
		t.Fatalf("receipts %+v, want exactly one, for 700", rs)
	}
}

func receiptIDs(rs []ledger.Receipt) map[string]int {
	n := map[string]int{}
	for _, r := range rs {
		n[r.PaymentID]++
	}
	return n
}

// TestIntegrationRedeliveryAfterTheTTL: a payment redelivered after its idempotency
// record expired (and before DynamoDB deleted it) runs again by contract; its journal
// entry stops the second credit, and with it the second receipt.
func TestIntegrationRedeliveryAfterTheTTL(t *testing.T) {
	ctx, st := newStack(t)
	p := ledger.Payment{PaymentID: "pay-ttl-1", AccountID: "acct-ttl", AmountCents: 1234, Currency: "EUR"}
	if res, err := st.deliver(ctx, ledger.Key(p), p); err != nil || res.Guarded {
		t.Fatalf("first delivery: res=%+v err=%v", res, err)
	}
	st.skew.Store(int64(time.Hour + 5*time.Second))
	res, err := st.deliver(ctx, ledger.Key(p), p)
	if err != nil || res.Replayed || !res.Guarded {
		t.Fatalf("after the TTL: res=%+v err=%v; want a run stopped by the journal", res, err)
	}
	st.checkAccounts(ctx, t, map[string]ledger.Account{"acct-ttl": {BalanceCents: 1234, Payments: 1}})
	if rs := st.receipts(ctx, t); len(rs) != 1 {
		t.Fatalf("%d receipts, want 1", len(rs))
	}
	// Within the retention again, the completed record answers.
	res, err = st.deliver(ctx, ledger.Key(p), p)
	if err != nil || !res.Replayed {
		t.Fatalf("third delivery: res=%+v err=%v; want a replay", res, err)
	}
}

// TestIntegrationOnePaymentUnderTwoKeys: a payment sent under two idempotency keys (an
// HTTP client retrying with a fresh Idempotency-Key, a copy through the ingress and one
// straight to SQS) is credited once with one receipt, and the same payment id with
// another amount under a third key is dead-lettered as a payload mismatch, in both
// layouts: with the records apart, the journal entry (at the payment's key) stops the
// second key; with the records in the ledger, the consumer keys payments by their id
// (ledger.RecordsKeyRule), so both keys meet the one entry that is the record (issue 26,
// hole 1: keyed by the producer's key, the fold credited the payment twice).
func TestIntegrationOnePaymentUnderTwoKeys(t *testing.T) {
	layouts(t, func(t *testing.T, inLedger bool) {
		ctx, st := newStackIn(t, inLedger)
		p := ledger.Payment{PaymentID: "pay-2k", AccountID: "acct-2k", AmountCents: 1000, Currency: "EUR"}
		for _, key := range []string{"client-key-1", "client-key-2", ledger.Key(p)} {
			if err := st.send(ctx, t, key, p); err != nil {
				t.Fatalf("payment under key %s: %v", key, err)
			}
		}
		changed := p
		changed.AmountCents = 1
		if err := st.send(ctx, t, "client-key-3", changed); !errors.Is(err, idem.ErrPayloadMismatch) || !idem.IsPermanent(err) {
			t.Fatalf("the payment id with another amount under a third key: %v, want a permanent ErrPayloadMismatch", err)
		}
		st.checkAccounts(ctx, t, map[string]ledger.Account{"acct-2k": {BalanceCents: 1000, Payments: 1}})
		if got := receiptIDs(st.receipts(ctx, t)); !maps.Equal(got, map[string]int{"pay-2k": 1}) {
			t.Fatalf("receipts %v, want one", got)
		}
	})
}

// TestIntegrationRecordsInLedgerRefusesAnotherKey: with the records in the ledger table,
// a delivery keyed by anything but its payment id (a consumer configured without
// ledger.RecordsKeyRule) is refused before anything is written: its journal entry would
// sit at that key and guard nothing else.
func TestIntegrationRecordsInLedgerRefusesAnotherKey(t *testing.T) {
	ctx, st := newStackIn(t, true)
	p := ledger.Payment{PaymentID: "pay-k", AccountID: "acct-k", AmountCents: 5, Currency: "EUR"}
	if _, err := st.deliver(ctx, ledger.Key(p), p); !errors.Is(err, idem.ErrHomeKey) || !idem.IsPermanent(err) {
		t.Fatalf("a payment keyed %q: %v, want a permanent ErrHomeKey", ledger.Key(p), err)
	}
	st.checkAccounts(ctx, t, map[string]ledger.Account{})
}

// TestIntegrationRecordsInLedger: with the records in the ledger table, a payment's
// journal entry is its completed record (one item: the entry's attributes and the
// record's, no TTL); past the retention a redelivery is still a replay, not a second
// run, the same payment id with another amount is still refused, and a payment that
// takes over a crashed attempt is applied once with one receipt.
func TestIntegrationRecordsInLedger(t *testing.T) {
	ctx, st := newStackIn(t, true)
	p := ledger.Payment{PaymentID: "pay-f-1", AccountID: "acct-f", AmountCents: 321, Currency: "EUR"}
	if res, err := st.deliver(ctx, p.PaymentID, p); err != nil || res.Replayed || res.Guarded {
		t.Fatalf("first delivery: %+v, %v", res, err)
	}
	pk, err := st.Client.RecordKey(p.PaymentID)
	if err != nil {
		t.Fatal(err)
	}
	out, err := st.DynamoDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.table), Key: st.Store.Key(pk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	acct := out.Item["account_id"].(*types.AttributeValueMemberS).Value
	if !strings.HasPrefix(acct, ledger.EntryPrefix) || out.Item["status"] == nil || out.Item["entry_account"] == nil || out.Item["amount_cents"] == nil {
		t.Fatalf("the journal entry %v is not the record", out.Item)
	}
	if _, ok := out.Item["expires_at"]; ok {
		t.Fatalf("the journal entry expires: %v", out.Item["expires_at"])
	}
	scan, err := st.DynamoDB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(st.table), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if scan.Count != 2 {
		t.Fatalf("%d items in the ledger, want 2 (the account and the entry that is the record): %v", scan.Count, scan.Items)
	}

	st.skew.Store(int64(30 * 24 * time.Hour)) // far past the retention (1h)
	if res, err := st.deliver(ctx, p.PaymentID, p); err != nil || !res.Replayed {
		t.Fatalf("a month later: %+v, %v; want a replay", res, err)
	}
	changed := p
	changed.AmountCents = 999
	if _, err := st.deliver(ctx, p.PaymentID, changed); !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Fatalf("another amount a month later: %v, want ErrPayloadMismatch", err)
	}

	// A crashed attempt: the record in progress with an ended lease. The next delivery
	// takes it over and applies the payment once.
	q := ledger.Payment{PaymentID: "pay-f-2", AccountID: "acct-f", AmountCents: 5, Currency: "EUR"}
	qk, _ := st.Client.RecordKey(q.PaymentID)
	body := exampletest.JSON(t, q)
	hash, _ := idem.HashPayload([]byte(body))
	past := time.Now().Add(time.Duration(st.skew.Load())).Add(-time.Minute)
	if _, created, err := st.Store.Create(ctx, &persistence.Record{Key: qk, Status: persistence.StatusInProgress, LeaseToken: "crashed", LeaseUntil: past,
		Inflight: "0", ExpiresAt: past.Add(time.Hour), PayloadHash: hash, Attempt: 1, Owner: "crashed", CreatedAt: past, UpdatedAt: past}, past); err != nil || !created {
		t.Fatalf("crashed attempt: %v, %v", created, err)
	}
	if res, err := st.deliver(ctx, q.PaymentID, q); err != nil || res.Replayed || res.Attempt != 2 {
		t.Fatalf("takeover: %+v, %v; want attempt 2 applied", res, err)
	}
	st.checkAccounts(ctx, t, map[string]ledger.Account{"acct-f": {BalanceCents: 326, Payments: 2}})
	if got := receiptIDs(st.receipts(ctx, t)); !maps.Equal(got, map[string]int{"pay-f-1": 1, "pay-f-2": 1}) {
		t.Fatalf("receipts %v, want one per payment", got)
	}
}

// TestIntegrationPaymentIDsBelongToTheirCaller (issue 38, finding 3): with keys of HTTP
// callers (INGRESS_KEY_SCOPE=caller, KEY_SOURCE=message), a payment id is scoped as the
// key is. Mallory's payment under Alice's future payment id neither blocks Alice's
// payment (applied, not refused as a mismatch) nor tells Mallory anything; within one
// caller the id still guards: the same payment under another key of Alice's is a guarded
// duplicate, another payment under that id a mismatch.
func TestIntegrationPaymentIDsBelongToTheirCaller(t *testing.T) {
	ctx, st := newStack(t)
	alice := func(k string) string { return idem.CallerKey("arn:aws:iam::111122223333:role/alice", k) }
	mallory := idem.CallerKey("arn:aws:iam::111122223333:role/mallory", "m-1")
	squat := ledger.Payment{PaymentID: "pay-alice-7", AccountID: "acct-mallory", AmountCents: 1, Currency: "EUR"}
	if res, err := st.deliver(ctx, mallory, squat); err != nil || res.Guarded {
		t.Fatalf("Mallory's payment: res=%+v err=%v", res, err)
	}
	p := ledger.Payment{PaymentID: "pay-alice-7", AccountID: "acct-alice", AmountCents: 100000, Currency: "EUR"}
	if res, err := st.deliver(ctx, alice("a-1"), p); err != nil || res.Guarded || res.Replayed {
		t.Fatalf("Alice's payment after Mallory took its id: res=%+v err=%v, want it applied", res, err)
	}
	if res, err := st.deliver(ctx, alice("a-2"), p); err != nil || !res.Guarded {
		t.Errorf("Alice's payment again under another key: res=%+v err=%v, want a guarded duplicate", res, err)
	}
	other := p
	other.AmountCents = 5
	if _, err := st.deliver(ctx, alice("a-3"), other); !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Errorf("another payment of Alice's under that id: %v, want ErrPayloadMismatch", err)
	}
}
