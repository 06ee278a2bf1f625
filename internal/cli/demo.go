package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
	"github.com/idemgo/sqs-lambda-consumer/internal/funcurl"
	"github.com/idemgo/sqs-lambda-consumer/internal/localfn"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
	"github.com/idemgo/sqs-lambda-consumer/internal/syncw"
)

// runDemo is `make demo`: up, the traffic, the crash, the consumers and the reaper, then
// the summary and the check of the example's tables. It exits 1 when the check fails.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	flags := newFlags("demo", stderr)
	template := flags.String("template", "template.yaml", "the SAM template whose queues and tables to create")
	exName := exampleFlag(flags)
	count := flags.Int("messages", 2000, "distinct valid messages to send")
	flags.IntVar(count, "payments", 2000, "the same as --messages")
	accounts := flags.Int("groups", 50, "FIFO message groups (the ledger's accounts)")
	flags.IntVar(accounts, "accounts", 50, "the same as --groups")
	consumers := flags.Int("consumers", 4, "local consumer instances")
	seed := flags.Uint64("seed", uint64(time.Now().UnixNano()), "random seed of the traffic")
	noCrash := flags.Bool("no-crash", false, "do not kill a consumer mid-batch")
	kills := flags.Int("kills", 0, "also run consumer processes beside the local ones and kill this many (SIGKILL) at random moments")
	maxUp := flags.Duration("kill-within", 4*time.Second, "with --kills: each process is killed after a random time up to this")
	logPath := flags.String("logs", "", "file for the consumers' JSON logs (default: a new file in the temp directory)")
	self := flags.String("idemctl", "", "idemctl binary to run as the consumer that is killed (default: this program)")
	phases := flags.Bool("crash-phases", true, "with --kills: every other consumer process kills itself at a chosen phase ("+strings.Join(demo.Phases, ", ")+") instead of at a random moment")
	storm := flags.Bool("storm", false, "the duplicate storm: every message delivered 1 to --max-deliveries times, of every kind (same and new dedup id, concurrent, after completion, after the TTL)")
	maxDeliveries := flags.Int("max-deliveries", 5, "with --storm: most deliveries of one message")
	mode := flags.String("mode", idem.ModeLease.String(), "how the consumers commit a first delivery: "+idem.ModeLease.String()+" or "+idem.ModeSingleTransaction.String()+" (IDEMPOTENCY_MODE)")
	inProcess := flags.Bool("in-process", false, "call the handlers inside this process instead of running the bootstraps as Lambda execution environments")
	bootDir := flags.String("bootstraps", "", "directory with consumer/bootstrap, reaper/bootstrap and ingress/bootstrap built for this host (default $IDEMCTL_BOOTSTRAPS; unset: build them)")
	httpRequests := flags.Int("http", -1, "the HTTP phase: this many of the messages go through the ingress (idemctl serve) over real HTTP, sent by clients that retry, give up early, race and reuse keys with other bodies (default: a tenth of --messages, at least 10; 0: no HTTP phase; none with --storm)")
	trace := addTraceFile(flags)
	pos, code, ok := parseArgs(flags, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(flags, stderr, "unexpected argument %q", pos[0])
	}
	if _, _, err := needExample(*exName, env, example.TrafficOf); err != nil {
		return exampleError(flags, stderr, err, "")
	}
	if *kills < 0 || *kills > 10_000 || *maxUp < 200*time.Millisecond {
		return usageError(flags, stderr, "want 0 <= --kills <= 10000 and --kill-within >= 200ms")
	}
	if *maxDeliveries < 1 || *maxDeliveries > 20 {
		return usageError(flags, stderr, "want 1 <= --max-deliveries <= 20")
	}
	if *count < 10 || *count > 100_000 || *accounts < 1 || *accounts > *count || *consumers < 1 || *consumers > 32 {
		return usageError(flags, stderr, "want 10 <= --messages <= 100000, 1 <= --groups <= messages, 1 <= --consumers <= 32")
	}
	if *httpRequests < -1 || *httpRequests > *count/2 {
		return usageError(flags, stderr, "want 0 <= --http <= messages/2")
	}
	if *httpRequests == -1 {
		*httpRequests = min(max(10, *count/10), *count/2)
	}
	if *storm {
		*httpRequests = 0
	}
	m, err := idem.ParseMode(*mode)
	if err != nil {
		return usageError(flags, stderr, "--mode: %v", err)
	}
	if ex, _ := pickExample(*exName, env); ex != nil {
		if err := example.CheckMode(ex, m); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", flags.Name(), err)
			return exitFail
		}
	}
	if v, _ := env("AWS_ENDPOINT_URL"); strings.TrimSpace(v) == "" {
		return fail(stderr, "demo", errors.New("AWS_ENDPOINT_URL is not set: the demo runs on a local endpoint only (make demo starts one)"))
	}
	ok, err = demoRun(ctx, demoOptions{
		template: *template, example: *exName, messages: *count, accounts: *accounts, consumers: *consumers,
		seed: *seed, crash: !*noCrash, logPath: *logPath, self: *self, kills: *kills, maxUp: *maxUp,
		phases: *phases, storm: *storm, maxDeliveries: *maxDeliveries, mode: *mode, inProcess: *inProcess, bootstraps: *bootDir,
		http: *httpRequests, trace: trace,
	}, stdout, stderr, env)
	if err != nil {
		return fail(stderr, "demo", err)
	}
	if !ok {
		return exitFail
	}
	return exitOK
}

type demoOptions struct {
	template, example             string
	messages, accounts, consumers int
	seed                          uint64
	crash                         bool
	logPath                       string
	self                          string
	kills                         int
	maxUp                         time.Duration
	phases                        bool
	storm                         bool
	maxDeliveries                 int
	mode                          string
	inProcess                     bool
	bootstraps                    string
	http                          int // messages through the ingress (0: no HTTP phase)
	trace                         *traceFile
}

func demoRun(ctx context.Context, o demoOptions, stdout, stderr io.Writer, env lookupEnv) (bool, error) {
	// The consumers' progress, the crash child and the chaos loop all report on stderr,
	// from their own goroutines: one lock for all of them.
	stderr = syncw.New(stderr)
	t, ex, err := loadTemplate(o.template, o.example, env)
	if errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("%w (run from the repository root, or pass --template)", err)
	}
	if err != nil {
		return false, err
	}
	awsCfg, err := LoadAWSEnv(ctx, env)
	if err != nil {
		return false, err
	}
	sqsClient, ddb := sqs.NewFromConfig(awsCfg), dynamodb.NewFromConfig(awsCfg)
	// A stack of its own per demo, so a reused endpoint never mixes two runs.
	stackName := fmt.Sprintf("demo%d", time.Now().Unix()%1_000_000_000)
	e, err := stack.Up(ctx, t, stack.Clients{SQS: sqsClient, DynamoDB: ddb, SecretsManager: secretsmanager.NewFromConfig(awsCfg), Region: awsCfg.Region}, stackName, stderr)
	if err != nil {
		return false, err
	}
	vars := map[string]string{}
	for _, v := range e.Vars {
		vars[v.Name] = v.Value
	}
	vars["IDEMPOTENCY_MODE"] = o.mode
	if _, err := o.trace.env(env); err != nil {
		return false, err
	}
	for _, kv := range o.trace.vars() { // the functions' execution environments and the children trace
		name, value, _ := strings.Cut(kv, "=")
		vars[name] = value
	}
	// The example's outside services: a stand-in for each (internal/gateway), whose calls
	// the demo counts.
	services := example.ServicesOf(ex)
	gws, stopStandIns, err := startStandIns(services, make([]string, len(services)), nil)
	if err != nil {
		return false, err
	}
	defer stopStandIns() // the demo is over: their calls were counted
	for _, name := range services {
		vars[name] = gws[name].URL()
		fmt.Fprintf(stderr, "demo: %s: a stand-in for the service (internal/gateway) at %s\n", name, vars[name])
	}
	logPath := o.logPath
	if logPath == "" {
		logPath = filepath.Join(os.TempDir(), "idemctl-"+stackName+".log")
	}
	logs, err := os.Create(logPath)
	if err != nil {
		return false, fmt.Errorf("consumer log file: %w", err)
	}
	defer func() { _ = logs.Close() }() // the summary goes to stdout; the log is a convenience
	fmt.Fprintf(stderr, "demo: stack %s ready for example %s; consumer logs go to %s\n", stackName, ex.Name(), logPath)

	logW := syncw.New(logs)
	// The example's outbound queues: the stack's queues but the input queue (QUEUE_URL)
	// and its dead-letter queue (DLQ_URL), the template's own.
	var outbound []string
	for _, r := range e.Resources {
		if r.Type == stack.TypeQueue && r.URL != vars[stack.QueueURLVar] && r.URL != vars["DLQ_URL"] {
			outbound = append(outbound, r.URL)
		}
	}
	opts := demo.Options{
		Env: vars, Examples: examples, Outbound: outbound, SQS: sqsClient, DynamoDB: ddb, Messages: o.messages, Groups: o.accounts,
		Consumers: o.consumers, Seed: o.seed, Out: stderr, Logs: logW,
		Storm: o.storm, MaxDeliveries: o.maxDeliveries,
	}
	if o.http > 0 {
		// The ingress, as `idemctl serve` runs it, on the demo's stack.
		lookup := func(k string) (string, bool) {
			if v, ok := vars[k]; ok {
				return v, true
			}
			return env(k)
		}
		metrics := &demo.IngressMetrics{}
		url, stop, err := serveIngress(ctx, serveOptions{template: o.template, addr: "127.0.0.1:0", instances: 4, inProcess: o.inProcess,
			bootstraps: o.bootstraps}, io.MultiWriter(logW, metrics), stderr, lookup)
		if err != nil {
			return false, fmt.Errorf("the ingress: %w", err)
		}
		defer stop()
		how := "as Lambda execution environments of its bootstrap"
		if o.inProcess {
			how = "in this process"
		}
		fmt.Fprintf(stderr, "demo: the ingress runs %s behind %s\n", how, url)
		// The demo's clients do not sign: the ingress takes them for the local caller of
		// the endpoint's credentials, and keeps and sends their requests under its keys.
		consumerKey, err := localCallerKey(ctx, awsCfg, lookup)
		if err != nil {
			return false, err
		}
		opts.HTTP = &demo.HTTPOptions{URL: url, Requests: o.http, Sent: metrics.Sent, ConsumerKey: consumerKey}
	}
	// The execution mode of the children: the same bootstraps, or --in-process.
	mode := []string{"--in-process"}
	if !o.inProcess {
		consumerBin, reaperBin, err := localfn.Bootstraps(ctx, ".", setting(o.bootstraps, env, "IDEMCTL_BOOTSTRAPS"), stderr)
		if err != nil {
			return false, err
		}
		mode = []string{"--bootstraps", filepath.Dir(filepath.Dir(consumerBin))}
		if o.storm {
			// The storm's after-TTL phase moves the consumers' clock, which only a handler
			// in this process can be given.
			fmt.Fprintln(stderr, "demo: --storm runs its own consumers in this process (its after-TTL phase moves their clock); the killed children run the bootstraps")
		} else {
			opts.Functions = localfn.DemoFunctions(ctx, t, consumerBin, reaperBin, vars, env, awsCfg)
			fmt.Fprintf(stderr, "demo: the consumers and the reaper run as Lambda execution environments of the bootstraps in %s\n", mode[1])
		}
	}
	exe := o.self
	if exe == "" && (o.crash || o.kills > 0) {
		if exe, err = os.Executable(); err != nil {
			return false, fmt.Errorf("find idemctl's own binary for the consumer children: %w", err)
		}
	}
	childEnv := append(append(e.Environ(), "LEASE_GRACE="+demo.LeaseGrace.String(), "IDEMPOTENCY_MODE="+o.mode), o.trace.vars()...)
	for _, name := range example.ServicesOf(ex) {
		childEnv = append(childEnv, name+"="+vars[name])
	}
	if ep, ok := env("AWS_ENDPOINT_URL"); ok {
		childEnv = append(childEnv, "AWS_ENDPOINT_URL="+ep)
	}
	if o.kills > 0 {
		rng := rand.New(rand.NewPCG(o.seed, o.seed+1))
		args := append([]string{"run", "--template", o.template, "--consumers", "2", "--wait", "1s", "--function-timeout", "3s",
			"--visibility-timeout", "8s", "--reaper-every", "1s", "--retry-after", "1s"}, mode...)
		var phases []string
		if o.phases {
			phases = demo.PhasesOf(o.mode, len(example.ServicesOf(ex)) > 0)
		}
		opts.Chaos = func(ctx context.Context, logs demo.ChildLog) (demo.ChaosResult, error) {
			return demo.Chaos(ctx, demo.ChaosConfig{
				Exe: exe, Args: args, Env: append(childEnv, "LEASE_GRACE=1s"), Kills: o.kills,
				MinUp: 200 * time.Millisecond, MaxUp: o.maxUp, Phases: phases, Out: stderr, Logs: logs, Rand: rng,
			})
		}
	}
	if o.crash {
		opts.Crash = demo.ChildCrasher(exe, append([]string{
			"run", "--template", o.template, "--consumers", "1", "--no-reaper", "--wait", "1s",
			"--function-timeout", demo.FunctionTimeout.String(), "--visibility-timeout", demo.CrashVisibility.String(),
			"--stall-commit", "2m",
		}, mode...), childEnv, stderr)
	}
	s, err := demo.Run(ctx, opts)
	if err != nil {
		return false, err
	}
	s.Print(stdout)
	traceHint(stdout, o.trace)
	return s.OK, nil
}

// localCallerKey is the key the consumer sees for an unsigned request to a local ingress
// (serveIngress): the client's key under the namespace of the local caller of the
// credentials in awsCfg, in the key scope INGRESS_KEY_SCOPE.
func localCallerKey(ctx context.Context, awsCfg aws.Config, lookup lookupEnv) (func(string) string, error) {
	creds, err := awsCfg.Credentials.Retrieve(ctx)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	scope := setting("", lookup, "INGRESS_KEY_SCOPE")
	if scope == "" {
		scope = ingressapp.ScopeCaller
	}
	ns, ok := ingressapp.Namespace(scope, funcurl.LocalCaller(creds.AccessKeyID))
	if !ok {
		return nil, fmt.Errorf("INGRESS_KEY_SCOPE %q: the local caller has no namespace in it", scope)
	}
	return func(key string) string { return idem.CallerKey(ns, key) }, nil
}
