package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/reaper/reaperapp"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
	"github.com/idemgo/sqs-lambda-consumer/internal/gateway"
	"github.com/idemgo/sqs-lambda-consumer/internal/localfn"
	"github.com/idemgo/sqs-lambda-consumer/internal/runner"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
	"github.com/idemgo/sqs-lambda-consumer/internal/stacksecret"
	"github.com/idemgo/sqs-lambda-consumer/internal/syncw"
)

// runOptions are the flags of `idemctl run`.
type runOptions struct {
	template          string
	queueURL          string
	consumers         int
	batchSize         int
	untilIdle         time.Duration
	visibilityTimeout time.Duration
	functionTimeout   time.Duration
	wait              time.Duration
	reaperEvery       time.Duration
	noReaper          bool
	retryAfter        time.Duration
	stallCommit       time.Duration
	crashAt           string
	crashAfter        int
	inProcess         bool
	bootstraps        string
	trace             *traceFile
}

// runRun plays the Lambda event source mapping for the consumer and runs the reaper on
// the template's schedule. By default each consumer instance, and the reaper, is a
// Lambda execution environment: the function's bootstrap, built for this host, in a
// child process under the Runtime API (internal/lambdaenv). With --in-process, the
// handler value main.go hands to lambda.Start is called inside this process instead.
func runRun(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	var o runOptions
	flags := newFlags("run", stderr)
	flags.StringVar(&o.template, "template", "template.yaml", "the SAM template (batch size, visibility timeout, reaper schedule)")
	flags.StringVar(&o.queueURL, "queue-url", "", "input queue (default $QUEUE_URL)")
	flags.IntVar(&o.consumers, "consumers", 1, "concurrent pollers, like Lambda instances")
	flags.IntVar(&o.batchSize, "batch-size", 0, "records per invocation (default: the template's BatchSize)")
	flags.DurationVar(&o.untilIdle, "until-idle", 0, "exit once the queue has had no visible or in-flight message this long (0: run until Ctrl-C)")
	flags.DurationVar(&o.visibilityTimeout, "visibility-timeout", 0, "visibility timeout of received messages (default: the queue's)")
	flags.DurationVar(&o.functionTimeout, "function-timeout", 0, "deadline of each invocation (default: the template's Timeout)")
	flags.DurationVar(&o.wait, "wait", 2*time.Second, "long-poll wait of each receive")
	flags.DurationVar(&o.reaperEvery, "reaper-every", 0, "reaper period (default: the template's ReaperSchedule)")
	flags.BoolVar(&o.noReaper, "no-reaper", false, "do not run the reaper")
	flags.DurationVar(&o.retryAfter, "retry-after", 0, "make failed records visible again after this long, doubling with each receive (local shortcut; default: the visibility timeout)")
	flags.DurationVar(&o.stallCommit, "stall-commit", 0, "fault injection: hold every completion this long before committing, leases held (for crash tests)")
	flags.StringVar(&o.crashAt, "crash-at", "", "fault injection: kill this process (SIGKILL) right after a phase: "+strings.Join(demo.Phases, ", "))
	flags.IntVar(&o.crashAfter, "crash-after", 1, "with --crash-at: at the phase's Nth occurrence")
	flags.BoolVar(&o.inProcess, "in-process", false, "call the handlers inside this process instead of running the bootstraps as Lambda execution environments (for -race coverage of the handler path)")
	flags.StringVar(&o.bootstraps, "bootstraps", "", "directory with consumer/bootstrap and reaper/bootstrap built for this host (default $IDEMCTL_BOOTSTRAPS; unset: build them from the module in the working directory)")
	o.trace = addTraceFile(flags)
	if code, ok := parseNoArgs(flags, args, stderr); !ok {
		return code
	}
	if o.crashAt != "" && (!slices.Contains(demo.Phases, o.crashAt) || o.crashAfter < 1) {
		return usageError(flags, stderr, "--crash-at must be one of %s, and --crash-after at least 1", strings.Join(demo.Phases, ", "))
	}
	if o.consumers < 1 || o.consumers > 100 {
		return usageError(flags, stderr, "--consumers must be between 1 and 100")
	}
	start := time.Now()
	stats, buildCPU, err := run(ctx, o, stdout, stderr, env)
	if err != nil {
		return fail(stderr, "run", err)
	}
	fmt.Fprintf(stderr, "run: %d invocations, %d records (%d distinct messages), %d deleted, %d left for redelivery, %d locks reaped\n",
		stats.Invocations, stats.Received, stats.Distinct, stats.Succeeded, stats.Failed, stats.Reaped)
	fmt.Fprintf(stderr, "run: %d invocations timed out (whole batch failed)\n", stats.Timeouts)
	// CPU of this process and, with execution environments, of the bootstraps that ended
	// (every environment is stopped by now).
	for _, who := range []struct {
		name string
		id   int
	}{{"process", syscall.RUSAGE_SELF}, {"environments", syscall.RUSAGE_CHILDREN}} {
		var ru syscall.Rusage
		if syscall.Getrusage(who.id, &ru) != nil || stats.Received == 0 {
			continue
		}
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		if who.id == syscall.RUSAGE_CHILDREN {
			if cpu -= buildCPU; cpu <= 0 {
				continue // no environment ran (--in-process)
			}
		}
		rss := fmt.Sprintf(", max RSS %d MiB", ru.Maxrss/1024)
		if who.id == syscall.RUSAGE_CHILDREN {
			rss = "" // the largest child's, which may be the compiler of the build
		}
		fmt.Fprintf(stderr, "run: %s cpu %s = %s per record received%s, %s elapsed\n", who.name,
			cpu.Round(time.Millisecond), (cpu / time.Duration(stats.Received)).Round(time.Microsecond), rss, time.Since(start).Round(time.Millisecond))
	}
	return exitOK
}

// run returns the run's stats and the CPU time of the children that ended before it
// started (the go build of the bootstraps).
func run(ctx context.Context, o runOptions, stdout, stderr io.Writer, env lookupEnv) (runner.Stats, time.Duration, error) {
	stderr = syncw.New(stderr) // progress and the stall notice come from several goroutines
	env, err := o.trace.env(env)
	if err != nil {
		return runner.Stats{}, 0, err
	}
	defer o.trace.close()
	o.queueURL = setting(o.queueURL, env, "QUEUE_URL")
	if o.queueURL == "" {
		return runner.Stats{}, 0, errNotSet("QUEUE_URL", "queue-url")
	}
	consumerCfg, err := consumerapp.FromEnvOf(examples, env)
	if err != nil {
		return runner.Stats{}, 0, fmt.Errorf("%w (run eval \"$(idemctl up)\" first)", err)
	}
	// An outside service of the example whose URL is not set gets a stand-in for this run.
	env, started, stopStandIns, err := standIns(consumerCfg.Example, env)
	if err != nil {
		return runner.Stats{}, 0, err
	}
	defer stopStandIns()
	for name, g := range started {
		fmt.Fprintf(stderr, "run: %s is not set: a stand-in for the service (internal/gateway, as idemctl gateway serves it) answers at %s for this run\n", name, g.URL())
		defer func() {
			fmt.Fprintf(stderr, "run: the stand-in of %s: %s\n", name, tallyLine(gateway.Count(g.Calls())))
		}()
	}
	consumerCfg.Env = env
	var reaperCfg reaperapp.Config
	if !o.noReaper {
		if reaperCfg, err = reaperapp.FromEnv(env); err != nil {
			return runner.Stats{}, 0, err
		}
	}
	tpl, err := o.fromTemplate(stderr, env)
	if err != nil {
		return runner.Stats{}, 0, err
	}
	awsCfg, err := LoadAWSEnv(ctx, env)
	if err != nil {
		return runner.Stats{}, 0, err
	}
	sqsClient := sqs.NewFromConfig(awsCfg)
	// The example's handler, built as the consumer's init builds it: a variable it lacks
	// is named now rather than by every environment's init.
	if _, err := consumerapp.New(consumerCfg, consumerapp.Deps{
		DynamoDB: dynamodb.NewFromConfig(awsCfg), SQS: sqsClient, Logs: io.Discard, Metrics: io.Discard,
	}); err != nil {
		return runner.Stats{}, 0, fmt.Errorf("%w (run eval \"$(idemctl up)\" first)", err)
	}
	logs := syncw.New(stdout)
	cfg := runner.Config{
		SQS: sqsClient, QueueURL: o.queueURL, Region: awsCfg.Region, Consumers: o.consumers, BatchSize: o.batchSize,
		VisibilityTimeout: o.visibilityTimeout, FunctionTimeout: o.functionTimeout, WaitTime: o.wait,
		RetryAfter: o.retryAfter, UntilIdle: o.untilIdle, Progress: stderr, ProgressEvery: 5 * time.Second,
	}
	if !o.noReaper {
		cfg.ReapEvery = o.reaperEvery
	}
	mode := "in this process"
	if o.inProcess {
		err = o.inProcessHandlers(&cfg, consumerCfg, reaperCfg, awsCfg, sqsClient, logs, stderr)
	} else {
		var closeAll func()
		closeAll, err = o.environments(ctx, &cfg, tpl, env, awsCfg, logs, stderr)
		if closeAll != nil {
			defer closeAll()
		}
		mode = "as Lambda execution environments"
	}
	if err != nil {
		return runner.Stats{}, 0, err
	}
	fmt.Fprintf(stderr, "run: %d consumer(s) %s on %s, batch size %d, function timeout %s, reaper every %s\n",
		o.consumers, mode, o.queueURL, o.batchSize, cfg.FunctionTimeout, cfg.ReapEvery)
	buildCPU := childrenCPU()
	stats, err := runner.Run(ctx, cfg)
	return stats, buildCPU, err
}

// inProcessHandlers calls consumerapp's and reaperapp's handlers inside this process,
// with the fault injection of --stall-commit and --crash-at in their DynamoDB client.
func (o *runOptions) inProcessHandlers(cfg *runner.Config, consumerCfg consumerapp.Config, reaperCfg reaperapp.Config,
	awsCfg aws.Config, sqsClient *sqs.Client, logs, stderr io.Writer,
) error {
	if cfg.FunctionTimeout == 0 {
		cfg.FunctionTimeout = 30 * time.Second // the template's, when there is no template
	}
	// The stack's secret, as main loads it: STACK_SECRET locally, else the one
	// STACK_SECRET_ARN names.
	keys, err := stacksecret.Resolve(context.Background(), consumerCfg.Keys, consumerCfg.SecretARN, awsCfg)
	if err != nil {
		return err
	}
	consumerCfg.Keys, reaperCfg.Keys = keys, keys
	tp, tracedCfg, err := o.trace.inProcess(context.Background(), "consumer", awsCfg)
	if err != nil {
		return err
	}
	var ddb persistence.DynamoDBAPI = dynamodb.NewFromConfig(tracedCfg)
	if tp != nil {
		sqsClient = sqs.NewFromConfig(tracedCfg) // the consumer's calls traced, not the poller's
	}
	if o.stallCommit > 0 {
		ddb = demo.StallCommits(ddb, o.stallCommit, stderr)
	}
	if o.crashAt != "" {
		if ddb, err = demo.CrashAt(ddb, o.crashAt, o.crashAfter, func() {
			fmt.Fprintf(stderr, "%s %s\n", demo.CrashMarker, o.crashAt)
			killSelf()
		}); err != nil {
			return err
		}
	}
	cfg.NewHandler = func(i int) (runner.Handler, error) {
		h, err := consumerapp.New(consumerCfg, consumerapp.Deps{
			DynamoDB: ddb, SQS: sqsClient, Logs: logs, Metrics: logs, Owner: fmt.Sprintf("idemctl-run-%d", i), Tracer: tp.TracerProvider(),
		})
		return runner.Handler(h), err
	}
	if !o.noReaper {
		rtp, _, err := o.trace.inProcess(context.Background(), "reaper", awsCfg)
		if err != nil {
			return err
		}
		h, err := reaperapp.New(reaperCfg, reaperapp.Deps{DynamoDB: ddb, SQS: sqsClient, Logs: logs, Metrics: logs, Tracer: rtp.TracerProvider()})
		if err != nil {
			return err
		}
		cfg.Reap = func(ctx context.Context) (reaper.SweepResult, error) {
			return h(ctx, runner.ScheduledEvent("arn:aws:events:"+awsCfg.Region+":000000000000:rule/local-reaper", time.Now()))
		}
	}
	return nil
}

// environments makes each consumer instance and the reaper a Lambda execution
// environment of its bootstrap, configured as the template configures the function.
// With --stall-commit or --crash-at, the functions reach AWS through a demo.FaultProxy
// on loopback; a crash kills every environment and this process (SIGKILL). The
// returned func stops them all.
func (o *runOptions) environments(ctx context.Context, cfg *runner.Config, tpl *stack.Template, env lookupEnv,
	awsCfg aws.Config, logs, stderr io.Writer,
) (func(), error) {
	if tpl == nil {
		return nil, errors.New("the execution environments take the functions' settings from the template: pass --template, or --in-process")
	}
	consumerBin, reaperBin, err := localfn.Bootstraps(ctx, ".", setting(o.bootstraps, env, "IDEMCTL_BOOTSTRAPS"), stderr)
	if err != nil {
		return nil, err
	}
	var set *localfn.Set
	var stops []func()
	closeAll := func() {
		if set != nil {
			set.Close()
		}
		for _, stop := range stops {
			stop()
		}
	}
	endpoint, _ := env("AWS_ENDPOINT_URL")
	if o.stallCommit > 0 || o.crashAt != "" {
		if endpoint == "" {
			return closeAll, errors.New("--stall-commit and --crash-at need a local endpoint (AWS_ENDPOINT_URL)")
		}
		fp, err := demo.NewFaultProxy(endpoint)
		if err != nil {
			return closeAll, err
		}
		fp.Stall, fp.Out = o.stallCommit, stderr
		if o.crashAt != "" {
			fp.CrashPhase, fp.CrashAfter = o.crashAt, o.crashAfter
			fp.Crash = func() {
				if set != nil {
					set.Kill()
				}
				killSelf()
			}
		}
		url, stop, err := localfn.ServeLoopback(fp)
		if err != nil {
			return closeAll, err
		}
		endpoint, stops = url, append(stops, stop)
	}
	if set, err = localfn.NewSet(ctx, tpl, consumerBin, reaperBin, o.consumers, o.functionTimeout, !o.noReaper, env, awsCfg, endpoint, logs); err != nil {
		return closeAll, err
	}
	cfg.FunctionTimeout = set.Timeout
	cfg.NewHandler = func(i int) (runner.Handler, error) { return runner.EnvironmentHandler(set.Consumers[i]), nil }
	if set.Reaper != nil {
		cfg.Reap = runner.EnvironmentReaper(set.Reaper, set.Rule)
	}
	return closeAll, nil
}

// childrenCPU is the user and system CPU time of the children that ended so far.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// killSelf ends this process with SIGKILL, as a crash would, and never returns.
func killSelf() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way; never return into the caller
}

// fromTemplate fills the settings the flags left to the template and returns the
// template (nil when it is not needed and not there: every setting given by flags).
func (o *runOptions) fromTemplate(stderr io.Writer, env lookupEnv) (*stack.Template, error) {
	t, _, err := loadTemplate(o.template, "", env)
	if errors.Is(err, fs.ErrNotExist) && o.inProcess && o.batchSize > 0 && (o.noReaper || o.reaperEvery > 0) {
		return nil, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (run idemctl from the repository root, or pass --template; with --in-process, --batch-size and --reaper-every do without it)", err)
	}
	if err != nil {
		return nil, err
	}
	if o.batchSize == 0 {
		es, err := t.EventSource()
		if err != nil {
			return nil, err
		}
		o.batchSize = min(es.BatchSize, 10) // a receive returns at most 10 messages
		if o.visibilityTimeout == 0 && es.VisibilityTimeout > 0 {
			fmt.Fprintf(stderr, "run: the queue's visibility timeout is %s: failed records come back after that (see --retry-after)\n", es.VisibilityTimeout)
		}
	}
	if !o.noReaper && o.reaperEvery == 0 {
		if o.reaperEvery, err = t.ReaperPeriod(); err != nil {
			return nil, err
		}
	}
	if o.functionTimeout == 0 {
		es, err := t.EventSource()
		if err != nil {
			return nil, err
		}
		fn, err := t.Function(es.FunctionLogicalID)
		if err != nil {
			return nil, err
		}
		o.functionTimeout = fn.Timeout
	}
	return t, nil
}

func init() {
	commands = append(commands,
		command{"run", "[--consumers N] [--until-idle D] [--batch-size N] [--visibility-timeout D] [--retry-after D] ...",
			"consume the input queue as Lambda's event source mapping does, and run the reaper on its schedule", runRun},
		command{"demo", "[--example NAME] [--messages N] [--groups M] [--consumers C] [--seed S] [--no-crash] [--http N]",
			"the whole story on the local endpoint: duplicates, bad input, a killed consumer, then the check of the example's tables", runDemo},
	)
}
