package awstest

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// HashTable creates an on-demand table of the test's own (Name(t, prefix)) whose
// partition key is the string attribute key, waits until it is active, and deletes it
// when the test ends. It returns the table's name.
func HashTable(ctx context.Context, t testing.TB, api *dynamodb.Client, prefix, key string) string {
	t.Helper()
	name := Name(t, prefix)
	err := CreateTable(ctx, api, &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String(key), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String(key), KeyType: ddbtypes.KeyTypeHash}},
	})
	if err != nil {
		t.Fatalf("create %s table: %v", prefix, err)
	}
	DeleteTableAtEnd(t, api, name)
	if err := dynamodb.NewTableExistsWaiter(api).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, time.Minute); err != nil {
		t.Fatalf("%s table: %v", prefix, err)
	}
	return name
}

// DeleteTableAtEnd deletes the table when the test ends.
func DeleteTableAtEnd(t testing.TB, api *dynamodb.Client, name string) {
	t.Cleanup(func() {
		_, _ = api.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
}

// FIFOQueue creates a FIFO queue of the test's own (Name(t, prefix) + ".fifo", with
// attrs besides FifoQueue), deletes it when the test ends, and returns its URL.
func FIFOQueue(ctx context.Context, t testing.TB, api *sqs.Client, prefix string, attrs map[string]string) string {
	t.Helper()
	all := map[string]string{"FifoQueue": "true"}
	maps.Copy(all, attrs)
	return Queue(ctx, t, api, prefix, all)
}

// Queue creates a queue of the test's own (Name(t, prefix), with ".fifo" when attrs has
// FifoQueue "true"), deletes it when the test ends, and returns its URL.
func Queue(ctx context.Context, t testing.TB, api *sqs.Client, prefix string, attrs map[string]string) string {
	t.Helper()
	name := Name(t, prefix)
	if attrs["FifoQueue"] == "true" {
		name += ".fifo"
	}
	q, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("create %s queue: %v", prefix, err)
	}
	t.Cleanup(func() { _, _ = api.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	return aws.ToString(q.QueueUrl)
}
