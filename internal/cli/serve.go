package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"

	"github.com/aws/aws-lambda-go/events"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/internal/funcurl"
	"github.com/idemgo/sqs-lambda-consumer/internal/localfn"
	"github.com/idemgo/sqs-lambda-consumer/internal/stacksecret"
	"github.com/idemgo/sqs-lambda-consumer/internal/syncw"
)

// serveOptions are the flags of `idemctl serve`.
type serveOptions struct {
	template   string
	addr       string
	instances  int
	inProcess  bool
	bootstraps string
	trace      *traceFile
}

// runServe serves the ingress on a loopback port, as its function URL would: each HTTP
// request becomes a function URL event for a Lambda execution environment of the
// ingress's bootstrap (the Runtime API runner `idemctl run` uses), or, with
// --in-process, for its handler called in this process. It runs until Ctrl-C.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	var o serveOptions
	flags := newFlags("serve", stderr)
	flags.StringVar(&o.template, "template", "template.yaml", "the SAM template (the ingress's timeout, memory and variables)")
	flags.StringVar(&o.addr, "addr", "127.0.0.1:8080", "loopback address to listen on (the local URL does not authenticate)")
	flags.IntVar(&o.instances, "instances", 4, "execution environments, each taking one request at a time (Lambda's concurrency)")
	flags.BoolVar(&o.inProcess, "in-process", false, "call the ingress's handler inside this process instead of running its bootstrap as Lambda execution environments")
	flags.StringVar(&o.bootstraps, "bootstraps", "", "directory with ingress/bootstrap built for this host (default $IDEMCTL_BOOTSTRAPS; unset: build it from the module in the working directory)")
	o.trace = addTraceFile(flags)
	if code, ok := parseNoArgs(flags, args, stderr); !ok {
		return code
	}
	if o.instances < 1 || o.instances > 100 {
		return usageError(flags, stderr, "--instances must be between 1 and 100")
	}
	url, stop, err := serveIngress(ctx, o, stdout, stderr, env)
	if err != nil {
		return fail(stderr, "serve", err)
	}
	fmt.Fprintf(stderr, "serve: the ingress listens on %s (POST %s with an %s header, GET %s/{key}); Ctrl-C stops it\n",
		url, ingressapp.RequestsPath, ingressapp.KeyHeader, ingressapp.RequestsPath)
	<-ctx.Done()
	stop()
	fmt.Fprintln(stderr, "serve: stopped")
	return exitOK
}

// serveIngress starts the ingress's local function URL on o.addr and returns its URL
// and the func that stops it (and its environments).
func serveIngress(ctx context.Context, o serveOptions, stdout, stderr io.Writer, env lookupEnv) (string, func(), error) {
	env, err := o.trace.env(env)
	if err != nil {
		return "", nil, err
	}
	cfg, err := ingressapp.FromEnvOf(examples, env)
	if err != nil {
		return "", nil, fmt.Errorf("%w (run eval \"$(idemctl up)\" first)", err)
	}
	awsCfg, err := LoadAWSEnv(ctx, env)
	if err != nil {
		return "", nil, err
	}
	if cfg.Keys, err = stacksecret.Resolve(ctx, cfg.Keys, cfg.SecretARN, awsCfg); err != nil {
		return "", nil, err
	}
	creds, err := awsCfg.Credentials.Retrieve(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("credentials: %w", err)
	}
	logs := syncw.New(stdout)
	invoke, closeAll, err := ingressInvoke(ctx, o, cfg, awsCfg, logs, stderr, env)
	if err != nil {
		return "", nil, err
	}
	// The caller of a request is the access key that signed it (as at a deployed URL,
	// where it is the principal whose signature Lambda checked; here unchecked), or the
	// local caller for an unsigned one.
	local := funcurl.LocalCaller(creds.AccessKeyID)
	srv := &funcurl.Server{Invoke: invoke, Region: awsCfg.Region,
		CallerFor: func(r *http.Request) *events.LambdaFunctionURLRequestContextAuthorizerIAMDescription {
			return funcurl.SigV4Caller(r, local)
		}}
	url, stop, err := funcurl.Listen(o.addr, srv)
	if err != nil {
		closeAll()
		return "", nil, err
	}
	return url, func() { stop(); closeAll(); o.trace.close() }, nil
}

// ingressInvoke is the ingress as a funcurl.Invoke: its handler in this process, or
// o.instances execution environments of its bootstrap.
func ingressInvoke(ctx context.Context, o serveOptions, cfg ingressapp.Config, awsCfg aws.Config, logs, stderr io.Writer, env lookupEnv,
) (funcurl.Invoke, func(), error) {
	if o.inProcess {
		tp, awsCfg, err := o.trace.inProcess(ctx, "ingress", awsCfg)
		if err != nil {
			return nil, nil, err
		}
		app, err := ingressapp.New(cfg, ingressapp.Deps{DynamoDB: dynamodb.NewFromConfig(awsCfg), SQS: sqs.NewFromConfig(awsCfg), Logs: logs, Metrics: logs,
			Tracer: tp.TracerProvider()})
		if err != nil {
			return nil, nil, err
		}
		return app.Invoke, func() {}, nil
	}
	t, _, err := loadTemplate(o.template, "", env)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w (run idemctl from the repository root, or pass --template; or --in-process)", err)
	}
	if err != nil {
		return nil, nil, err
	}
	bin, err := localfn.IngressBootstrap(ctx, ".", setting(o.bootstraps, env, "IDEMCTL_BOOTSTRAPS"), stderr)
	if err != nil {
		return nil, nil, err
	}
	endpoint, _ := env("AWS_ENDPOINT_URL")
	envs, invoke, err := localfn.Ingress(ctx, t, bin, o.instances, env, awsCfg, endpoint, logs)
	if err != nil {
		return nil, nil, err
	}
	return invoke, func() {
		for _, e := range envs {
			_ = e.Close()
		}
	}, nil
}

func init() {
	commands = append(commands,
		command{"serve", "[--addr 127.0.0.1:8080] [--instances N] [--in-process] [--bootstraps DIR]",
			"serve the ingress (POST /requests, GET /requests/{key}) on a loopback port, through Lambda execution environments of its bootstrap", runServe},
	)
}
