// Package localfn runs the template's functions as Lambda runs them, on this host: it
// builds their bootstraps with the Lambda build flags and configures a Lambda execution
// environment (internal/lambdaenv) for each, with the timeout, memory and variables the
// template gives the function. `idemctl run`, the demo and the tests use it.
package localfn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/idemgo/sqs-lambda-consumer/internal/funcurl"
	"github.com/idemgo/sqs-lambda-consumer/internal/lambdaenv"
	"github.com/idemgo/sqs-lambda-consumer/internal/loopback"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// The functions' main packages in the module.
const (
	ConsumerPackage = "./functions/consumer"
	ReaperPackage   = "./functions/reaper"
	IngressPackage  = "./functions/ingress"
)

// IngressFunction is the logical id of the ingress in the template.
const IngressFunction = "IngressFunction"

// Lookup reads a variable: os.LookupEnv, or a map.
type Lookup = func(string) (string, bool)

// Bootstraps returns the consumer's and the reaper's bootstrap for this host. With dir
// set and holding consumer/bootstrap and reaper/bootstrap, those (built beforehand, as
// the tests do); else they are built into dir (empty: a directory in the temp dir) with
// the Lambda build flags, from the module in moduleDir, and a line says so on stderr.
func Bootstraps(ctx context.Context, moduleDir, dir string, stderr io.Writer) (consumer, reaper string, err error) {
	prebuilt := dir != ""
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "idemctl-bootstraps-"+runtime.GOOS+"-"+runtime.GOARCH)
	}
	consumer, reaper = filepath.Join(dir, "consumer", "bootstrap"), filepath.Join(dir, "reaper", "bootstrap")
	if prebuilt && isFile(consumer) && isFile(reaper) {
		return consumer, reaper, nil
	}
	if !isFile(filepath.Join(moduleDir, "go.mod")) {
		return "", "", errors.New("localfn: no bootstraps to run: run idemctl from the repository root (it builds them), or pass --bootstraps DIR holding consumer/bootstrap and reaper/bootstrap, or --in-process")
	}
	start := time.Now()
	for _, pkg := range []string{ConsumerPackage, ReaperPackage} {
		if _, err := lambdaenv.Build(ctx, moduleDir, dir, pkg); err != nil {
			return "", "", err
		}
	}
	fmt.Fprintf(stderr, "localfn: built the bootstraps for %s/%s in %s (%s)\n", runtime.GOOS, runtime.GOARCH, dir, time.Since(start).Round(time.Millisecond))
	return consumer, reaper, nil
}

// IngressBootstrap returns the ingress's bootstrap for this host, as Bootstraps does the
// consumer's and the reaper's: dir/ingress/bootstrap when dir holds it, else built into
// dir (empty: the same directory in the temp dir as Bootstraps').
func IngressBootstrap(ctx context.Context, moduleDir, dir string, stderr io.Writer) (string, error) {
	prebuilt := dir != ""
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "idemctl-bootstraps-"+runtime.GOOS+"-"+runtime.GOARCH)
	}
	bin := filepath.Join(dir, "ingress", "bootstrap")
	if prebuilt && isFile(bin) {
		return bin, nil
	}
	if !isFile(filepath.Join(moduleDir, "go.mod")) {
		return "", errors.New("localfn: no ingress bootstrap to run: run idemctl from the repository root (it builds it), or pass --bootstraps DIR holding ingress/bootstrap, or --in-process")
	}
	start := time.Now()
	if _, err := lambdaenv.Build(ctx, moduleDir, dir, IngressPackage); err != nil {
		return "", err
	}
	fmt.Fprintf(stderr, "localfn: built the ingress's bootstrap for %s/%s in %s (%s)\n", runtime.GOOS, runtime.GOARCH, dir, time.Since(start).Round(time.Millisecond))
	return bin, nil
}

// Ingress configures n execution environments of the template's ingress, with the
// bootstrap bin, as Function does (EXAMPLE passed on when env has it: the ingress runs
// the example the consumer runs), and returns them and an Invoke that spreads requests
// over them (funcurl.Pool). No process starts before the first invocation.
func Ingress(ctx context.Context, t *stack.Template, bin string, n int, env Lookup, awsCfg aws.Config, endpoint string, output io.Writer,
) ([]*lambdaenv.Environment, func(ctx context.Context, payload []byte) ([]byte, error), error) {
	fn, err := Function(ctx, t, IngressFunction, bin, 0, env, awsCfg, endpoint, output)
	if err != nil {
		return nil, nil, err
	}
	if v, ok := env("EXAMPLE"); ok && v != "" {
		fn.Env = append(fn.Env, "EXAMPLE="+v)
	}
	var envs []*lambdaenv.Environment
	var invokes []funcurl.Invoke
	for range max(n, 1) {
		e, err := lambdaenv.New(fn)
		if err != nil {
			return nil, nil, err
		}
		envs = append(envs, e)
		invokes = append(invokes, e.Invoke)
	}
	return envs, funcurl.Pool(invokes...), nil
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// Function is the lambdaenv.Function Lambda would run for the template's function id: its
// timeout (timeout, when not zero, overrides the template's, and FUNCTION_TIMEOUT with
// it), its memory, its own variables with their values from env, and the AWS settings
// Lambda puts in the environment: region and credentials (endpoint: the local one).
func Function(ctx context.Context, t *stack.Template, id, bin string, timeout time.Duration, env Lookup,
	awsCfg aws.Config, endpoint string, output io.Writer,
) (lambdaenv.Function, error) {
	spec, err := t.Function(id)
	if err != nil {
		return lambdaenv.Function{}, err
	}
	if timeout > 0 {
		spec.Timeout = timeout
	}
	creds, err := awsCfg.Credentials.Retrieve(ctx)
	if err != nil {
		return lambdaenv.Function{}, fmt.Errorf("localfn: credentials for the functions: %w", err)
	}
	vars := []string{"AWS_ACCESS_KEY_ID=" + creds.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + creds.SecretAccessKey}
	if creds.SessionToken != "" {
		vars = append(vars, "AWS_SESSION_TOKEN="+creds.SessionToken)
	}
	if endpoint != "" {
		vars = append(vars, "AWS_ENDPOINT_URL="+endpoint)
	}
	for _, name := range spec.VarNames {
		if name == "FUNCTION_TIMEOUT" {
			vars = append(vars, name+"="+spec.Timeout.String())
		} else if v, ok := env(name); ok {
			vars = append(vars, name+"="+v)
		}
	}
	// Settings the template leaves to their defaults, when this process has them (the
	// demo and the tests tune them).
	for _, name := range []string{"DEADLINE_MARGIN", "SWEEP_MARGIN", "MAX_CONCURRENCY", "CACHE_SIZE", "LEASE_GRACE", "TRACING", "TRACING_FILE"} {
		if v, ok := env(name); ok && !slices.Contains(spec.VarNames, name) {
			vars = append(vars, name+"="+v)
		}
	}
	return lambdaenv.Function{
		Name: id, Bin: bin, Env: vars, Timeout: spec.Timeout, MemoryMB: spec.MemoryMB, Region: awsCfg.Region, Output: output,
	}, nil
}

// Set is the execution environments of a local run: n of the consumer, and the
// reaper's (nil without one).
type Set struct {
	Consumers []*lambdaenv.Environment
	Reaper    *lambdaenv.Environment
	Rule      string        // the ARN of the reaper's schedule rule, for its events
	Timeout   time.Duration // the consumer's
}

// NewSet configures the environments of the template's SQS consumer and, with
// withReaper, of its scheduled function, with the bootstraps consumerBin and reaperBin.
// No process starts before the first invocation.
func NewSet(ctx context.Context, tpl *stack.Template, consumerBin, reaperBin string, n int, timeout time.Duration, withReaper bool,
	env Lookup, awsCfg aws.Config, endpoint string, output io.Writer,
) (*Set, error) {
	es, err := tpl.EventSource()
	if err != nil {
		return nil, err
	}
	fn, err := Function(ctx, tpl, es.FunctionLogicalID, consumerBin, timeout, env, awsCfg, endpoint, output)
	if err != nil {
		return nil, err
	}
	set := &Set{Timeout: fn.Timeout}
	for range n {
		e, err := lambdaenv.New(fn)
		if err != nil {
			return nil, err
		}
		set.Consumers = append(set.Consumers, e)
	}
	if !withReaper {
		return set, nil
	}
	id, event, err := tpl.ScheduledFunction()
	if err != nil {
		return nil, err
	}
	rfn, err := Function(ctx, tpl, id, reaperBin, timeout, env, awsCfg, endpoint, output)
	if err != nil {
		return nil, err
	}
	if set.Reaper, err = lambdaenv.New(rfn); err != nil {
		return nil, err
	}
	// SAM names the rule <stack>-<function><event>-<suffix>.
	set.Rule = "arn:aws:events:" + awsCfg.Region + ":000000000000:rule/local-" + id + event
	return set, nil
}

func (s *Set) all() []*lambdaenv.Environment {
	if s.Reaper == nil {
		return s.Consumers
	}
	return append(slices.Clone(s.Consumers), s.Reaper)
}

// Kill sends SIGKILL to every environment's process, without waiting.
func (s *Set) Kill() {
	for _, e := range s.all() {
		e.Kill()
	}
}

// Close stops every environment.
func (s *Set) Close() {
	for _, e := range s.all() {
		_ = e.Close()
	}
}

// ServeLoopback serves h on a free loopback port and returns its URL and a stop func.
func ServeLoopback(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("localfn: listen: %w", err)
	}
	srv := &http.Server{Handler: loopback.Guard(ln, h), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}
