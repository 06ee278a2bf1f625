package ledger

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
)

// ScanAPI is the part of the DynamoDB client Balances uses; *dynamodb.Client satisfies it.
type ScanAPI = example.ScanAPI

// Account is one ledger row.
type Account struct {
	BalanceCents int64 // sum of the payments credited
	Payments     int64 // number of credits applied: one per payment in a correct run
}

// fields are an account's numeric attributes, by name (example.Table).
func (a *Account) fields() map[string]*int64 {
	return map[string]*int64{attrBalance: &a.BalanceCents, attrCount: &a.Payments}
}

// Balances reads every account of the ledger table and returns account_id →
// balance_cents. It scans the whole table (strongly consistent, all pages), so it is
// for tests and the demo's ledger check, not for production traffic.
func Balances(ctx context.Context, api ScanAPI, table string) (map[string]int64, error) {
	accts, err := Accounts(ctx, api, table)
	if err != nil {
		return nil, err
	}
	balances := make(map[string]int64, len(accts))
	for id, a := range accts {
		balances[id] = a.BalanceCents
	}
	return balances, nil
}

// Accounts reads every account of the ledger table, like Balances, with the number of
// credits applied to each.
func Accounts(ctx context.Context, api ScanAPI, table string) (map[string]Account, error) {
	// A row without the counter counts no credits; one without a balance is not an account.
	accts, err := example.Table(ctx, api, table, attrAccountID, EntryPrefix, "account", (*Account).fields,
		func(_ *Account, item map[string]types.AttributeValue) error {
			if item[attrBalance] == nil {
				return fmt.Errorf("no numeric %s", attrBalance)
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return accts, nil
}

// ExpectedBalances returns what a correct run ends with: per account, the sum of the
// distinct payments, where payments with the same payment_id count once (the first).
func ExpectedBalances(payments []Payment) map[string]int64 {
	seen := make(map[string]bool, len(payments))
	balances := make(map[string]int64)
	for _, p := range payments {
		if seen[p.PaymentID] {
			continue
		}
		seen[p.PaymentID] = true
		balances[p.AccountID] += p.AmountCents
	}
	return balances
}
