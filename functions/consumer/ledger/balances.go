package ledger

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ScanAPI is the part of the DynamoDB client Balances uses; *dynamodb.Client satisfies it.
type ScanAPI interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// Account is one ledger row.
type Account struct {
	BalanceCents int64 // sum of the payments credited
	Payments     int64 // number of credits applied: one per payment in a correct run
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
	pages := dynamodb.NewScanPaginator(api, &dynamodb.ScanInput{
		TableName:                aws.String(table),
		ConsistentRead:           aws.Bool(true),
		ProjectionExpression:     aws.String("#account, #balance, #count"),
		ExpressionAttributeNames: map[string]string{"#account": attrAccountID, "#balance": attrBalance, "#count": attrCount},
	})
	accts := make(map[string]Account)
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("ledger: scan %s: %w", table, err)
		}
		for _, item := range out.Items {
			acct, ok := item[attrAccountID].(*types.AttributeValueMemberS)
			if !ok {
				return nil, fmt.Errorf("ledger: scan %s: item without a string %s", table, attrAccountID)
			}
			if strings.HasPrefix(acct.Value, EntryPrefix) {
				continue // a journal entry, not an account
			}
			var a Account
			for name, dst := range map[string]*int64{attrBalance: &a.BalanceCents, attrCount: &a.Payments} {
				v, ok := item[name].(*types.AttributeValueMemberN)
				if !ok && name == attrCount && item[name] == nil {
					continue // a row without the counter counts no credits
				}
				if !ok {
					return nil, fmt.Errorf("ledger: scan %s: account %s has no numeric %s", table, acct.Value, name)
				}
				n, err := strconv.ParseInt(v.Value, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("ledger: scan %s: account %s: %s: %w", table, acct.Value, name, err)
				}
				*dst = n
			}
			accts[acct.Value] = a
		}
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
