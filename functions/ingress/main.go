// Command ingress is the HTTP front door Lambda (a function URL, AuthType AWS_IAM): it
// only wires configuration and clients; the handler is ingressapp's. The start-up is
// internal/fnmain's.
package main

import (
	"os"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/internal/fnmain"
)

func main() {
	cfg, err := ingressapp.FromEnv(os.LookupEnv)
	fnmain.Start("ingress", err, cfg.Keys, cfg.SecretARN, func(in fnmain.Init) (any, error) {
		cfg.Keys = in.Keys
		app, err := ingressapp.New(cfg, ingressapp.Deps{DynamoDB: dynamodb.NewFromConfig(in.AWS), SQS: sqs.NewFromConfig(in.AWS), Tracer: in.Tracer})
		if err != nil {
			return nil, err
		}
		return app.Handler(), nil
	})
}
