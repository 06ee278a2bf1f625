package faults_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
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
	cfg, calls := configVia(t, ep, maxAttempts)
	return dynamodb.NewFromConfig(cfg), calls
}

// sqsVia is ddbVia for SQS.
func sqsVia(t *testing.T, ep string, maxAttempts int) (*sqs.Client, *awstest.Calls) {
	cfg, calls := configVia(t, ep, maxAttempts)
	return sqs.NewFromConfig(cfg), calls
}

// configVia is the SDK configuration of ddbVia and sqsVia.
func configVia(t *testing.T, ep string, maxAttempts int) (aws.Config, *awstest.Calls) {
	t.Helper()
	calls := awstest.NewCalls()
	cfg := awstest.ConfigFor(t, ep)
	cfg.Retryer = func() aws.Retryer { return fastRetries(maxAttempts) }
	cfg.RetryMaxAttempts = maxAttempts
	cfg.APIOptions = append(cfg.APIOptions, calls.APIOption)
	return cfg, calls
}

// table creates a table with a string partition key pk, directly on the emulator.
func table(t *testing.T) string {
	return awstest.HashTable(context.Background(), t, awstest.DynamoDB(t), "faults", "pk")
}

func key(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}
}
