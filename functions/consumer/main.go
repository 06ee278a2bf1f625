// Command consumer is the SQS consumer Lambda: it only wires configuration and clients;
// the handler is built by consumerapp and the business logic lives in ledger.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
)

func main() {
	cfg, err := consumerapp.FromEnv(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	awsCfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer: load AWS configuration:", err)
		os.Exit(1)
	}
	h, err := consumerapp.New(cfg, consumerapp.Clients(dynamodb.NewFromConfig(awsCfg), sqs.NewFromConfig(awsCfg)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lambda.Start(h)
}
