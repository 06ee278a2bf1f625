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
	"github.com/idemgo/sqs-lambda-consumer/internal/initerr"
	"github.com/idemgo/sqs-lambda-consumer/internal/stacksecret"
	"github.com/idemgo/sqs-lambda-consumer/internal/tracing"
)

func main() {
	cfg, err := reaperapp.FromEnv(os.LookupEnv)
	if err != nil {
		initFailed(err)
	}
	awsCfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		initFailed(fmt.Errorf("reaper: load AWS configuration: %w", err))
	}
	tp, err := tracing.Setup(context.Background(), os.LookupEnv, "reaper", &awsCfg) // nil: TRACING=none
	if err != nil {
		initFailed(err)
	}
	if cfg.Keys, err = stacksecret.Resolve(context.Background(), cfg.Keys, cfg.SecretARN, awsCfg); err != nil {
		initFailed(fmt.Errorf("reaper: %w", err))
	}
	h, err := reaperapp.New(cfg, reaperapp.Deps{DynamoDB: dynamodb.NewFromConfig(awsCfg), SQS: sqs.NewFromConfig(awsCfg), Tracer: tp.TracerProvider()})
	if err != nil {
		initFailed(err)
	}
	lambda.Start(h)
}

// initFailed reports a failed init as Lambda asks (a post to /runtime/init/error) and
// exits.
func initFailed(err error) { initerr.Exit(os.Getenv, os.Stderr, os.Exit, err) }
