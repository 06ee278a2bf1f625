package ledger

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/envconf"
)

// Variables of the ledger's template block that the handler reads.
const (
	TableVar    = "LEDGER_TABLE"
	ReceiptsVar = "RECEIPTS_QUEUE_URL"
)

//go:embed template.yaml
var block []byte

// Example is the ledger as an example.Example: what the consumer's wiring, idemctl,
// the demo and the reliability suite know of payments.
type Example struct{}

var _ example.Full = Example{} // every tool runs on it

// Name is "ledger".
func (Example) Name() string { return "ledger" }

// Decode validates a payment (Decode) and returns it as traffic: key Key(p), group
// account_id.
func (Example) Decode(body []byte) (example.Message, error) {
	p, err := Decode(body)
	if err != nil {
		return example.Message{}, err
	}
	return example.Message{ID: p.PaymentID, Key: Key(p), Group: p.AccountID, Body: string(body)}, nil
}

// NewHandler reads LEDGER_TABLE and RECEIPTS_QUEUE_URL and returns the payment handler.
// When IDEMPOTENCY_TABLE names the ledger table too, the records live there
// (Config.RecordsInLedger), in the layout the IDEMPOTENCY_* variables give, which must be
// RecordsLayout's.
func (Example) NewHandler(d example.Deps) (idem.Handler, error) {
	env := d.Env
	e := envconf.New(env)
	cfg := Config{LedgerTable: e.Required(TableVar), ReceiptsQueueURL: e.Required(ReceiptsVar)}
	if records, ok := env("IDEMPOTENCY_TABLE"); ok && records == cfg.LedgerTable && records != "" {
		layout := e.Layout()
		if err := e.Err(); err != nil {
			return nil, fmt.Errorf("ledger configuration: %w", err)
		}
		if err := CheckRecordsLayout(layout); err != nil {
			return nil, err
		}
		if rule, want := e.KeyRule(), RecordsKeyRule(); rule != want {
			return nil, fmt.Errorf("ledger: records in the ledger table need the payment id as the idempotency key (KEY_SOURCE=%s, KEY_FIELD=%s): each payment's journal entry is then its record, one per payment whatever keys it is sent under; got KEY_SOURCE=%s, KEY_FIELD=%q",
				want.Source, want.Field, rule.Source, rule.Field)
		}
		cfg.RecordsInLedger = true
	}
	if err := e.Err(); err != nil {
		return nil, fmt.Errorf("ledger configuration: %w", err)
	}
	return NewHandler(cfg)
}

// Traffic returns n payments pay-<run>-NNNNN over accounts acct-<run>-NNN, one currency
// per account (the ledger refuses a second one).
func (Example) Traffic(rng *rand.Rand, run string, n, groups int) []example.Message {
	out := make([]example.Message, n)
	for i := range out {
		a := rng.IntN(max(groups, 1))
		out[i] = message(Payment{
			PaymentID:   fmt.Sprintf("pay-%s-%05d", run, i),
			AccountID:   fmt.Sprintf("acct-%s-%03d", run, a),
			AmountCents: 1 + rng.Int64N(100_000),
			Currency:    Currencies[a%len(Currencies)],
		})
	}
	return out
}

func message(p Payment) example.Message {
	b, _ := json.Marshal(p) // strings and an int64 always marshal
	return example.Message{ID: p.PaymentID, Key: Key(p), Group: p.AccountID, Body: string(b)}
}

// Bad returns six messages the consumer must dead-letter: broken JSON, a negative
// amount, an unknown currency, no payment_id and no key attribute, a payment in another currency than its
// account's (refused by the credit's condition), and valid[0]'s key with another amount.
func (Example) Bad(run string, valid []example.Message) []example.Bad {
	g := "acct-" + run + "-bad"
	id := func(n int) string { return fmt.Sprintf("pay-%s-bad-%d", run, n) }
	bad := []example.Bad{
		{Message: example.Message{ID: id(1), Key: "payment:" + id(1), Group: g,
			Body: `{"payment_id":"` + id(1) + `","account_id":`}, Reason: "body is not valid JSON"},
		{Message: example.Message{ID: id(2), Key: "payment:" + id(2), Group: g,
			Body: `{"payment_id":"` + id(2) + `","account_id":"` + g + `","amount_cents":-500,"currency":"EUR"}`}, Reason: "amount_cents: must be positive"},
		{Message: example.Message{ID: id(3), Key: "payment:" + id(3), Group: g,
			Body: `{"payment_id":"` + id(3) + `","account_id":"` + g + `","amount_cents":500,"currency":"XXX"}`}, Reason: "currency: must be one of"},
		{Message: example.Message{ID: id(4), Group: g,
			// On a FIFO queue the deduplication id stands in for a missing key attribute;
			// the handler then refuses the body.
			Body: `{"account_id":"` + g + `","amount_cents":500,"currency":"EUR"}`}, Reason: "payment_id: missing"},
	}
	if len(valid) == 0 {
		return bad
	}
	first, err := Decode([]byte(valid[0].Body))
	if err != nil {
		return bad
	}
	// Another currency than its account's, after valid[0] set the account's currency: the
	// ledger refuses it and it gets no receipt.
	other := Payment{PaymentID: id(6), AccountID: first.AccountID, AmountCents: 500, Currency: Currencies[0]}
	if other.Currency == first.Currency {
		other.Currency = Currencies[1]
	}
	bad = append(bad, example.Bad{Message: message(other), Reason: "does not match the account's " + first.Currency,
		// The fix: the account was opened in the wrong currency; the operator corrects it.
		Fix: func(ctx context.Context, db example.DynamoDB, env example.Lookup) error {
			table, err := env.Need(TableVar)
			if err != nil {
				return fmt.Errorf("ledger: %w", err)
			}
			_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName:                 aws.String(table),
				Key:                       map[string]types.AttributeValue{attrAccountID: &types.AttributeValueMemberS{Value: other.AccountID}},
				UpdateExpression:          aws.String("SET #currency = :currency"),
				ExpressionAttributeNames:  map[string]string{"#currency": attrCurrency},
				ExpressionAttributeValues: map[string]types.AttributeValue{":currency": &types.AttributeValueMemberS{Value: other.Currency}},
			})
			if err != nil {
				return fmt.Errorf("ledger: correct the currency of %s: %w", other.AccountID, err)
			}
			return nil
		}})
	// valid[0]'s key with another amount: a producer bug.
	conflict := first
	conflict.AmountCents++
	bad = append(bad, example.Bad{Message: message(conflict), Reason: "payload does not match"})
	return bad
}

// Prepare does nothing: an account is created by its first credit.
func (Example) Prepare(context.Context, example.DynamoDB, example.Lookup, []example.Message) error {
	return nil
}

// Expect returns, per account of the applied payments, "<account> balance_cents" (the
// sum of the distinct payments) and "<account> payment_count".
func (Example) Expect(_, applied []example.Message) (example.State, error) {
	ps, err := example.DecodeAll(applied, Decode)
	if err != nil {
		return nil, fmt.Errorf("ledger: expected outcome: %w", err)
	}
	st := example.State{}
	for _, p := range example.Distinct(ps, paymentID) {
		st[p.AccountID+" "+attrBalance] += p.AmountCents
		st[p.AccountID+" "+attrCount]++
	}
	return st, nil
}

// Read scans the ledger table (Accounts): the same names as Expect, and the credits
// counted by payment_count.
func (Example) Read(ctx context.Context, db example.DynamoDB, env example.Lookup) (example.Outcome, error) {
	return example.ReadTable(ctx, db, env, TableVar, Accounts, (*Account).fields, attrCount)
}

// OutboundQueue is RECEIPTS_QUEUE_URL.
func (Example) OutboundQueue() string { return ReceiptsVar }

// Confirms returns the payment id of a receipt.
func (Example) Confirms(body string) (string, bool) {
	return example.Confirmed(body, func(r Receipt) string { return r.PaymentID })
}

// Template returns the ledger's template block (template.yaml of this package).
func (Example) Template() []byte { return block }
