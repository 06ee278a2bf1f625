package payouts

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
)

// EntryPrefix starts the payee_id of the journal entries the handler keeps in the payees
// table, one per payout; no payee id may begin with it.
const EntryPrefix = "payout#"

// Attribute names of the payees table.
const (
	attrPayee   = "payee_id"
	attrEnabled = "enabled"
	attrPaid    = "paid_cents"
	attrCount   = "payout_count"
	// journal entries
	attrEntryPayee = "payout_payee"
	attrTransfer   = "transfer_id"  // the gateway's id of the transfer
	attrAmount     = "amount_cents" // and guarded.KeyHashAttr
)

// Payee is one payee's row.
type Payee struct {
	Enabled   bool  // payouts to the payee are allowed
	PaidCents int64 // paid so far
	Payouts   int64 // payouts applied: one per payout in a correct run
}

// fields are a payee's numeric attributes, by name (example.Table).
func (p *Payee) fields() map[string]*int64 {
	return map[string]*int64{attrPaid: &p.PaidCents, attrCount: &p.Payouts}
}

// ScanAPI is the part of the DynamoDB client Payees uses; *dynamodb.Client satisfies it.
type ScanAPI = example.ScanAPI

// UpdateAPI is the part of the DynamoDB client EnablePayee uses; *dynamodb.Client
// satisfies it.
type UpdateAPI interface {
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// EnablePayee allows payouts to payee, creating its row if needed. Calling it twice
// changes nothing.
func EnablePayee(ctx context.Context, api UpdateAPI, table, payee string) error {
	if strings.HasPrefix(payee, EntryPrefix) {
		return fmt.Errorf("payouts: enable payee: a payee id must not begin with %q (reserved for journal entries)", EntryPrefix)
	}
	_, err := api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{attrPayee: &types.AttributeValueMemberS{Value: payee}},
		UpdateExpression:          aws.String("SET #enabled = :true"),
		ExpressionAttributeNames:  map[string]string{"#enabled": attrEnabled},
		ExpressionAttributeValues: map[string]types.AttributeValue{":true": &types.AttributeValueMemberBOOL{Value: true}},
	})
	if err != nil {
		return fmt.Errorf("payouts: enable payee in %s: %w", table, err)
	}
	return nil
}

// Payees reads every payee of the table, skipping the journal entries. It scans the
// whole table (strongly consistent, all pages): for tests and tools, not for production
// traffic. A missing attribute reads as its zero value.
func Payees(ctx context.Context, api ScanAPI, table string) (map[string]Payee, error) {
	payees, err := example.Table(ctx, api, table, attrPayee, EntryPrefix, "payee", (*Payee).fields,
		func(p *Payee, item map[string]types.AttributeValue) error {
			if v, ok := item[attrEnabled].(*types.AttributeValueMemberBOOL); ok {
				p.Enabled = v.Value
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("payouts: %w", err)
	}
	return payees, nil
}
