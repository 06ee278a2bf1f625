// Command reaper is the scheduled Lambda that fails stale idempotency locks. It only
// wires configuration and clients; the sweep is idem.Reaper.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/reaper/reaperapp"
)

func main() {
	cfg, err := reaperapp.FromEnv(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	awsCfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "reaper: load AWS configuration:", err)
		os.Exit(1)
	}
	h, err := reaperapp.New(cfg, reaperapp.Deps{DynamoDB: dynamodb.NewFromConfig(awsCfg), SQS: sqs.NewFromConfig(awsCfg)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lambda.Start(h)
}
