package inventory

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ScanAPI is the part of the DynamoDB client Stocks uses; *dynamodb.Client satisfies it.
type ScanAPI interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

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

// Stocks reads every sku of the stock table, skipping the journal entries. It scans the
// whole table (strongly consistent, all pages), so it is for tests and tools, not for
// production traffic. A missing attribute reads as 0.
func Stocks(ctx context.Context, api ScanAPI, table string) (map[string]Stock, error) {
	pages := dynamodb.NewScanPaginator(api, &dynamodb.ScanInput{
		TableName:            aws.String(table),
		ConsistentRead:       aws.Bool(true),
		ProjectionExpression: aws.String("#sku, #available, #reserved, #count"),
		ExpressionAttributeNames: map[string]string{
			"#sku": attrSKU, "#available": attrAvailable, "#reserved": attrReserved, "#count": attrCount,
		},
	})
	stocks := make(map[string]Stock)
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("inventory: scan %s: %w", table, err)
		}
		for _, item := range out.Items {
			sku, ok := item[attrSKU].(*types.AttributeValueMemberS)
			if !ok {
				return nil, fmt.Errorf("inventory: scan %s: item without a string %s", table, attrSKU)
			}
			if strings.HasPrefix(sku.Value, EntryPrefix) {
				continue // a journal entry, not a sku
			}
			var s Stock
			for _, f := range []struct {
				name string
				dst  *int64
			}{{attrAvailable, &s.Available}, {attrReserved, &s.Reserved}, {attrCount, &s.Reservations}} {
				if item[f.name] == nil {
					continue
				}
				v, ok := item[f.name].(*types.AttributeValueMemberN)
				if !ok {
					return nil, fmt.Errorf("inventory: scan %s: sku %s has a non-numeric %s", table, sku.Value, f.name)
				}
				n, err := strconv.ParseInt(v.Value, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("inventory: scan %s: sku %s: %s: %w", table, sku.Value, f.name, err)
				}
				*f.dst = n
			}
			stocks[sku.Value] = s
		}
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
