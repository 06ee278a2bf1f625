package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
)

// runCheck is the final check of traffic sent with `idemctl send --record FILE`, against
// any deployment (moto, LocalStack, AWS): the example's tables hold what the distinct
// messages recorded leave (its example.Checker: Expect against Read), and the effects
// counted there are one per distinct message. It exits 1 when they do not.
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	flags := newFlags("check", stderr)
	exName := exampleFlag(flags)
	record := flags.String("record", "", "the messages sent, as `send --record` wrote them (required)")
	if code, ok := parseNoArgs(flags, args, stderr); !ok {
		return code
	}
	if *record == "" {
		return usageError(flags, stderr, "want --record FILE")
	}
	ex, checker, err := needExample(*exName, env, example.CheckerOf)
	if err != nil {
		return exampleError(flags, stderr, err, "")
	}
	b, err := os.ReadFile(*record)
	if err != nil {
		return fail(stderr, "check", err)
	}
	var msgs []example.Message
	seen := map[string]bool{}
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		m, err := ex.Decode([]byte(line))
		if err != nil {
			return fail(stderr, "check", fmt.Errorf("%s line %d: %w", *record, i+1, err))
		}
		if !seen[m.ID] {
			seen[m.ID] = true
			msgs = append(msgs, m)
		}
	}
	awsCfg, err := LoadAWSEnv(ctx, env)
	if err != nil {
		return fail(stderr, "check", err)
	}
	want, err := checker.Expect(msgs, msgs)
	if err != nil {
		return fail(stderr, "check", err)
	}
	got, err := checker.Read(ctx, dynamodb.NewFromConfig(awsCfg), example.Lookup(env))
	if err != nil {
		return fail(stderr, "check", err)
	}
	fmt.Fprintf(stdout, "%s check: %d distinct messages, %d values to compare\n", ex.Name(), len(msgs), len(want))
	diffs := demo.CompareState(want, got.State)
	if got.Applied != len(msgs) {
		diffs = append(diffs, fmt.Sprintf("effects counted in the tables: %d, want one per distinct message: %d", got.Applied, len(msgs)))
	}
	if len(diffs) > 0 {
		return fail(stderr, "check", errors.New("the tables differ from what the messages sent leave:\n  "+strings.Join(diffs, "\n  ")))
	}
	fmt.Fprintf(stdout, "%s check: tables = what the distinct messages sent leave OK\n", ex.Name())
	return exitOK
}

func init() {
	commands = append(commands, command{"check", "--record FILE [--example NAME]",
		"after `send --record FILE` and the consumption (idemctl run, or a deployment): the example's tables hold what the distinct messages sent leave", runCheck})
}
