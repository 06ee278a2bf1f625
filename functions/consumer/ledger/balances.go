package ledger

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
)

// ScanAPI is the part of the DynamoDB client Accounts uses; *dynamodb.Client satisfies it.
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

// Accounts reads every account of the ledger table: its balance and the number of
// credits applied to it. It scans the whole table (strongly consistent, all pages), so
// it is for tests and tools, not for production traffic.
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
