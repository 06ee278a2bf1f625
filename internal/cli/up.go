package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// paramFlag collects repeated --param K=V flags.
type paramFlag map[string]string

func (p paramFlag) String() string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + p[k]
	}
	return strings.Join(parts, ",")
}

func (p paramFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want Name=Value, got %q", s)
	}
	p[k] = v
	return nil
}

// runUp creates the template's queues and tables on the local endpoint and prints the
// functions' environment as export lines on stdout, progress on stderr, so that
// eval "$(idemctl up)" both creates and configures.
func runUp(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	flags := newFlags("up", stderr)
	template := flags.String("template", "template.yaml", "the SAM template whose queues and tables to create")
	stackName := flags.String("stack", stack.DefaultStack, "stack name: resources are named <stack>-<LogicalId>")
	exName := exampleFlag(flags)
	params := paramFlag{}
	flags.Var(params, "param", "override a template parameter, `Name=Value` (repeatable)")
	if code, ok := parseNoArgs(flags, args, stderr); !ok {
		return code
	}
	if *exName != "" {
		if _, err := pickExample(*exName, env); err != nil {
			return usageError(flags, stderr, "--example: %v", err)
		}
	}
	if err := up(ctx, *template, *exName, *stackName, params, stdout, stderr, env); err != nil {
		return fail(stderr, "up", err)
	}
	return exitOK
}

func up(ctx context.Context, template, exName, stackName string, params map[string]string, stdout, stderr io.Writer, env lookupEnv) error {
	// up creates resources named for local use; deployments go through sam deploy.
	if v, _ := env("AWS_ENDPOINT_URL"); strings.TrimSpace(v) == "" {
		return errors.New("AWS_ENDPOINT_URL is not set: up creates resources on a local endpoint only " +
			"(e.g. export AWS_ENDPOINT_URL=http://127.0.0.1:4566 with moto_server or LocalStack running); deploy to AWS with sam deploy")
	}
	t, _, err := loadTemplate(template, exName, env)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (run idemctl from the repository root, or pass --template)", err)
	}
	if err != nil {
		return err
	}
	if err := t.SetParameters(params); err != nil {
		return err
	}
	cfg, err := LoadAWSEnv(ctx, env)
	if err != nil {
		return err
	}
	e, err := stack.Up(ctx, t, stack.Clients{
		SQS: sqs.NewFromConfig(cfg), DynamoDB: dynamodb.NewFromConfig(cfg), SecretsManager: secretsmanager.NewFromConfig(cfg), Region: cfg.Region,
	}, stackName, stderr)
	if err != nil {
		return err
	}
	if err := e.WriteExports(stdout); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "stack %s: %d queues, tables and secrets ready; %d variables on stdout (load them with eval \"$(idemctl up)\")\n",
		stackName, len(e.Resources), len(e.Vars))
	return nil
}
