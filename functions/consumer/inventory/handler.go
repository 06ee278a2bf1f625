package inventory

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example/guarded"
	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// Config configures the handler. Every field is required.
type Config struct {
	// StockTable is the DynamoDB table of stock (partition key sku, S).
	StockTable string
	// ConfirmationsQueueURL is the outbound FIFO queue that gets one confirmation per
	// reservation.
	ConfirmationsQueueURL string
}

// Confirmation is the body of the message sent to the confirmations queue.
type Confirmation struct {
	OrderID        string `json:"order_id"`
	SKU            string `json:"sku"`
	Quantity       int64  `json:"quantity"`
	IdempotencyKey string `json:"idempotency_key"`
}

// Response is the handler's response, stored with the idempotency record and replayed
// to duplicates.
type Response struct {
	OrderID  string `json:"order_id"`
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// NewHandler validates cfg and returns the reservation handler. Run it under the idem
// middleware (idem.Client.Middleware) with a Config.Sender: it leaves its stock write to
// the middleware's completion transaction and its confirmation to the outbox.
//
// It applies one reservation (guarded.Handler): validate, and return the order's
// journal entry (the guard), the stock decrement and the confirmation for the
// middleware to commit together. The decrement's condition keeps the stock from going
// below zero: a reservation for more than is available fails the whole transaction,
// with explain's reason, and gets no confirmation. One group per sku keeps a sku's
// confirmations in order.
func NewHandler(cfg Config) (idem.Handler, error) {
	if cfg.StockTable == "" {
		return nil, errors.New("inventory: Config.StockTable is empty")
	}
	if err := example.CheckFIFOQueueURL(cfg.ConfirmationsQueueURL); err != nil {
		return nil, fmt.Errorf("inventory: Config.ConfirmationsQueueURL %q %w", cfg.ConfirmationsQueueURL, err)
	}
	h := &handler{cfg: cfg}
	return &guarded.Handler[Reservation]{
		Name: "inventory", Decode: Decode, Response: response, Guard: h.entry, Effect: h.reserve, Explain: explain,
		Outbound: guarded.Outbound[Reservation]{Name: "confirmation", QueueURL: cfg.ConfirmationsQueueURL, Body: confirmation, Group: sku},
	}, nil
}

func response(r Reservation) any { return Response(r) }

// confirmation is the body of a reservation's confirmation; key is its idempotency key.
func confirmation(key string, r Reservation) any {
	return Confirmation{OrderID: r.OrderID, SKU: r.SKU, Quantity: r.Quantity, IdempotencyKey: key}
}

// sku is the group of a reservation's confirmation.
func sku(r Reservation) string { return r.SKU }

// handler holds what the inventory's writes need.
type handler struct {
	cfg Config
}

// explain says why a reservation was refused, for the dead-letter queue: the stock
// write's condition (available >= quantity) failed, on the item as it was.
func explain(r Reservation, item map[string]types.AttributeValue) string {
	v, ok := item[attrAvailable].(*types.AttributeValueMemberN)
	if !ok {
		return fmt.Sprintf("insufficient stock: sku %s has no stock", r.SKU)
	}
	return fmt.Sprintf("insufficient stock: sku %s has %s available, %d requested", r.SKU, v.Value, r.Quantity)
}

// EntryPrefix starts the sku of the journal entries the handler keeps in the stock
// table, one per order; no sku may begin with it.
const EntryPrefix = "order#"

// entry is the order's journal entry, put only if absent. It makes the decrement safe
// beyond the idempotency record's retention: a reservation redelivered after its record
// expired runs again, but its transaction fails on this condition and the middleware
// completes the key without reserving twice (idem.Result.Guards). Its order id is scoped
// as the key is (idem.CallerScope): an HTTP caller's order ids are its own.
func (h *handler) entry(key string, r Reservation) types.TransactWriteItem {
	return guarded.Entry(h.cfg.StockTable, attrSKU, key, map[string]types.AttributeValue{
		attrSKU:      &types.AttributeValueMemberS{Value: EntryPrefix + idem.CallerScope(key) + r.OrderID},
		attrEntrySKU: &types.AttributeValueMemberS{Value: r.SKU},
		attrQuantity: &types.AttributeValueMemberN{Value: strconv.FormatInt(r.Quantity, 10)},
	})
}

// reserve is the stock write: available goes down by the quantity, reserved up by it,
// and the reservation is counted. It is not idempotent on its own; it is correct
// because the middleware commits it in one transaction with the completion of the key,
// which happens once. Its condition refuses a reservation the stock cannot serve, and
// one for a sku that has no stock item (available does not exist): the middleware then
// returns *idem.WriteConditionError with explain's reason and commits nothing; the
// consumer dead-letters the message, and its record is left retryable, so it is
// applied when redriven after the stock was replenished. (The payouts' credit looks alike
// but is its own rule, changed for its own reasons: not merged.)
func (h *handler) reserve(r Reservation) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:           aws.String(h.cfg.StockTable),
		Key:                 map[string]types.AttributeValue{attrSKU: &types.AttributeValueMemberS{Value: r.SKU}},
		UpdateExpression:    aws.String("SET #available = #available - :q ADD #reserved :q, #count :one"),
		ConditionExpression: aws.String("#available >= :q"),
		ExpressionAttributeNames: map[string]string{
			"#available": attrAvailable, "#reserved": attrReserved, "#count": attrCount,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":q":   &types.AttributeValueMemberN{Value: strconv.FormatInt(r.Quantity, 10)},
			":one": &types.AttributeValueMemberN{Value: "1"},
		},
	}}
}

// Attribute names of a stock item.
const (
	attrSKU       = "sku"
	attrAvailable = "available"
	attrReserved  = "reserved"
	attrCount     = "reservation_count"
	// journal entries
	attrEntrySKU = "order_sku"
	attrQuantity = "quantity" // and guarded.KeyHashAttr
)
