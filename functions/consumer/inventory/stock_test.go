package inventory_test

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/inventory"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// row is a stock table item; "" leaves an attribute out.
func row(sku string, attrs ...string) map[string]types.AttributeValue {
	it := map[string]types.AttributeValue{"sku": &types.AttributeValueMemberS{Value: sku}}
	for i, name := range []string{"available", "reserved", "reservation_count"} {
		if i < len(attrs) && attrs[i] != "" {
			it[name] = &types.AttributeValueMemberN{Value: attrs[i]}
		}
	}
	return it
}

func TestStocks(t *testing.T) {
	entry := row("order#o-1")
	entry["quantity"] = &types.AttributeValueMemberN{Value: "3"}
	tests := []struct {
		name    string
		pages   [][]map[string]types.AttributeValue
		want    map[string]inventory.Stock
		wantErr string
	}{
		{name: "empty table", pages: [][]map[string]types.AttributeValue{nil}, want: map[string]inventory.Stock{}},
		{name: "all pages, journal entries skipped, missing counters read as 0", pages: [][]map[string]types.AttributeValue{
			{row("a", "7", "3", "1"), entry},
			{row("b", "10")},
			{row("c", "0", "12", "4")},
		}, want: map[string]inventory.Stock{
			"a": {Available: 7, Reserved: 3, Reservations: 1},
			"b": {Available: 10},
			"c": {Reserved: 12, Reservations: 4},
		}},
		{name: "not a number", pages: [][]map[string]types.AttributeValue{{row("a", "1.5")}}, wantErr: "sku a: available"},
		{name: "string counter", pages: [][]map[string]types.AttributeValue{{{
			"sku": &types.AttributeValueMemberS{Value: "a"}, "reserved": &types.AttributeValueMemberS{Value: "2"},
		}}}, wantErr: "sku a: reserved is not a number"},
		{name: "no sku", pages: [][]map[string]types.AttributeValue{{{"available": &types.AttributeValueMemberN{Value: "1"}}}}, wantErr: "item without a string sku"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := &exampletest.Pages{Key: "sku", Pages: tt.pages}
			got, err := inventory.Stocks(context.Background(), api, "stock")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Stocks error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Stocks: %v", err)
			}
			if !maps.Equal(got, tt.want) {
				t.Fatalf("Stocks = %v, want %v", got, tt.want)
			}
			if api.Calls != len(tt.pages) {
				t.Fatalf("%d Scan calls, want %d", api.Calls, len(tt.pages))
			}
		})
	}
}

// TestAddStockRefusesJournalNames: stock is never added to a journal entry's item.
func TestAddStockRefusesJournalNames(t *testing.T) {
	err := inventory.AddStock(context.Background(), (*dynamodb.Client)(nil), "stock", "order#o-1", 5)
	if err == nil || !strings.Contains(err.Error(), "reserved for journal entries") {
		t.Fatalf("AddStock on a journal entry's name: %v", err)
	}
}
