package shipments

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example/strict"
)

// Shipment is the message: parcels of an order handed to the carrier.
type Shipment struct {
	ShipmentID string `json:"shipment_id"`
	OrderID    string `json:"order_id"`
	Parcels    int64  `json:"parcels"`
}

// Limits of a valid Shipment.
const (
	MaxParcels = 1000
	MaxIDBytes = 128
)

// EntryPrefix starts the order_id of the journal entries kept in the orders table.
const EntryPrefix = "shipment#"

// Attribute names of the orders table.
const (
	attrOrder      = "order_id"
	attrPacked     = "packed"
	attrParcels    = "shipped_parcels"
	attrCount      = "shipment_count"
	attrEntryOrder = "shipment_order"
)

// ErrInvalidShipment is wrapped by every error of Decode.
var ErrInvalidShipment = example.NewInvalid("shipments: invalid shipment")

var decoder = strict.Decoder{
	Fields:  []string{"shipment_id", "order_id", "parcels"},
	Invalid: func(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidShipment, msg) },
}

// Decode parses and validates a shipment strictly (functions/consumer/example/strict).
func Decode(body []byte) (Shipment, error) {
	var s Shipment
	err := decoder.Object(body, func(name string, raw json.RawMessage) (err error) {
		switch name {
		case "shipment_id":
			s.ShipmentID, err = decoder.ID(name, raw, MaxIDBytes)
		case "order_id":
			s.OrderID, err = decoder.ID(name, raw, MaxIDBytes)
			if err == nil && strings.HasPrefix(s.OrderID, EntryPrefix) {
				err = fmt.Errorf("%w: order_id: must not begin with %q", ErrInvalidShipment, EntryPrefix)
			}
		case "parcels":
			s.Parcels, err = decoder.PositiveInt(name, raw, MaxParcels, "a number of parcels")
		}
		return err
	})
	if err != nil {
		return Shipment{}, err
	}
	return s, nil
}

// Key is the idempotency key of a shipment.
func Key(s Shipment) string { return "shipment:" + s.ShipmentID }

// Order is one order's row.
type Order struct {
	Packed    bool
	Parcels   int64
	Shipments int64
}

func (o *Order) fields() map[string]*int64 {
	return map[string]*int64{attrParcels: &o.Parcels, attrCount: &o.Shipments}
}

// PackOrder marks an order packed, creating its row if needed.
func PackOrder(ctx context.Context, db example.DynamoDB, table, order string) error {
	_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{attrOrder: &types.AttributeValueMemberS{Value: order}},
		UpdateExpression:          aws.String("SET #packed = :true"),
		ExpressionAttributeNames:  map[string]string{"#packed": attrPacked},
		ExpressionAttributeValues: map[string]types.AttributeValue{":true": &types.AttributeValueMemberBOOL{Value: true}},
	})
	if err != nil {
		return fmt.Errorf("shipments: pack order in %s: %w", table, err)
	}
	return nil
}

// Orders reads every order of the table, journal entries skipped.
func Orders(ctx context.Context, api example.ScanAPI, table string) (map[string]Order, error) {
	orders, err := example.Table(ctx, api, table, attrOrder, EntryPrefix, "order", (*Order).fields,
		func(o *Order, item map[string]types.AttributeValue) error {
			if v, ok := item[attrPacked].(*types.AttributeValueMemberBOOL); ok {
				o.Packed = v.Value
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("shipments: %w", err)
	}
	return orders, nil
}
