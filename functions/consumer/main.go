// Command consumer is the SQS consumer Lambda: it only wires configuration and clients;
// the handler is built by consumerapp, and the business logic is the example that
// functions/consumer/wiring names.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/internal/initerr"
	"github.com/idemgo/sqs-lambda-consumer/internal/stacksecret"
	"github.com/idemgo/sqs-lambda-consumer/internal/tracing"
)

func main() {
	cfg, err := consumerapp.FromEnv(os.LookupEnv)
	if err != nil {
		initFailed(err)
	}
	awsCfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		initFailed(fmt.Errorf("consumer: load AWS configuration: %w", err))
	}
	tp, err := tracing.Setup(context.Background(), os.LookupEnv, "consumer", &awsCfg) // nil: TRACING=none
	if err != nil {
		initFailed(err)
	}
	if cfg.Keys, err = stacksecret.Resolve(context.Background(), cfg.Keys, cfg.SecretARN, awsCfg); err != nil {
		initFailed(fmt.Errorf("consumer: %w", err))
	}
	// The handler gets the same clients (example.Deps), and the HTTP client for its calls
	// outside AWS, whose deadline is the invocation's.
	deps := consumerapp.Clients(dynamodb.NewFromConfig(awsCfg), sqs.NewFromConfig(awsCfg), &http.Client{})
	deps.Tracer = tp.TracerProvider()
	h, err := consumerapp.New(cfg, deps)
	if err != nil {
		initFailed(err)
	}
	lambda.Start(h)
}

// initFailed reports a failed init as Lambda asks (a post to /runtime/init/error) and
// exits.
func initFailed(err error) { initerr.Exit(os.Getenv, os.Stderr, os.Exit, err) }
