// Command consumer is the SQS consumer Lambda: it only wires configuration and clients;
// the handler is built by consumerapp, and the business logic is the example that
// functions/consumer/wiring names. The start-up is internal/fnmain's.
package main

import (
	"net/http"
	"os"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/internal/fnmain"
)

func main() {
	cfg, err := consumerapp.FromEnv(os.LookupEnv)
	fnmain.Start("consumer", err, cfg.Keys, cfg.SecretARN, func(in fnmain.Init) (any, error) {
		cfg.Keys = in.Keys
		// The handler gets the same clients (example.Deps), and the HTTP client for its
		// calls outside AWS, whose deadline is the invocation's.
		deps := consumerapp.Clients(dynamodb.NewFromConfig(in.AWS), sqs.NewFromConfig(in.AWS), &http.Client{})
		deps.Tracer = in.Tracer
		return consumerapp.New(cfg, deps)
	})
}
