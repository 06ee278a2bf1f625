package ledger

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ScanAPI is the part of the DynamoDB client Balances uses; *dynamodb.Client satisfies it.
type ScanAPI interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// Balances reads every account of the ledger table and returns account_id →
// balance_cents. It scans the whole table (strongly consistent, all pages), so it is
// for tests and the demo's ledger check, not for production traffic.
func Balances(ctx context.Context, api ScanAPI, table string) (map[string]int64, error) {
	pages := dynamodb.NewScanPaginator(api, &dynamodb.ScanInput{
		TableName:                aws.String(table),
		ConsistentRead:           aws.Bool(true),
		ProjectionExpression:     aws.String("#account, #balance"),
		ExpressionAttributeNames: map[string]string{"#account": attrAccountID, "#balance": attrBalance},
	})
	balances := make(map[string]int64)
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
			bal, ok := item[attrBalance].(*types.AttributeValueMemberN)
			if !ok {
				return nil, fmt.Errorf("ledger: scan %s: account %s has no numeric %s", table, acct.Value, attrBalance)
			}
			n, err := strconv.ParseInt(bal.Value, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("ledger: scan %s: account %s: %s: %w", table, acct.Value, attrBalance, err)
			}
			balances[acct.Value] = n
		}
	}
	return balances, nil
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
