// Command reaper is the scheduled Lambda that fails stale idempotency locks. It only
// wires configuration and clients; the sweep is reaper.Reaper. The start-up is
// internal/fnmain's.
package main

import (
	"os"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/reaper/reaperapp"
	"github.com/idemgo/sqs-lambda-consumer/internal/fnmain"
)

func main() {
	cfg, err := reaperapp.FromEnv(os.LookupEnv)
	fnmain.Start("reaper", err, cfg.Keys, cfg.SecretARN, func(in fnmain.Init) (any, error) {
		cfg.Keys = in.Keys
		return reaperapp.New(cfg, reaperapp.Deps{DynamoDB: dynamodb.NewFromConfig(in.AWS), SQS: sqs.NewFromConfig(in.AWS), Tracer: in.Tracer})
	})
}
