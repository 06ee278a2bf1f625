package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// Sender is the part of the SQS client the handler uses; *sqs.Client satisfies it.
type Sender interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// Config configures the handler. Every field is required.
type Config struct {
	// LedgerTable is the DynamoDB table of balances (partition key account_id, S).
	LedgerTable string
	// ReceiptsQueueURL is the outbound FIFO queue that gets one receipt per payment.
	ReceiptsQueueURL string
	// Receipts sends the receipts.
	Receipts Sender
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
// to duplicates. ReceiptMessageID is empty when an earlier, interrupted attempt sent the
// receipt.
type Response struct {
	PaymentID        string `json:"payment_id"`
	AccountID        string `json:"account_id"`
	AmountCents      int64  `json:"amount_cents"`
	Currency         string `json:"currency"`
	ReceiptMessageID string `json:"receipt_message_id,omitempty"`
}

// receiptStep names the recovery point of the receipt in the idempotency record.
const receiptStep = "receipt"

// NewHandler validates cfg and returns the payment handler. Run it under the idem
// middleware (idem.Client.Middleware): it needs the request's Attempt for its receipt
// step, and it leaves its ledger write to the middleware's completion transaction.
func NewHandler(cfg Config) (idem.Handler, error) {
	if cfg.LedgerTable == "" {
		return nil, errors.New("ledger: Config.LedgerTable is empty")
	}
	if cfg.Receipts == nil {
		return nil, errors.New("ledger: Config.Receipts is nil")
	}
	u, err := url.Parse(cfg.ReceiptsQueueURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("ledger: Config.ReceiptsQueueURL %q is not an http(s) queue URL", cfg.ReceiptsQueueURL)
	}
	// Deduplication by MessageDeduplicationId, which the receipt relies on, exists only
	// on FIFO queues, and FIFO queue names end in ".fifo".
	if !strings.HasSuffix(u.Path, ".fifo") {
		return nil, fmt.Errorf("ledger: Config.ReceiptsQueueURL %q is not a FIFO queue (name must end in .fifo)", cfg.ReceiptsQueueURL)
	}
	return &handler{cfg: cfg}, nil
}

type handler struct {
	cfg Config
}

// Handle applies one payment: validate, send the receipt (once), and return the credit
// for the middleware to commit with the completion.
func (h *handler) Handle(ctx context.Context, req *idem.Request) (idem.Result, error) {
	if req == nil || req.Attempt == nil {
		return idem.Result{}, fmt.Errorf("ledger: handler must run under the idem middleware: %w", idem.ErrNoLease)
	}
	p, err := Decode(req.Payload)
	if err != nil {
		return idem.Result{}, idem.Permanent(err)
	}

	// The receipt is a side effect outside DynamoDB, so it cannot join the completion
	// transaction. As a step it is skipped by any later attempt once recorded; if this
	// process dies after sending but before recording, the next attempt sends it again
	// with the same MessageDeduplicationId and SQS drops the repeat (within 5 minutes).
	// Caveat of sending before committing: if the ledger write then fails for good (see
	// credit), a receipt exists for a payment that was never applied.
	var receiptID string
	err = req.Attempt.Step(ctx, receiptStep, func(ctx context.Context) error {
		id, err := h.sendReceipt(ctx, req.Key, p)
		receiptID = id
		return err
	})
	if err != nil {
		return idem.Result{}, err
	}

	resp, err := json.Marshal(Response{
		PaymentID: p.PaymentID, AccountID: p.AccountID, AmountCents: p.AmountCents,
		Currency: p.Currency, ReceiptMessageID: receiptID,
	})
	if err != nil {
		return idem.Result{}, fmt.Errorf("ledger: encode response: %w", err)
	}
	// The journal entry comes first and is the guard: if it already exists, the payment
	// was applied by an execution the idempotency record no longer remembers (a
	// redelivery after the record's TTL), and the middleware commits nothing.
	return idem.Result{Response: resp, Writes: []types.TransactWriteItem{h.entry(req.Key, p), h.credit(p)}, Guards: []int{0}}, nil
}

// EntryPrefix starts the account_id of the journal entries the handler keeps in the
// ledger table, one per payment; no account id may begin with it.
const EntryPrefix = "entry#"

// entry is the payment's journal entry, put only if absent. It makes the credit safe
// beyond the idempotency record's retention: a payment redelivered after its record
// expired runs again, but its transaction fails on this condition and the middleware
// completes the key without crediting twice (idem.Result.Guards).
func (h *handler) entry(key string, p Payment) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(h.cfg.LedgerTable),
		Item: map[string]types.AttributeValue{
			attrAccountID:    &types.AttributeValueMemberS{Value: EntryPrefix + p.PaymentID},
			attrEntryAccount: &types.AttributeValueMemberS{Value: p.AccountID},
			attrAmount:       &types.AttributeValueMemberN{Value: strconv.FormatInt(p.AmountCents, 10)},
			attrCurrency:     &types.AttributeValueMemberS{Value: p.Currency},
			attrKeyHash:      &types.AttributeValueMemberS{Value: idem.HashKey(key)},
		},
		ConditionExpression:      aws.String("attribute_not_exists(#id)"),
		ExpressionAttributeNames: map[string]string{"#id": attrAccountID},
	}}
}

func (h *handler) sendReceipt(ctx context.Context, key string, p Payment) (string, error) {
	body, err := json.Marshal(Receipt{
		PaymentID: p.PaymentID, AccountID: p.AccountID, AmountCents: p.AmountCents,
		Currency: p.Currency, IdempotencyKey: key,
	})
	if err != nil {
		return "", fmt.Errorf("ledger: encode receipt: %w", err)
	}
	out, err := h.cfg.Receipts.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:    aws.String(h.cfg.ReceiptsQueueURL),
		MessageBody: aws.String(string(body)),
		// One group per account keeps an account's receipts in order; the account ID
		// passes through DeduplicationID because group IDs have the same character rules.
		MessageGroupId:         aws.String(DeduplicationID(p.AccountID)),
		MessageDeduplicationId: aws.String(DeduplicationID(key)),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			// The attribute the consumer reads keys from: a receipts consumer built on
			// this template finds the key where it looks first.
			idem.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(key)},
		},
	})
	if err != nil {
		// Left retryable: throttling, timeouts and a missing queue are fixed by time or
		// by an operator, not by dead-lettering the payment.
		return "", fmt.Errorf("ledger: send receipt for payment %s: %w", p.PaymentID, err)
	}
	return aws.ToString(out.MessageId), nil
}

// credit is the ledger write. ADD is not idempotent on its own (applied twice, it
// credits twice); it is correct because the middleware commits it in one transaction
// with the completion of the key, which happens once. The condition keeps an account
// single-currency: the first payment sets the currency, and a payment in another
// currency fails the whole transaction (the middleware returns *idem.WriteConditionError
// and nothing is committed; the error is permanent, so the consumer dead-letters the
// payment with the reason).
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
	attrAmount       = "amount_cents"
	attrKeyHash      = "key_hash"
)

// DeduplicationID returns s as an SQS MessageDeduplicationId or MessageGroupId: s itself
// when it is 1 to 128 characters of ASCII letters, digits and punctuation (what SQS
// accepts), otherwise "sha256-" and the hex SHA-256 of s. The same input always gives
// the same ID, which is what makes a resent receipt a duplicate.
func DeduplicationID(s string) string {
	if len(s) > 0 && len(s) <= 128 && strings.IndexFunc(s, func(r rune) bool { return r < '!' || r > '~' }) < 0 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256-" + hex.EncodeToString(sum[:])
}
