package localfn

import (
	"context"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
	"github.com/idemgo/sqs-lambda-consumer/internal/runner"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// DemoFunctions is demo.Options.Functions for the template's consumer and reaper as
// execution environments of the bootstraps: with the demo's stack (vars, from Up), its
// timing (demo.FunctionTimeout, LeaseGrace, DeadlineMargin), and the AWS settings and
// any other variable from env.
func DemoFunctions(ctx context.Context, t *stack.Template, consumerBin, reaperBin string, vars map[string]string, env Lookup, awsCfg aws.Config,
) func(int, io.Writer) (demo.Functions, error) {
	lookup := func(k string) (string, bool) {
		switch k {
		case "LEASE_GRACE":
			return demo.LeaseGrace.String(), true
		case "DEADLINE_MARGIN":
			return demo.DeadlineMargin.String(), true
		case "CONSUMER_TIMEOUT":
			return demo.FunctionTimeout.String(), true
		}
		if v, ok := vars[k]; ok {
			return v, true
		}
		return env(k)
	}
	endpoint, _ := env("AWS_ENDPOINT_URL")
	return func(n int, output io.Writer) (demo.Functions, error) {
		set, err := NewSet(ctx, t, consumerBin, reaperBin, n, demo.FunctionTimeout, true, lookup, awsCfg, endpoint, output)
		if err != nil {
			return demo.Functions{}, err
		}
		return demo.Functions{
			Consumer: func(i int) runner.Handler { return runner.EnvironmentHandler(set.Consumers[i]) },
			Reap:     runner.EnvironmentReaper(set.Reaper, set.Rule),
			Close:    set.Close,
		}, nil
	}
}
