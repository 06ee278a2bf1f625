package faults_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

func TestMain(m *testing.M) { os.Exit(awstest.Main(m)) }

// fastRetries keeps the SDK's standard retryer (its error classification, retry quota
// and attempt count) but waits 1 ms between attempts instead of up to 2^attempt s.
func fastRetries(maxAttempts int) *retry.Standard {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = maxAttempts
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
	})
}

// ddbVia returns a DynamoDB client on endpoint ep with fast retries (3 attempts, the
// SDK's default) and an attempt counter.
func ddbVia(t *testing.T, ep string, maxAttempts int) (*dynamodb.Client, *awstest.Calls) {
	t.Helper()
	calls := awstest.NewCalls()
	c := dynamodb.NewFromConfig(awstest.ConfigFor(t, ep), func(o *dynamodb.Options) {
		o.Retryer = fastRetries(maxAttempts)
		o.RetryMaxAttempts = maxAttempts
		o.APIOptions = append(o.APIOptions, calls.APIOption)
	})
	return c, calls
}

func sqsVia(t *testing.T, ep string, maxAttempts int) (*sqs.Client, *awstest.Calls) {
	t.Helper()
	calls := awstest.NewCalls()
	c := sqs.NewFromConfig(awstest.ConfigFor(t, ep), func(o *sqs.Options) {
		o.Retryer = fastRetries(maxAttempts)
		o.RetryMaxAttempts = maxAttempts
		o.APIOptions = append(o.APIOptions, calls.APIOption)
	})
	return c, calls
}

// table creates a table with a string partition key pk, directly on the emulator.
func table(t *testing.T) string {
	return awstest.HashTable(context.Background(), t, awstest.DynamoDB(t), "faults", "pk")
}

func key(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}
}
