// Package fnmain is the start-up the three functions share (functions/*/main.go): the
// AWS configuration, tracing as the environment says (internal/tracing), the stack's
// secret (internal/stacksecret), then Lambda's runtime loop. A failure before the loop
// fails the init, reported as Lambda asks (internal/initerr). Each main only reads its
// own configuration and builds its handler.
package fnmain

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/awsconf"
	"github.com/idemgo/sqs-lambda-consumer/internal/initerr"
	"github.com/idemgo/sqs-lambda-consumer/internal/stacksecret"
	"github.com/idemgo/sqs-lambda-consumer/internal/tracing"
)

// Init is what a function's handler is built from.
type Init struct {
	AWS    aws.Config           // the SDK clients' configuration, instrumented when tracing is on
	Tracer trace.TracerProvider // nil: TRACING=none
	Keys   *sqsmsg.Keys         // the function's keys: its configuration's, else the stack's secret's
}

// Start starts the function service. configured is the error of its configuration read
// from the environment (nil: read), keys its keys (nil: loaded from the stack's secret
// secretARN, when set), build makes its handler (a lambda.Start handler). It does not
// return.
func Start(service string, configured error, keys *sqsmsg.Keys, secretARN string, build func(Init) (any, error)) {
	h, err := setup(context.Background(), os.LookupEnv, service, configured, keys, secretARN, build)
	if err != nil {
		initerr.Exit(os.Getenv, os.Stderr, os.Exit, err)
		return
	}
	lambda.Start(h)
}

func setup(ctx context.Context, lookup func(string) (string, bool), service string, configured error, keys *sqsmsg.Keys, secretARN string, build func(Init) (any, error)) (any, error) {
	if configured != nil {
		return nil, configured
	}
	awsCfg, err := awsconf.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: load AWS configuration: %w", service, err)
	}
	tp, err := tracing.Setup(ctx, lookup, service, &awsCfg) // nil: TRACING=none
	if err != nil {
		return nil, err
	}
	if keys, err = stacksecret.Resolve(ctx, keys, secretARN, awsCfg); err != nil {
		return nil, fmt.Errorf("%s: %w", service, err)
	}
	return build(Init{AWS: awsCfg, Tracer: tp.TracerProvider(), Keys: keys})
}
