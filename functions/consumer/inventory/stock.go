package inventory

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
)

// ScanAPI is the part of the DynamoDB client Stocks uses; *dynamodb.Client satisfies it.
type ScanAPI = example.ScanAPI

// UpdateAPI is the part of the DynamoDB client AddStock uses; *dynamodb.Client
// satisfies it.
type UpdateAPI interface {
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// Stock is one sku's row.
type Stock struct {
	Available    int64 // units that can still be reserved
	Reserved     int64 // units reserved
	Reservations int64 // reservations applied: one per order in a correct run
}

// fields are a stock item's numeric attributes, by name (example.Table).
func (s *Stock) fields() map[string]*int64 {
	return map[string]*int64{attrAvailable: &s.Available, attrReserved: &s.Reserved, attrCount: &s.Reservations}
}

// Stocks reads every sku of the stock table, skipping the journal entries. It scans the
// whole table (strongly consistent, all pages), so it is for tests and tools, not for
// production traffic. A missing attribute reads as 0.
func Stocks(ctx context.Context, api ScanAPI, table string) (map[string]Stock, error) {
	stocks, err := example.Table(ctx, api, table, attrSKU, EntryPrefix, "sku", (*Stock).fields, nil)
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	return stocks, nil
}

// AddStock adds n units to the available stock of sku, creating its item if needed. ADD
// is additive: two calls add twice.
func AddStock(ctx context.Context, api UpdateAPI, table, sku string, n int64) error {
	if strings.HasPrefix(sku, EntryPrefix) {
		return fmt.Errorf("inventory: add stock: a sku must not begin with %q (reserved for journal entries)", EntryPrefix)
	}
	_, err := api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{attrSKU: &types.AttributeValueMemberS{Value: sku}},
		UpdateExpression:          aws.String("ADD #available :n"),
		ExpressionAttributeNames:  map[string]string{"#available": attrAvailable},
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}},
	})
	if err != nil {
		return fmt.Errorf("inventory: add stock to %s: %w", table, err)
	}
	return nil
}
