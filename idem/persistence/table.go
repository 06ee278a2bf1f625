package persistence

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

// TableInput returns the CreateTableInput of an idempotency table in the default
// layout: partition key pk, on-demand billing, and the sparse in-flight GSI (inflight
// HASH, lease_until RANGE) projecting what the reaper reads. template.yaml declares the
// same table.
func TableInput(name string) *dynamodb.CreateTableInput {
	in, _ := TableInputFor(Layout{Table: name})
	return in
}

// TableInputFor returns the CreateTableInput of a table for layout: its key (with the
// sort key, if any), and the in-flight index unless the layout has none. A table that
// holds business items too needs their attribute definitions and indexes added.
func TableInputFor(layout Layout) (*dynamodb.CreateTableInput, error) {
	s, err := layout.Schema()
	if err != nil {
		return nil, err
	}
	defs := []types.AttributeDefinition{{AttributeName: aws.String(s.pk), AttributeType: types.ScalarAttributeTypeS}}
	keys := []types.KeySchemaElement{{AttributeName: aws.String(s.pk), KeyType: types.KeyTypeHash}}
	if s.sk != "" {
		defs = append(defs, types.AttributeDefinition{AttributeName: aws.String(s.sk), AttributeType: types.ScalarAttributeTypeS})
		keys = append(keys, types.KeySchemaElement{AttributeName: aws.String(s.sk), KeyType: types.KeyTypeRange})
	}
	in := &dynamodb.CreateTableInput{
		TableName:            aws.String(s.Table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: defs,
		KeySchema:            keys,
		SSESpecification:     &types.SSESpecification{Enabled: aws.Bool(true)},
	}
	if s.hasIndex() {
		in.AttributeDefinitions = append(in.AttributeDefinitions,
			types.AttributeDefinition{AttributeName: aws.String(s.n(AttrInflight)), AttributeType: types.ScalarAttributeTypeS},
			types.AttributeDefinition{AttributeName: aws.String(s.n(AttrLeaseUntil)), AttributeType: types.ScalarAttributeTypeN})
		in.GlobalSecondaryIndexes = []types.GlobalSecondaryIndex{{
			IndexName: aws.String(s.index),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(s.n(AttrInflight)), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(s.n(AttrLeaseUntil)), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{
				ProjectionType:   types.ProjectionTypeInclude,
				NonKeyAttributes: []string{s.n(attrLeaseToken), s.n(attrOwner), s.n(AttrAttempt)},
			},
		}}
	}
	return in, nil
}

// CreateTable creates the idempotency table in the default layout if it does not
// exist, waits until it is active and enables TTL on expires_at. It is safe to call on
// an existing table.
func CreateTable(ctx context.Context, api TableAdmin, name string) error {
	return CreateTableFor(ctx, api, Layout{Table: name})
}

// CreateTableFor is CreateTable for a layout: the table TableInputFor describes, with
// TTL on the layout's expiry attribute.
func CreateTableFor(ctx context.Context, api TableAdmin, layout Layout) error {
	in, err := TableInputFor(layout)
	if err != nil {
		return err
	}
	s, _ := layout.Schema()
	name := s.Table
	_, err = api.CreateTable(ctx, in)
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
			AttributeName: aws.String(s.n(AttrExpiresAt)),
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
