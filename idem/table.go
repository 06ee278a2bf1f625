package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TableAdmin is the part of the DynamoDB client CreateTable uses.
type TableAdmin interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// TableInput returns the CreateTableInput of an idempotency table: partition key pk,
// on-demand billing, and the sparse in-flight GSI (inflight HASH, lease_until RANGE)
// projecting what the reaper reads. template.yaml declares the same table.
func TableInput(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrInflight), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrLeaseUntil), AttributeType: types.ScalarAttributeTypeN},
		},
		KeySchema: []types.KeySchemaElement{{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash}},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName: aws.String(InflightIndex),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(attrInflight), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(attrLeaseUntil), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{
				ProjectionType:   types.ProjectionTypeInclude,
				NonKeyAttributes: []string{attrLeaseToken, attrOwner, attrAttempt},
			},
		}},
		SSESpecification: &types.SSESpecification{Enabled: aws.Bool(true)},
	}
}

// CreateTable creates the idempotency table if it does not exist, waits until it is
// active and enables TTL on expires_at. It is safe to call on an existing table.
func CreateTable(ctx context.Context, api TableAdmin, name string) error {
	_, err := api.CreateTable(ctx, TableInput(name))
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("idem: create table %s: %w", name, err)
	}
	if err := WaitActive(ctx, api, name); err != nil {
		return err
	}
	_, err = api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(attrExpiresAt),
			Enabled:       aws.Bool(true),
		},
	})
	// Enabling TTL twice is refused with a ValidationException; that means it is on.
	var apiErr interface{ ErrorCode() string }
	if err != nil && (!errors.As(err, &apiErr) || apiErr.ErrorCode() != "ValidationException") {
		return fmt.Errorf("idem: enable TTL on %s: %w", name, err)
	}
	return nil
}

// WaitActive polls until the table is ACTIVE or ctx ends.
func WaitActive(ctx context.Context, api TableAdmin, name string) error {
	for {
		out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("idem: describe table %s: %w", name, err)
		}
		if out.Table != nil && out.Table.TableStatus == types.TableStatusActive {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("idem: wait for table %s: %w", name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
