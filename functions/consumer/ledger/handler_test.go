package ledger_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

const receiptsURL = "https://sqs.us-east-1.amazonaws.com/123456789012/receipts.fifo"

// fakeSender records every message of every SendMessageBatch call; the first failures
// calls fail. It stands in for SQS in these unit tests; the integration tests use moto.
type fakeSender struct {
	mu       sync.Mutex
	calls    []sqstypes.SendMessageBatchRequestEntry
	queues   []string
	failures int
}

func (f *fakeSender) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failures > 0 {
		f.failures--
		return nil, errors.New("throttled")
	}
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		f.calls = append(f.calls, e)
		f.queues = append(f.queues, aws.ToString(in.QueueUrl))
		out.Successful = append(out.Successful, sqstypes.SendMessageBatchResultEntry{Id: e.Id, MessageId: aws.String(fmt.Sprintf("msg-%d", len(f.calls)))})
	}
	return out, nil
}

func (f *fakeSender) sent() []sqstypes.SendMessageBatchRequestEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sqstypes.SendMessageBatchRequestEntry(nil), f.calls...)
}

// clock is the middleware's clock in these tests; it moves only when told.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// setup returns the ledger handler wrapped in the idem middleware on a MemoryStore.
func setup(t *testing.T, sender *fakeSender) (idem.Handler, idem.Handler, *memstore.MemoryStore) {
	h, mw, s, _ := setupClock(t, sender)
	return h, mw, s
}

func setupClock(t *testing.T, sender *fakeSender) (idem.Handler, idem.Handler, *memstore.MemoryStore, *clock) {
	t.Helper()
	h, err := ledger.NewHandler(ledger.Config{LedgerTable: "ledger", ReceiptsQueueURL: receiptsURL})
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	s := memstore.NewMemoryStore()
	clk := &clock{t: time.Now()}
	c, err := idem.New(idem.Config{Store: s, Scope: "test", Sender: sender, Clock: clk.now})
	if err != nil {
		t.Fatalf("idem.New: %v", err)
	}
	return h, c.Middleware(h), s, clk
}

// checkSent checks how many receipts sender sent and how many completions s committed.
func checkSent(t *testing.T, sender *fakeSender, s *memstore.MemoryStore, receipts, completions int) {
	t.Helper()
	if n := len(sender.sent()); n != receipts {
		t.Fatalf("%d receipts sent, want %d", n, receipts)
	}
	if n := len(s.Committed()); n != completions {
		t.Fatalf("%d completions committed, want %d", n, completions)
	}
}

func request(key, body string) *idem.Request {
	return &idem.Request{Key: key, Payload: []byte(body)}
}

const paymentBody = `{"payment_id":"p-1","account_id":"acct-1","amount_cents":1250,"currency":"EUR"}`

func TestHandler(t *testing.T) {
	ctx := context.Background()

	t.Run("first delivery sends one receipt and returns one credit", func(t *testing.T) {
		sender := &fakeSender{}
		_, mw, s := setup(t, sender)
		res, err := mw.Handle(ctx, request("key-1", paymentBody))
		if err != nil {
			t.Fatalf("Handle: %v", err)
		}
		if res.Replayed || res.Attempt != 1 {
			t.Fatalf("Replayed=%v Attempt=%d, want a first run", res.Replayed, res.Attempt)
		}
		var resp ledger.Response
		if err := json.Unmarshal(res.Response, &resp); err != nil {
			t.Fatalf("response %s: %v", res.Response, err)
		}
		want := ledger.Response{PaymentID: "p-1", AccountID: "acct-1", AmountCents: 1250, Currency: "EUR"}
		if resp != want {
			t.Fatalf("response = %+v, want %+v", resp, want)
		}

		calls := sender.sent()
		if len(calls) != 1 {
			t.Fatalf("%d receipts sent, want 1", len(calls))
		}
		checkReceipt(t, calls[0], "key-1", ledger.Payment{PaymentID: "p-1", AccountID: "acct-1", AmountCents: 1250, Currency: "EUR"})

		committed := s.Committed()
		if len(committed) != 1 || len(committed[0]) != 2 {
			t.Fatalf("committed %v, want one completion with two writes (journal entry, credit)", committed)
		}
		entry := committed[0][0].Put
		if entry == nil || aws.ToString(entry.ConditionExpression) != "attribute_not_exists(#id)" ||
			entry.Item["account_id"].(*types.AttributeValueMemberS).Value != ledger.EntryPrefix+"p-1" {
			t.Fatalf("first write %+v, want the journal entry of p-1 put if absent", committed[0][0])
		}
		checkCredit(t, committed[0][1], "acct-1", "p-1", "1250", "EUR")
	})

	t.Run("duplicate deliveries replay without a second receipt", func(t *testing.T) {
		sender := &fakeSender{}
		_, mw, s := setup(t, sender)
		first, err := mw.Handle(ctx, request("key-1", paymentBody))
		if err != nil {
			t.Fatalf("first Handle: %v", err)
		}
		// The same payload written differently is the same payload to idem.
		for i, body := range []string{paymentBody, ` {"currency":"EUR","amount_cents":1250,"account_id":"acct-1","payment_id":"p-1"}`} {
			res, err := mw.Handle(ctx, request("key-1", body))
			if err != nil {
				t.Fatalf("duplicate %d: %v", i, err)
			}
			if !res.Replayed || string(res.Response) != string(first.Response) {
				t.Fatalf("duplicate %d: Replayed=%v response %s, want the stored %s", i, res.Replayed, res.Response, first.Response)
			}
		}
		checkSent(t, sender, s, 1, 1)
	})

	t.Run("invalid payment is permanent and sends nothing", func(t *testing.T) {
		sender := &fakeSender{}
		_, mw, s := setup(t, sender)
		bad := `{"payment_id":"p-1","account_id":"acct-1","amount_cents":0,"currency":"EUR"}`
		_, err := mw.Handle(ctx, request("key-1", bad))
		if !idem.IsPermanent(err) || !errors.Is(err, ledger.ErrInvalidPayment) {
			t.Fatalf("Handle error = %v, want a permanent ErrInvalidPayment", err)
		}
		// A redelivery gets the stored failure; it is still permanent.
		_, err = mw.Handle(ctx, request("key-1", bad))
		var stored *idem.StoredError
		if !errors.As(err, &stored) || !strings.Contains(stored.Message, "amount_cents") {
			t.Fatalf("redelivery error = %v, want the stored failure naming amount_cents", err)
		}
		checkSent(t, sender, s, 0, 0)
	})

	t.Run("a failed send after the commit is sent by the redelivery, once", func(t *testing.T) {
		sender := &fakeSender{failures: 1}
		_, mw, s, clk := setupClock(t, sender)
		_, err := mw.Handle(ctx, request("key-1", paymentBody))
		if err == nil || idem.IsPermanent(err) {
			t.Fatalf("Handle error = %v, want a retryable error (the receipt is not sent yet)", err)
		}
		if n := len(s.Committed()); n != 1 {
			t.Fatalf("%d completions committed, want 1: the receipt goes out after the commit", n)
		}
		// However soon it comes (the holder may be dead), the redelivery sends it.
		clk.t = clk.t.Add(time.Second)
		res, err := mw.Handle(ctx, request("key-1", paymentBody))
		if err != nil || !res.Replayed {
			t.Fatalf("redelivery: %+v, %v; want the replay that sends the pending receipt", res, err)
		}
		if _, err := mw.Handle(ctx, request("key-1", paymentBody)); err != nil {
			t.Fatalf("third delivery: %v", err)
		}
		checkSent(t, sender, s, 1, 1)
		checkReceipt(t, sender.sent()[0], "key-1", ledger.Payment{PaymentID: "p-1", AccountID: "acct-1", AmountCents: 1250, Currency: "EUR"})
	})

	t.Run("a crash before the commit sends nothing", func(t *testing.T) {
		sender := &fakeSender{}
		h, _, s := setup(t, sender)
		c, err := idem.New(idem.Config{Store: s, Scope: "test", Sender: sender})
		if err != nil {
			t.Fatal(err)
		}
		// The first attempt dies after the handler ran, before the commit: as if the
		// Lambda timed out.
		crash := true
		mw := c.Middleware(idem.HandlerFunc(func(ctx context.Context, req *idem.Request) (idem.Result, error) {
			res, err := h.Handle(ctx, req)
			if crash {
				crash = false
				return idem.Result{}, errors.New("timed out")
			}
			return res, err
		}))
		if _, err := mw.Handle(ctx, request("key-1", paymentBody)); err == nil {
			t.Fatal("first attempt succeeded, want the simulated crash")
		}
		if n := len(sender.sent()); n != 0 {
			t.Fatalf("%d receipts sent by the crashed attempt, want 0", n)
		}
		if _, err := mw.Handle(ctx, request("key-1", paymentBody)); err != nil {
			t.Fatalf("second attempt: %v", err)
		}
		checkSent(t, sender, s, 1, 1)
	})

	t.Run("a redelivery after the record was deleted sends no second receipt", func(t *testing.T) {
		sender := &fakeSender{}
		_, mw, s, clk := setupClock(t, sender)
		if _, err := mw.Handle(ctx, request("key-1", paymentBody)); err != nil {
			t.Fatal(err)
		}
		// Past the record's TTL: a new execution, which the journal entry stops.
		clk.t = clk.t.Add(8 * 24 * time.Hour)
		res, err := mw.Handle(ctx, request("key-1", paymentBody))
		if err != nil || !res.Guarded {
			t.Fatalf("after the TTL: %+v, %v; want a guarded duplicate", res, err)
		}
		checkSent(t, sender, s, 1, 1)
		// Another amount under the same payment id is refused, not acknowledged.
		clk.t = clk.t.Add(8 * 24 * time.Hour)
		changed := strings.Replace(paymentBody, "1250", "999", 1)
		if _, err := mw.Handle(ctx, request("key-1", changed)); !errors.Is(err, idem.ErrPayloadMismatch) || !idem.IsPermanent(err) {
			t.Fatalf("changed payload after the TTL: %v, want a permanent ErrPayloadMismatch", err)
		}
		checkSent(t, sender, s, 1, 1)
	})

	t.Run("keys and accounts SQS cannot take are hashed", func(t *testing.T) {
		sender := &fakeSender{}
		_, mw, _ := setup(t, sender)
		key := "schlüssel " + strings.Repeat("k", 200)
		body := `{"payment_id":"p-2","account_id":"Konto 7","amount_cents":5,"currency":"CHF"}`
		if _, err := mw.Handle(ctx, request(key, body)); err != nil {
			t.Fatalf("Handle: %v", err)
		}
		calls := sender.sent()
		if len(calls) != 1 {
			t.Fatalf("%d receipts sent, want 1", len(calls))
		}
		checkReceipt(t, calls[0], key, ledger.Payment{PaymentID: "p-2", AccountID: "Konto 7", AmountCents: 5, Currency: "CHF"})
		if id := aws.ToString(calls[0].MessageDeduplicationId); id != sha256ID(key) {
			t.Fatalf("MessageDeduplicationId = %q, want %q", id, sha256ID(key))
		}
		if id := aws.ToString(calls[0].MessageGroupId); id != sha256ID("Konto 7") {
			t.Fatalf("MessageGroupId = %q, want %q", id, sha256ID("Konto 7"))
		}
	})

	t.Run("outside the middleware", func(t *testing.T) {
		sender := &fakeSender{}
		h, _, _ := setup(t, sender)
		_, err := h.Handle(ctx, request("key-1", paymentBody))
		if !errors.Is(err, idem.ErrNoLease) {
			t.Fatalf("Handle error = %v, want ErrNoLease", err)
		}
		if n := len(sender.sent()); n != 0 {
			t.Fatalf("%d receipts sent, want 0", n)
		}
	})
}

// checkReceipt checks the SendMessageBatch entry of the receipt of p sent under key.
func checkReceipt(t *testing.T, in sqstypes.SendMessageBatchRequestEntry, key string, p ledger.Payment) {
	t.Helper()
	if got, want := aws.ToString(in.MessageDeduplicationId), idem.DeduplicationID(key); got != want {
		t.Errorf("MessageDeduplicationId = %q, want %q", got, want)
	}
	if got, want := aws.ToString(in.MessageGroupId), idem.DeduplicationID(p.AccountID); got != want {
		t.Errorf("MessageGroupId = %q, want %q", got, want)
	}
	pk, err := idem.RecordKey("test", key, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := aws.ToString(in.MessageAttributes["idempotency-key"].StringValue), outbox.OutboundKey(pk, 0); got != want {
		t.Errorf("idempotency-key attribute = %q, want the receipt's own key %q", got, want)
	}
	var r ledger.Receipt
	if err := json.Unmarshal([]byte(aws.ToString(in.MessageBody)), &r); err != nil {
		t.Fatalf("receipt body: %v", err)
	}
	want := ledger.Receipt{PaymentID: p.PaymentID, AccountID: p.AccountID, AmountCents: p.AmountCents, Currency: p.Currency, IdempotencyKey: key}
	if r != want {
		t.Errorf("receipt = %+v, want %+v", r, want)
	}
}

// checkCredit checks the ledger write of a payment.
func checkCredit(t *testing.T, w types.TransactWriteItem, account, payment, amount, currency string) {
	t.Helper()
	u := w.Update
	if u == nil || w.Put != nil || w.Delete != nil || w.ConditionCheck != nil {
		t.Fatalf("write %+v, want a single Update", w)
	}
	if got := aws.ToString(u.TableName); got != "ledger" {
		t.Errorf("TableName = %q, want ledger", got)
	}
	if k, ok := u.Key["account_id"].(*types.AttributeValueMemberS); !ok || len(u.Key) != 1 || k.Value != account {
		t.Errorf("Key = %#v, want account_id %q", u.Key, account)
	}
	if got, want := aws.ToString(u.UpdateExpression), "ADD #balance :amount, #count :one SET #last = :payment, #currency = :currency"; got != want {
		t.Errorf("UpdateExpression = %q, want %q", got, want)
	}
	if got, want := aws.ToString(u.ConditionExpression), "attribute_not_exists(#currency) OR #currency = :currency"; got != want {
		t.Errorf("ConditionExpression = %q, want %q", got, want)
	}
	wantNames := map[string]string{"#balance": "balance_cents", "#count": "payment_count", "#last": "last_payment_id", "#currency": "currency"}
	if fmt.Sprint(u.ExpressionAttributeNames) != fmt.Sprint(wantNames) {
		t.Errorf("ExpressionAttributeNames = %v, want %v", u.ExpressionAttributeNames, wantNames)
	}
	want := map[string]types.AttributeValue{
		":amount":   &types.AttributeValueMemberN{Value: amount},
		":one":      &types.AttributeValueMemberN{Value: "1"},
		":payment":  &types.AttributeValueMemberS{Value: payment},
		":currency": &types.AttributeValueMemberS{Value: currency},
	}
	if len(u.ExpressionAttributeValues) != len(want) {
		t.Errorf("ExpressionAttributeValues = %#v, want %d values", u.ExpressionAttributeValues, len(want))
	}
	for k, v := range want {
		if fmt.Sprintf("%#v", u.ExpressionAttributeValues[k]) != fmt.Sprintf("%#v", v) {
			t.Errorf("value %s = %#v, want %#v", k, u.ExpressionAttributeValues[k], v)
		}
	}
}

func sha256ID(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256-" + hex.EncodeToString(sum[:])
}

func TestNewHandler(t *testing.T) {
	exampletest.CheckConfigs(t, ledger.NewHandler, []exampletest.ConfigCase[ledger.Config]{
		{Name: "valid", Config: ledger.Config{LedgerTable: "ledger", ReceiptsQueueURL: receiptsURL}},
		{Name: "local endpoint", Config: ledger.Config{LedgerTable: "ledger", ReceiptsQueueURL: "http://127.0.0.1:4566/000000000000/r.fifo"}},
		{Name: "no table", Config: ledger.Config{ReceiptsQueueURL: receiptsURL}, WantErr: "LedgerTable"},
		{Name: "no queue", Config: ledger.Config{LedgerTable: "ledger"}, WantErr: "ReceiptsQueueURL"},
		{Name: "queue name instead of URL", Config: ledger.Config{LedgerTable: "ledger", ReceiptsQueueURL: "receipts.fifo"}, WantErr: "ReceiptsQueueURL"},
		{Name: "standard queue", Config: ledger.Config{LedgerTable: "ledger", ReceiptsQueueURL: strings.TrimSuffix(receiptsURL, ".fifo")}, WantErr: "not a FIFO queue"},
	})
}

// TestExampleRecordsInLedger: IDEMPOTENCY_TABLE naming the ledger table puts the records
// there, and then the handler's results fold the record into the journal entry; a
// layout that cannot share the table is refused with what to set.
func TestExampleRecordsInLedger(t *testing.T) {
	base := map[string]string{ledger.TableVar: "ledger", ledger.ReceiptsVar: receiptsURL}
	home := func(t *testing.T, vars map[string]string) bool {
		t.Helper()
		h, err := ledger.Example{}.NewHandler(example.Deps{Env: exampletest.LookupIn(vars)})
		if err != nil {
			t.Fatal(err)
		}
		res, err := h.Handle(context.Background(), &idem.Request{Key: "p-1", Payload: []byte(`{"payment_id":"p-1","account_id":"a","amount_cents":5,"currency":"EUR"}`), Attempt: &idem.Attempt{}})
		if err != nil {
			t.Fatal(err)
		}
		return res.HomeGuard
	}
	apart := maps.Clone(base)
	apart["IDEMPOTENCY_TABLE"] = "idempotency"
	if home(t, apart) || home(t, base) {
		t.Error("records in a table of their own, and the journal entry is their home")
	}
	in := maps.Clone(base)
	maps.Copy(in, map[string]string{"IDEMPOTENCY_TABLE": "ledger", "IDEMPOTENCY_PARTITION_KEY": "account_id", "IDEMPOTENCY_KEY_PREFIX": ledger.EntryPrefix,
		"KEY_SOURCE": "field", "KEY_FIELD": "payment_id"})
	if !home(t, in) {
		t.Error("records in the ledger table, and the journal entry is not their home")
	}
	// Keyed by anything but the payment id, one payment would get one entry per key.
	for name, change := range map[string]map[string]string{
		"the producer's key":  {"KEY_SOURCE": ""},
		"the message's key":   {"KEY_SOURCE": "message"},
		"another field":       {"KEY_FIELD": "account_id"},
		"no field to read it": {"KEY_FIELD": ""},
	} {
		vars := maps.Clone(in)
		maps.Copy(vars, change)
		if _, err := (ledger.Example{}).NewHandler(example.Deps{Env: exampletest.LookupIn(vars)}); err == nil || !strings.Contains(err.Error(), "KEY_SOURCE=field, KEY_FIELD=payment_id") {
			t.Errorf("%s: %v, want an error saying what to set", name, err)
		}
	}
	for name, change := range map[string]map[string]string{
		"the default partition key": {"IDEMPOTENCY_PARTITION_KEY": ""},
		"a sort key":                {"IDEMPOTENCY_SORT_KEY": "sk"},
		"no prefix":                 {"IDEMPOTENCY_KEY_PREFIX": ""},
		"another prefix":            {"IDEMPOTENCY_KEY_PREFIX": "idem#"},
	} {
		vars := maps.Clone(in)
		maps.Copy(vars, change)
		if _, err := (ledger.Example{}).NewHandler(example.Deps{Env: exampletest.LookupIn(vars)}); err == nil || !strings.Contains(err.Error(), "IDEMPOTENCY_KEY_PREFIX="+ledger.EntryPrefix) {
			t.Errorf("%s: %v, want an error saying what to set", name, err)
		}
	}
}

// TestDecodeTruncatedBody: a body cut off anywhere, inside a value included, is
// reported as not valid JSON, without naming the field where the cut happened.
func TestDecodeTruncatedBody(t *testing.T) {
	exampletest.CheckTruncated(t, ledger.Decode, ledger.ErrInvalidPayment,
		`{"payment_id":"pay-1","account_id":"acct-1","amount_cents":1250,"currency":"EUR"}`)
}

func TestDecode(t *testing.T) {
	long := strings.Repeat("x", ledger.MaxIDBytes)
	tests := []exampletest.DecodeCase[ledger.Payment]{
		{Name: "valid", Body: `{"payment_id":"p-1","account_id":"acct-1","amount_cents":1250,"currency":"EUR"}`,
			Want: ledger.Payment{PaymentID: "p-1", AccountID: "acct-1", AmountCents: 1250, Currency: "EUR"}},
		{Name: "any field order and white space", Body: " {\n \"currency\" : \"JPY\", \"amount_cents\":7,\t\"account_id\":\"a\",\"payment_id\":\"p\"}\n",
			Want: ledger.Payment{PaymentID: "p", AccountID: "a", AmountCents: 7, Currency: "JPY"}},
		{Name: "largest amount", Body: `{"payment_id":"p","account_id":"a","amount_cents":1000000000000,"currency":"CHF"}`,
			Want: ledger.Payment{PaymentID: "p", AccountID: "a", AmountCents: 1_000_000_000_000, Currency: "CHF"}},
		{Name: "printable unicode and escapes in ids", Body: `{"payment_id":"zahlung-\u00fc-€","account_id":"Konto 7","amount_cents":1,"currency":"GBP"}`,
			Want: ledger.Payment{PaymentID: "zahlung-ü-€", AccountID: "Konto 7", AmountCents: 1, Currency: "GBP"}},
		{Name: "id of the maximum length", Body: `{"payment_id":"` + long + `","account_id":"a","amount_cents":1,"currency":"USD"}`,
			Want: ledger.Payment{PaymentID: long, AccountID: "a", AmountCents: 1, Currency: "USD"}},

		{Name: "not UTF-8", Body: "{\"payment_id\":\"p\xff\",\"account_id\":\"a\",\"amount_cents\":1,\"currency\":\"EUR\"}", WantErr: "UTF-8"},
		{Name: "empty body", Body: ``, WantErr: "body is not a JSON object"},
		{Name: "array", Body: `[{"payment_id":"p"}]`, WantErr: "body is not a JSON object"},
		{Name: "null", Body: `null`, WantErr: "body is not a JSON object"},
		{Name: "broken JSON", Body: `{"payment_id":"p",}`, WantErr: "body is not valid JSON"},
		{Name: "unterminated object", Body: `{"payment_id":"p"`, WantErr: "body is not valid JSON"},
		{Name: "second object after", Body: `{"payment_id":"p","account_id":"a","amount_cents":1,"currency":"EUR"}{}`, WantErr: "data after the JSON object"},
		{Name: "garbage after", Body: `{"payment_id":"p","account_id":"a","amount_cents":1,"currency":"EUR"} x`, WantErr: "data after the JSON object"},
		{Name: "unknown field", Body: `{"payment_id":"p","account_id":"a","amount":1,"currency":"EUR"}`, WantErr: `"amount": unknown field`},
		{Name: "duplicate field", Body: `{"payment_id":"p","account_id":"a","amount_cents":1,"amount_cents":2,"currency":"EUR"}`, WantErr: "amount_cents: duplicate field"},
		{Name: "payment_id missing", Body: `{"account_id":"a","amount_cents":1,"currency":"EUR"}`, WantErr: "payment_id: missing"},
		{Name: "payment_id empty", Body: `{"payment_id":"","account_id":"a","amount_cents":1,"currency":"EUR"}`, WantErr: "payment_id: must not be empty"},
		{Name: "payment_id number", Body: `{"payment_id":42,"account_id":"a","amount_cents":1,"currency":"EUR"}`, WantErr: "payment_id: must be a string"},
		{Name: "payment_id null", Body: `{"payment_id":null,"account_id":"a","amount_cents":1,"currency":"EUR"}`, WantErr: "payment_id: must be a string"},
		{Name: "payment_id too long", Body: `{"payment_id":"` + long + `y","account_id":"a","amount_cents":1,"currency":"EUR"}`, WantErr: "payment_id: longer than 128 bytes"},
		{Name: "payment_id control character", Body: `{"payment_id":"p\u0007","account_id":"a","amount_cents":1,"currency":"EUR"}`, WantErr: "payment_id: must be printable"},
		{Name: "payment_id lone surrogate", Body: `{"payment_id":"p\ud800","account_id":"a","amount_cents":1,"currency":"EUR"}`, WantErr: "payment_id: must be printable"},
		{Name: "account_id leading space", Body: `{"payment_id":"p","account_id":" a","amount_cents":1,"currency":"EUR"}`, WantErr: "account_id: must be printable"},
		{Name: "account_id missing", Body: `{"payment_id":"p","amount_cents":1,"currency":"EUR"}`, WantErr: "account_id: missing"},
		{Name: "amount fraction", Body: `{"payment_id":"p","account_id":"a","amount_cents":12.5,"currency":"EUR"}`, WantErr: "amount_cents: must be an integer"},
		{Name: "amount whole float", Body: `{"payment_id":"p","account_id":"a","amount_cents":12.0,"currency":"EUR"}`, WantErr: "amount_cents: must be an integer"},
		{Name: "amount exponent", Body: `{"payment_id":"p","account_id":"a","amount_cents":1e3,"currency":"EUR"}`, WantErr: "amount_cents: must be an integer"},
		{Name: "amount string", Body: `{"payment_id":"p","account_id":"a","amount_cents":"12","currency":"EUR"}`, WantErr: "amount_cents: must be a JSON integer"},
		{Name: "amount bool", Body: `{"payment_id":"p","account_id":"a","amount_cents":true,"currency":"EUR"}`, WantErr: "amount_cents: must be a JSON integer"},
		{Name: "amount negative", Body: `{"payment_id":"p","account_id":"a","amount_cents":-5,"currency":"EUR"}`, WantErr: "amount_cents: must be positive"},
		{Name: "amount negative zero", Body: `{"payment_id":"p","account_id":"a","amount_cents":-0,"currency":"EUR"}`, WantErr: "amount_cents: must be positive"},
		{Name: "amount zero", Body: `{"payment_id":"p","account_id":"a","amount_cents":0,"currency":"EUR"}`, WantErr: "amount_cents: must be positive"},
		{Name: "amount over the limit", Body: `{"payment_id":"p","account_id":"a","amount_cents":1000000000001,"currency":"EUR"}`, WantErr: "amount_cents: too large"},
		{Name: "amount over int64", Body: `{"payment_id":"p","account_id":"a","amount_cents":99999999999999999999,"currency":"EUR"}`, WantErr: "amount_cents: too large"},
		{Name: "amount missing", Body: `{"payment_id":"p","account_id":"a","currency":"EUR"}`, WantErr: "amount_cents: missing"},
		{Name: "currency lower case", Body: `{"payment_id":"p","account_id":"a","amount_cents":1,"currency":"eur"}`, WantErr: "currency: must be one of EUR, USD, GBP, JPY, CHF"},
		{Name: "currency unknown", Body: `{"payment_id":"p","account_id":"a","amount_cents":1,"currency":"XYZ"}`, WantErr: "currency: must be one of"},
		{Name: "currency number", Body: `{"payment_id":"p","account_id":"a","amount_cents":1,"currency":978}`, WantErr: "currency: must be a string"},
		{Name: "currency missing", Body: `{"payment_id":"p","account_id":"a","amount_cents":1}`, WantErr: "currency: missing"},
	}
	exampletest.CheckDecode(t, ledger.Decode, ledger.ErrInvalidPayment, tests)
}

func item(account, balance string) map[string]types.AttributeValue {
	it := map[string]types.AttributeValue{"account_id": &types.AttributeValueMemberS{Value: account}}
	if balance != "" {
		it["balance_cents"] = &types.AttributeValueMemberN{Value: balance}
	}
	return it
}

func TestAccounts(t *testing.T) {
	tests := []struct {
		name    string
		pages   [][]map[string]types.AttributeValue
		want    map[string]int64
		wantErr string
	}{
		{name: "empty table", pages: [][]map[string]types.AttributeValue{nil}, want: map[string]int64{}},
		{name: "all pages", pages: [][]map[string]types.AttributeValue{
			{item("a", "100"), item("b", "7")},
			{item("c", "-3")},
			{item("d", "1000000000000")},
		}, want: map[string]int64{"a": 100, "b": 7, "c": -3, "d": 1_000_000_000_000}},
		{name: "item without balance", pages: [][]map[string]types.AttributeValue{{item("a", "")}}, wantErr: "account a: no numeric balance_cents"},
		{name: "balance not an integer", pages: [][]map[string]types.AttributeValue{{item("a", "1.5")}}, wantErr: "account a: balance_cents"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := &exampletest.Pages{Key: "account_id", Pages: tt.pages}
			accts, err := ledger.Accounts(context.Background(), api, "ledger")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Accounts error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Accounts: %v", err)
			}
			if got := balancesOf(accts); !maps.Equal(got, tt.want) {
				t.Fatalf("balances = %v, want %v", got, tt.want)
			}
			if api.Calls != len(tt.pages) {
				t.Fatalf("%d Scan calls, want %d", api.Calls, len(tt.pages))
			}
		})
	}
}

// balances reads every account's balance (ledger.Accounts), by account id.
func balances(t *testing.T, api ledger.ScanAPI, table string) map[string]int64 {
	t.Helper()
	accts, err := ledger.Accounts(context.Background(), api, table)
	if err != nil {
		t.Fatal(err)
	}
	return balancesOf(accts)
}

func balancesOf(accts map[string]ledger.Account) map[string]int64 {
	b := make(map[string]int64, len(accts))
	for id, a := range accts {
		b[id] = a.BalanceCents
	}
	return b
}

// expectedBalances is what a correct run ends with: per account, the sum of the
// distinct payments (of several with one payment id, the first).
func expectedBalances(payments []ledger.Payment) map[string]int64 {
	seen := make(map[string]bool, len(payments))
	b := make(map[string]int64)
	for _, p := range payments {
		if !seen[p.PaymentID] {
			seen[p.PaymentID] = true
			b[p.AccountID] += p.AmountCents
		}
	}
	return b
}

// consumer is the whole consumer (consumerapp) running the ledger, on the template's
// resources with the ledger's block, created on the local endpoint.
type consumer struct {
	st       *exampletest.Stack
	cfg      consumerapp.Config
	ddb      *dynamodb.Client
	sqs      *sqs.Client
	table    string // LEDGER_TABLE
	receipts string // RECEIPTS_QUEUE_URL
	logs     bytes.Buffer
	emf      bytes.Buffer
}

func newConsumer(t *testing.T) *consumer {
	t.Helper()
	st := exampletest.Up(t, ledger.Example{})
	c := &consumer{st: st, ddb: st.DynamoDB, sqs: st.SQS, table: st.Must(t, ledger.TableVar), receipts: st.Must(t, ledger.ReceiptsVar)}
	c.cfg = c.configWith(t, nil)
	if c.cfg.Example.Name() != (ledger.Example{}).Name() {
		t.Fatalf("the consumer runs example %s, want the ledger", c.cfg.Example.Name())
	}
	return c
}

// configWith is the consumer's configuration read from the stack's variables with vars
// changed, as the function reads it.
func (c *consumer) configWith(t *testing.T, vars map[string]string) consumerapp.Config {
	t.Helper()
	// The ledger, wired or not: these are its own tests.
	return c.st.Config(t, vars)
}

// handler builds the consumer exactly as main.go does.
func (c *consumer) handler(t *testing.T) lambda.Handler {
	t.Helper()
	h, err := consumerapp.New(c.cfg, consumerapp.Deps{DynamoDB: c.ddb, SQS: c.sqs, Logs: &c.logs, Metrics: &c.emf, Owner: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	return lambda.NewHandler(h)
}

func (c *consumer) balances(t *testing.T) map[string]int64 {
	t.Helper()
	return balances(t, c.ddb, c.table)
}
