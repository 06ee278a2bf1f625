package ledger

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example/guarded"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// Config configures the handler. Every field is required.
type Config struct {
	// LedgerTable is the DynamoDB table of balances (partition key account_id, S).
	LedgerTable string
	// ReceiptsQueueURL is the outbound FIFO queue that gets one receipt per payment.
	ReceiptsQueueURL string
	// RecordsInLedger says that the idempotency records live in LedgerTable, in the
	// layout RecordsLayout gives: each payment's journal entry is then its idempotency
	// record (idem.Result.HomeGuard), and the commit writes two items (the entry and
	// the credit) instead of three. Optional.
	RecordsInLedger bool
}

// RecordsKeyRule is how the consumer must key payments when their records live in the
// ledger table (Config.RecordsInLedger): by the payment id alone (KEY_SOURCE=field,
// KEY_FIELD=payment_id). The journal entry is then the record of its payment, at the
// payment's key: one payment sent under two idempotency keys (an HTTP client retrying
// with a fresh Idempotency-Key, a copy through the ingress and one straight to SQS)
// meets one entry, and is credited once; with another amount it is refused as a
// payload mismatch. Keyed any other way, the entry would sit at the producer's key and
// guard nothing else.
func RecordsKeyRule() idem.KeyRule {
	return idem.KeyRule{Source: idem.KeyFromField, Field: "payment_id"}
}

// RecordsLayout is where the idempotency records live when they share the ledger table
// (Config.RecordsInLedger): partition key account_id, every record's key starting with
// EntryPrefix, so that Accounts tells them from the accounts. Create such a table with
// persistence.CreateTableFor(ctx, api, RecordsLayout(name)): it has the in-flight index the
// reaper reads.
func RecordsLayout(table string) persistence.Layout {
	return persistence.Layout{Table: table, PartitionKey: attrAccountID, KeyPrefix: EntryPrefix}
}

// JournalRecords returns the layout of the table that holds both the ledger and the
// records (RecordsLayout), and the consumer's variables that put them there: each
// payment's journal entry is then its record (RecordsKeyRule). internal/cost meters this
// design beside the records in a table of their own.
func (Example) JournalRecords(table string) (persistence.Layout, map[string]string) {
	layout, rule := RecordsLayout(table), RecordsKeyRule()
	return layout, map[string]string{
		"IDEMPOTENCY_TABLE": table, TableVar: table, "IDEMPOTENCY_PARTITION_KEY": layout.PartitionKey,
		"IDEMPOTENCY_KEY_PREFIX": EntryPrefix, "KEY_SOURCE": rule.Source.String(), "KEY_FIELD": rule.Field,
	}
}

// CheckRecordsLayout reports why the records' layout l cannot share the ledger table
// (Config.RecordsInLedger), or nil.
func CheckRecordsLayout(l persistence.Layout) error {
	want := RecordsLayout(l.Table)
	if l.PartitionKey != want.PartitionKey || l.SortKey != "" || !strings.HasPrefix(l.KeyPrefix, EntryPrefix) {
		return fmt.Errorf("ledger: records in the ledger table need partition key %s, no sort key and a key prefix starting with %s (IDEMPOTENCY_PARTITION_KEY=%s, IDEMPOTENCY_SORT_KEY=-, IDEMPOTENCY_KEY_PREFIX=%s); got partition key %q, sort key %q, prefix %q",
			want.PartitionKey, EntryPrefix, want.PartitionKey, EntryPrefix, l.PartitionKey, l.SortKey, l.KeyPrefix)
	}
	return l.Validate()
}

// Receipt is the body of the message sent to the receipts queue.
type Receipt struct {
	PaymentID      string `json:"payment_id"`
	AccountID      string `json:"account_id"`
	AmountCents    int64  `json:"amount_cents"`
	Currency       string `json:"currency"`
	IdempotencyKey string `json:"idempotency_key"`
}

// Response is the handler's response, stored with the idempotency record and replayed
// to duplicates.
type Response struct {
	PaymentID   string `json:"payment_id"`
	AccountID   string `json:"account_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// NewHandler validates cfg and returns the payment handler. Run it under the idem
// middleware (idem.Client.Middleware) with a Config.Sender: it leaves its ledger write
// to the middleware's completion transaction and its receipt to the outbox.
//
// It applies one payment (guarded.Handler): validate, and return the payment's journal
// entry (the guard), the credit and the receipt for the middleware to commit together.
// The receipt is an outbound message: stored by the same transaction as the credit and
// sent after it committed, so a payment the ledger refuses gets no receipt, and a
// payment gets one receipt however often it is delivered, even after its idempotency
// record is gone (the journal entry then stops the commit, and with it the receipt).
// One group per account keeps an account's receipts in order.
func NewHandler(cfg Config) (idem.Handler, error) {
	if cfg.LedgerTable == "" {
		return nil, errors.New("ledger: Config.LedgerTable is empty")
	}
	if err := example.CheckFIFOQueueURL(cfg.ReceiptsQueueURL); err != nil {
		return nil, fmt.Errorf("ledger: Config.ReceiptsQueueURL %q %w", cfg.ReceiptsQueueURL, err)
	}
	h := &handler{cfg: cfg}
	return &guarded.Handler[Payment]{
		Name: "ledger", Decode: Decode, Response: response, Guard: h.entry, Effect: h.credit, Explain: explain, Tell: tell,
		Outbound: guarded.Outbound[Payment]{Name: "receipt", QueueURL: cfg.ReceiptsQueueURL, Body: receipt, Group: account},
		Home:     cfg.RecordsInLedger, ID: paymentID,
	}, nil
}

func response(p Payment) any { return Response(p) }

// receipt is the body of a payment's receipt; key is its idempotency key.
func receipt(key string, p Payment) any {
	return Receipt{PaymentID: p.PaymentID, AccountID: p.AccountID, AmountCents: p.AmountCents, Currency: p.Currency, IdempotencyKey: key}
}

// paymentID is the business id a payment's journal entry stands for.
func paymentID(p Payment) string { return p.PaymentID }

// account is the group of a payment's receipt.
func account(p Payment) string { return p.AccountID }

// handler holds what the ledger's writes need.
type handler struct {
	cfg Config
}

// explain says why the ledger refused a payment, for the dead-letter queue: the credit's
// condition (one currency per account) failed, on the account as it was.
func explain(p Payment, item map[string]types.AttributeValue) string {
	if cur, ok := item[attrCurrency].(*types.AttributeValueMemberS); ok && cur.Value != p.Currency {
		return fmt.Sprintf("currency %s does not match the account's %s", p.Currency, cur.Value)
	}
	return ""
}

// tell is what of a refusal the payment's sender may read: that the currencies differ,
// not the account's (explain names it, for the operator).
func tell(p Payment, item map[string]types.AttributeValue) string {
	if explain(p, item) == "" {
		return ""
	}
	return "the payment's currency does not match the account's"
}

// EntryPrefix starts the account_id of the journal entries the handler keeps in the
// ledger table, one per payment; no account id may begin with it.
const EntryPrefix = "entry#"

// entry is the payment's journal entry, put only if absent. It makes the credit safe
// beyond the idempotency record's retention: a payment redelivered after its record
// expired runs again, but its transaction fails on this condition and the middleware
// completes the key without crediting twice (idem.Result.Guards). Its payment id is
// scoped as the key is (idem.CallerScope): an HTTP caller's payment ids are its own.
func (h *handler) entry(key string, p Payment) types.TransactWriteItem {
	return guarded.Entry(h.cfg.LedgerTable, attrAccountID, key, map[string]types.AttributeValue{
		attrAccountID:    &types.AttributeValueMemberS{Value: EntryPrefix + idem.CallerScope(key) + p.PaymentID},
		attrEntryAccount: &types.AttributeValueMemberS{Value: p.AccountID},
		attrAmount:       &types.AttributeValueMemberN{Value: strconv.FormatInt(p.AmountCents, 10)},
		attrCurrency:     &types.AttributeValueMemberS{Value: p.Currency},
	})
}

// credit is the ledger write. ADD is not idempotent on its own (applied twice, it
// credits twice); it is correct because the middleware commits it in one transaction
// with the completion of the key, which happens once. The condition keeps an account
// single-currency: the first payment sets the currency, and a payment in another
// currency fails the whole transaction (the middleware returns *idem.WriteConditionError
// with explain's reason and nothing is committed; the consumer dead-letters the payment
// with that reason, and its record is left retryable, so the payment redriven after the
// account was corrected is applied).
func (h *handler) credit(p Payment) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:           aws.String(h.cfg.LedgerTable),
		Key:                 map[string]types.AttributeValue{attrAccountID: &types.AttributeValueMemberS{Value: p.AccountID}},
		UpdateExpression:    aws.String("ADD #balance :amount, #count :one SET #last = :payment, #currency = :currency"),
		ConditionExpression: aws.String("attribute_not_exists(#currency) OR #currency = :currency"),
		ExpressionAttributeNames: map[string]string{
			"#balance": attrBalance, "#count": attrCount, "#last": attrLastPayment, "#currency": attrCurrency,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":amount":   &types.AttributeValueMemberN{Value: strconv.FormatInt(p.AmountCents, 10)},
			":one":      &types.AttributeValueMemberN{Value: "1"},
			":payment":  &types.AttributeValueMemberS{Value: p.PaymentID},
			":currency": &types.AttributeValueMemberS{Value: p.Currency},
		},
	}}
}

// Attribute names of a ledger item.
const (
	attrAccountID   = "account_id"
	attrBalance     = "balance_cents"
	attrCount       = "payment_count"
	attrLastPayment = "last_payment_id"
	attrCurrency    = "currency"
	// journal entries
	attrEntryAccount = "entry_account"
	attrAmount       = "amount_cents" // and guarded.KeyHashAttr
)
