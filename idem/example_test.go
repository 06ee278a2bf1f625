package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
)

// The examples run against memstore.MemoryStore: no AWS, same conditions as DynamoStore.

func ExampleClient_Do() {
	ctx := context.Background()
	client, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "payments"})
	if err != nil {
		fmt.Println(err)
		return
	}
	runs := 0
	charge := func(_ context.Context, req *idem.Request) (idem.Result, error) {
		runs++
		return idem.Result{Response: []byte(`{"charged":1000}`)}, nil
	}

	// The first delivery runs the handler; a duplicate gets the stored response.
	req := &idem.Request{Key: "payment-42", Payload: []byte(`{"amount":1000}`)}
	for _, delivery := range []string{"first delivery", "duplicate"} {
		res, err := client.Do(ctx, req, charge)
		fmt.Printf("%s: %s replayed=%t attempt=%d err=%v\n", delivery, res.Response, res.Replayed, res.Attempt, err)
	}
	fmt.Println("charge ran", runs, "time(s)")

	// The same key with another payload is refused, permanently.
	_, err = client.Do(ctx, &idem.Request{Key: "payment-42", Payload: []byte(`{"amount":2000}`)}, charge)
	fmt.Println("other payload: mismatch", errors.Is(err, idem.ErrPayloadMismatch), "permanent", idem.IsPermanent(err))

	// A retryable failure leaves the key to the next delivery, which runs as attempt 2.
	flaky := func(_ context.Context, req *idem.Request) (idem.Result, error) {
		if req.Attempt.Number() == 1 {
			return idem.Result{}, errors.New("gateway timeout")
		}
		return idem.Result{Response: []byte(`{"charged":5}`)}, nil
	}
	retry := &idem.Request{Key: "payment-43", Payload: []byte(`{"amount":5}`)}
	_, err = client.Do(ctx, retry, flaky)
	fmt.Println("retryable:", err, "permanent", idem.IsPermanent(err))
	res, err := client.Do(ctx, retry, flaky)
	fmt.Printf("redelivery: %s attempt=%d err=%v\n", res.Response, res.Attempt, err)

	// A permanent failure is stored: later deliveries get it without running the handler.
	declines := 0
	decline := func(context.Context, *idem.Request) (idem.Result, error) {
		declines++
		return idem.Result{}, idem.Permanent(errors.New("card declined"))
	}
	card := &idem.Request{Key: "payment-44", Payload: []byte(`{"amount":99}`)}
	_, err = client.Do(ctx, card, decline)
	fmt.Println("declined:", err)
	_, err = client.Do(ctx, card, decline)
	var stored *idem.StoredError
	if errors.As(err, &stored) {
		fmt.Printf("redelivery: stored error %q, decline ran %d time(s)\n", stored.Message, declines)
	}
	// Output:
	// first delivery: {"charged":1000} replayed=false attempt=1 err=<nil>
	// duplicate: {"charged":1000} replayed=true attempt=0 err=<nil>
	// charge ran 1 time(s)
	// other payload: mismatch true permanent true
	// retryable: gateway timeout permanent false
	// redelivery: {"charged":5} attempt=2 err=<nil>
	// declined: permanent: card declined
	// redelivery: stored error "permanent: card declined", decline ran 1 time(s)
}

func ExampleNewSQSHandler() {
	ctx := context.Background()
	client, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "payments"})
	if err != nil {
		fmt.Println(err)
		return
	}
	pay := idem.HandlerFunc(func(_ context.Context, req *idem.Request) (idem.Result, error) {
		fmt.Printf("  pay %s: %s\n", req.Key, req.Payload)
		return idem.Result{Response: []byte(`{"status":"paid"}`)}, nil
	})
	// The key is the idempotency-key attribute, else the FIFO MessageDeduplicationId,
	// else the body's KeyField; the body is the payload.
	record, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: client, Handler: pay, KeyField: "payment_id"})
	if err != nil {
		fmt.Println(err)
		return
	}
	keyAttr := map[string]events.SQSMessageAttribute{idem.KeyAttribute: {DataType: "String", StringValue: aws.String("p-2")}}
	for _, msg := range []events.SQSMessage{
		{MessageId: "m-1", Body: `{"payment_id":"p-1","amount":100}`},
		{MessageId: "m-2", Body: `{"payment_id":"p-1","amount":100}`}, // the producer sent it twice
		{MessageId: "m-3", Body: `{"amount":7}`, MessageAttributes: keyAttr},
		{MessageId: "m-4", Body: `{"payment_id":"p-1","amount":200}`}, // a key reused for another payment
		{MessageId: "m-5", Body: `{"amount":7}`},                      // no key at all
	} {
		err := record(ctx, msg)
		fmt.Printf("%s: err=%t permanent=%t mismatch=%t missing key=%t\n", msg.MessageId, err != nil,
			idem.IsPermanent(err), errors.Is(err, idem.ErrPayloadMismatch), errors.Is(err, idem.ErrMissingKey))
	}
	// Output:
	//   pay p-1: {"payment_id":"p-1","amount":100}
	// m-1: err=false permanent=false mismatch=false missing key=false
	// m-2: err=false permanent=false mismatch=false missing key=false
	//   pay p-2: {"amount":7}
	// m-3: err=false permanent=false mismatch=false missing key=false
	// m-4: err=true permanent=true mismatch=true missing key=false
	// m-5: err=true permanent=true mismatch=false missing key=true
}

// printDLQ is a DeadLetterer that prints instead of sending (sqsmsg.SQSDeadLetter sends
// to a queue).
type printDLQ struct{}

func (printDLQ) DeadLetter(_ context.Context, msg events.SQSMessage, cause error) error {
	fmt.Printf("  dead-letter %s: %v\n", msg.MessageId, cause)
	return nil
}

// fifoRecord is a record of a FIFO queue: its group, and its deduplication id as the key.
func fifoRecord(id, group, dedup, body string) events.SQSMessage {
	return events.SQSMessage{MessageId: id, Body: body,
		Attributes: map[string]string{"MessageGroupId": group, "MessageDeduplicationId": dedup}}
}

func ExampleBatchProcessor() {
	ctx := context.Background()
	client, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "orders"})
	if err != nil {
		fmt.Println(err)
		return
	}
	bankUp := false
	order := idem.HandlerFunc(func(_ context.Context, req *idem.Request) (idem.Result, error) {
		var o struct {
			Amount int `json:"amount"`
		}
		if err := json.Unmarshal(req.Payload, &o); err != nil {
			return idem.Result{}, idem.Permanent(err)
		}
		switch {
		case o.Amount <= 0:
			return idem.Result{}, idem.Permanent(fmt.Errorf("amount %d is not positive", o.Amount))
		case o.Amount > 500 && !bankUp:
			fmt.Println("  bank down for", req.Key)
			return idem.Result{}, errors.New("bank unavailable") // retryable
		}
		fmt.Println("  apply", req.Key)
		return idem.Result{Response: []byte(`{"ok":true}`)}, nil
	})
	record, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: client, Handler: order})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Concurrency 1 runs one group after the other, so the lines print in event order;
	// by default ten groups run at once, each in its own order.
	batch, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: record, DeadLetter: printDLQ{}, Concurrency: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	failed := func(resp events.SQSEventResponse) []string {
		ids := []string{}
		for _, f := range resp.BatchItemFailures {
			ids = append(ids, f.ItemIdentifier)
		}
		return ids
	}

	fmt.Println("invocation 1:")
	resp, err := batch.Process(ctx, events.SQSEvent{Records: []events.SQSMessage{
		fifoRecord("a-1", "alice", "o-1", `{"amount":10}`),
		fifoRecord("a-2", "alice", "o-2", `{"amount":900}`), // fails: alice's group stops here
		fifoRecord("a-3", "alice", "o-3", `{"amount":20}`),  // not run, redelivered after a-2
		fifoRecord("b-1", "bob", "o-4", `{"amount":0}`),     // permanent: dead-lettered, acknowledged
		fifoRecord("b-2", "bob", "o-5", `{"amount":30}`),
	}})
	fmt.Println("batch item failures:", failed(resp), "err:", err)

	bankUp = true
	fmt.Println("invocation 2:")
	resp, err = batch.Process(ctx, events.SQSEvent{Records: []events.SQSMessage{
		fifoRecord("a-2", "alice", "o-2", `{"amount":900}`),
		fifoRecord("a-3", "alice", "o-3", `{"amount":20}`),
		fifoRecord("a-9", "alice", "o-1", `{"amount":10}`), // the producer sent o-1 again: replayed
	}})
	fmt.Println("batch item failures:", failed(resp), "err:", err)
	// Output:
	// invocation 1:
	//   apply o-1
	//   bank down for o-2
	//   dead-letter b-1: permanent: amount 0 is not positive
	//   apply o-5
	// batch item failures: [a-2 a-3] err: <nil>
	// invocation 2:
	//   apply o-2
	//   apply o-3
	// batch item failures: [] err: <nil>
}

func ExampleMemoryStore() {
	ctx := context.Background()
	store := memstore.NewMemoryStore()
	client, err := idem.New(idem.Config{Store: store, Scope: "ledger"})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The handler's effect is one business write: a journal entry put only if absent, a
	// guard (Result.Guards) that keeps the effect single after the record is gone.
	post := func(_ context.Context, req *idem.Request) (idem.Result, error) {
		entry := types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String("journal"),
			Item: map[string]types.AttributeValue{
				"entry_id": &types.AttributeValueMemberS{Value: req.Key},
				"amount":   &types.AttributeValueMemberN{Value: "1000"},
			},
			ConditionExpression: aws.String("attribute_not_exists(entry_id)"),
		}}
		return idem.Result{Response: []byte(`{"posted":true}`), Writes: []types.TransactWriteItem{entry}, Guards: []int{0}}, nil
	}
	deliver := func(what, payload string) {
		res, err := client.Do(ctx, &idem.Request{Key: "entry-7", Payload: []byte(payload)}, post)
		fmt.Printf("%s: replayed=%t guarded=%t mismatch=%t, %d commit(s) with writes\n",
			what, res.Replayed, res.Guarded, errors.Is(err, idem.ErrPayloadMismatch), len(store.Committed()))
	}

	deliver("first delivery", `{"amount":1000}`)
	deliver("duplicate", `{"amount":1000}`)

	// MemoryStore does not apply business writes: it logs them, one slice per commit,
	// atomically with the completion. The guard Put carries the payload's fingerprint.
	for i, writes := range store.Committed() {
		for _, w := range writes {
			var attrs []string
			for name := range w.Put.Item {
				attrs = append(attrs, name)
			}
			slices.Sort(attrs)
			fmt.Printf("commit %d: put %s %v %s\n", i, aws.ToString(w.Put.TableName), attrs, aws.ToString(w.Put.ConditionExpression))
		}
	}

	// Past the record's TTL, DynamoDB deletes the record (Forget does it here). A very
	// late redelivery runs the handler again, and its guard finds the entry in place.
	pk, err := client.RecordKey("entry-7")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("records:", store.Len(), pk)
	store.Forget(pk)
	deliver("late redelivery", `{"amount":1000}`)
	store.Forget(pk)
	deliver("late, other payload", `{"amount":5}`)
	// Output:
	// first delivery: replayed=false guarded=false mismatch=false, 1 commit(s) with writes
	// duplicate: replayed=true guarded=false mismatch=false, 1 commit(s) with writes
	// commit 0: put journal [amount entry_id idem_payload_hash] attribute_not_exists(entry_id)
	// records: 1 ledger#entry-7
	// late redelivery: replayed=false guarded=true mismatch=false, 1 commit(s) with writes
	// late, other payload: replayed=false guarded=false mismatch=true, 1 commit(s) with writes
}
