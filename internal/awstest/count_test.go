package awstest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// TestOperationsCountTheCodesCalls: against an endpoint that refuses every connection,
// the SDK tries a call 3 times; NewCalls counts the 3 attempts, NewOperations the one
// call the code made.
func TestOperationsCountTheCodesCalls(t *testing.T) {
	port, err := awstest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	attempts, calls := awstest.NewCalls(), awstest.NewOperations()
	cfg := awstest.ConfigFor(t, fmt.Sprintf("http://127.0.0.1:%d", port))
	cfg.RetryMaxAttempts = 3
	ddb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, attempts.APIOption, calls.APIOption) })
	if _, err := ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String("t"), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}}}); err == nil {
		t.Fatal("a call to a closed port succeeded")
	}
	if a, c := attempts.Ops()["GetItem"], calls.Ops()["GetItem"]; a != 3 || c != 1 {
		t.Fatalf("%d attempts and %d calls counted, want 3 and 1", a, c)
	}
}
