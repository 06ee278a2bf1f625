package ledger_test

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

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
