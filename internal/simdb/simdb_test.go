package simdb_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/idemgo/sqs-lambda-consumer/internal/simdb"
)

// TestReturnValuesOutsideTheOperationAreRefused: PutItem and DeleteItem take NONE or
// ALL_OLD, as DynamoDB's do, and a value outside the subset is refused before anything
// is written.
func TestReturnValuesOutsideTheOperationAreRefused(t *testing.T) {
	ctx := context.Background()
	db := simdb.New()
	if _, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("t"),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		t.Fatal(err)
	}
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "a"}}
	refused := func(what string, err error) {
		t.Helper()
		var api smithy.APIError
		if !errors.As(err, &api) || api.ErrorCode() != "ValidationException" {
			t.Errorf("%s: %v, want a ValidationException", what, err)
		}
	}
	_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: key, ReturnValues: types.ReturnValueAllNew})
	refused("PutItem with ALL_NEW", err)
	_, err = db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String("t"), Key: key, ReturnValues: types.ReturnValueUpdatedOld})
	refused("DeleteItem with UPDATED_OLD", err)
	_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String("t"), Key: key, UpdateExpression: aws.String("SET n = :n"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: "1"}}, ReturnValues: types.ReturnValueUpdatedNew})
	refused("UpdateItem with UPDATED_NEW", err)
	if items, err := db.Items("t"); err != nil || len(items) != 0 {
		t.Fatalf("items after the refusals: %v, %v; want none", items, err)
	}
	out, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String("t"), Key: key, UpdateExpression: aws.String("SET n = :n"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: "1"}}, ReturnValues: types.ReturnValueAllNew})
	if err != nil || len(out.Attributes) != 2 {
		t.Fatalf("UpdateItem with ALL_NEW: %v, %v; want the new item", out, err)
	}
	old, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: key, ReturnValues: types.ReturnValueAllOld})
	if err != nil || len(old.Attributes) != 2 {
		t.Fatalf("PutItem with ALL_OLD: %v, %v; want the item it replaced", old, err)
	}
}
