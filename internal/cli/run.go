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

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/reaper/reaperapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
	"github.com/idemgo/sqs-lambda-consumer/internal/runner"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
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
}

// runRun plays the Lambda event source mapping for the consumer, with the handler value
// main.go hands to lambda.Start, and runs the reaper on the template's schedule.
func runRun(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	var o runOptions
	flags := newFlags("run", stderr)
	flags.StringVar(&o.template, "template", "template.yaml", "the SAM template (batch size, visibility timeout, reaper schedule)")
	flags.StringVar(&o.queueURL, "queue-url", "", "input queue (default $QUEUE_URL)")
	flags.IntVar(&o.consumers, "consumers", 1, "concurrent pollers, like Lambda instances")
	flags.IntVar(&o.batchSize, "batch-size", 0, "records per invocation (default: the template's BatchSize)")
	flags.DurationVar(&o.untilIdle, "until-idle", 0, "exit once the queue has had no visible or in-flight message this long (0: run until Ctrl-C)")
	flags.DurationVar(&o.visibilityTimeout, "visibility-timeout", 0, "visibility timeout of received messages (default: the queue's)")
	flags.DurationVar(&o.functionTimeout, "function-timeout", 30*time.Second, "deadline of each invocation (the template's Timeout)")
	flags.DurationVar(&o.wait, "wait", 2*time.Second, "long-poll wait of each receive")
	flags.DurationVar(&o.reaperEvery, "reaper-every", 0, "reaper period (default: the template's ReaperSchedule)")
	flags.BoolVar(&o.noReaper, "no-reaper", false, "do not run the reaper")
	flags.DurationVar(&o.retryAfter, "retry-after", 0, "make failed records visible again after this long, doubling with each receive (local shortcut; default: the visibility timeout)")
	flags.DurationVar(&o.stallCommit, "stall-commit", 0, "fault injection: hold every completion this long before committing, leases held (for crash tests)")
	flags.StringVar(&o.crashAt, "crash-at", "", "fault injection: kill this process (SIGKILL) right after a phase: "+strings.Join(demo.Phases, ", "))
	flags.IntVar(&o.crashAfter, "crash-after", 1, "with --crash-at: at the phase's Nth occurrence")
	pos, code, ok := parseArgs(flags, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(flags, stderr, "unexpected argument %q", pos[0])
	}
	if o.crashAt != "" && (!slices.Contains(demo.Phases, o.crashAt) || o.crashAfter < 1) {
		return usageError(flags, stderr, "--crash-at must be one of %s, and --crash-after at least 1", strings.Join(demo.Phases, ", "))
	}
	if o.consumers < 1 || o.consumers > 100 {
		return usageError(flags, stderr, "--consumers must be between 1 and 100")
	}
	start := time.Now()
	stats, err := run(ctx, o, stdout, stderr, env)
	if err != nil {
		return fail(stderr, "run", err)
	}
	fmt.Fprintf(stderr, "run: %d invocations, %d records (%d distinct messages), %d deleted, %d left for redelivery, %d locks reaped\n",
		stats.Invocations, stats.Received, stats.Distinct, stats.Succeeded, stats.Failed, stats.Reaped)
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil && stats.Received > 0 {
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		fmt.Fprintf(stderr, "run: process cpu %s user + %s sys = %s per record received, max RSS %d MiB, %s elapsed\n",
			time.Duration(ru.Utime.Nano()).Round(time.Millisecond), time.Duration(ru.Stime.Nano()).Round(time.Millisecond),
			(cpu / time.Duration(stats.Received)).Round(time.Microsecond), ru.Maxrss/1024, time.Since(start).Round(time.Millisecond))
	}
	return exitOK
}

func run(ctx context.Context, o runOptions, stdout, stderr io.Writer, env lookupEnv) (runner.Stats, error) {
	stderr = syncw.New(stderr) // progress and the stall notice come from several goroutines
	o.queueURL = setting(o.queueURL, env, "QUEUE_URL")
	if o.queueURL == "" {
		return runner.Stats{}, errNotSet("QUEUE_URL", "queue-url")
	}
	consumerCfg, err := consumerapp.FromEnv(env)
	if err != nil {
		return runner.Stats{}, fmt.Errorf("%w (run eval \"$(idemctl up)\" first)", err)
	}
	var reaperCfg reaperapp.Config
	if !o.noReaper {
		if reaperCfg, err = reaperapp.FromEnv(env); err != nil {
			return runner.Stats{}, err
		}
	}
	if err := o.fromTemplate(stderr); err != nil {
		return runner.Stats{}, err
	}
	awsCfg, err := LoadAWSEnv(ctx, env)
	if err != nil {
		return runner.Stats{}, err
	}
	sqsClient := sqs.NewFromConfig(awsCfg)
	var ddb idem.DynamoDBAPI = dynamodb.NewFromConfig(awsCfg)
	if o.stallCommit > 0 {
		ddb = demo.StallCommits(ddb, o.stallCommit, stderr)
	}
	if o.crashAt != "" {
		if ddb, err = demo.CrashAt(ddb, o.crashAt, o.crashAfter, func() {
			fmt.Fprintf(stderr, "%s %s\n", demo.CrashMarker, o.crashAt)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way; never return into the caller
		}); err != nil {
			return runner.Stats{}, err
		}
	}
	logs := syncw.New(stdout)
	cfg := runner.Config{
		SQS: sqsClient, QueueURL: o.queueURL, Region: awsCfg.Region, Consumers: o.consumers, BatchSize: o.batchSize,
		VisibilityTimeout: o.visibilityTimeout, FunctionTimeout: o.functionTimeout, WaitTime: o.wait,
		RetryAfter: o.retryAfter, UntilIdle: o.untilIdle, Progress: stderr, ProgressEvery: 5 * time.Second,
		NewHandler: func(i int) (runner.Handler, error) {
			h, err := consumerapp.New(consumerCfg, consumerapp.Deps{
				DynamoDB: ddb, SQS: sqsClient, Logs: logs, Metrics: logs, Owner: fmt.Sprintf("idemctl-run-%d", i),
			})
			return runner.Handler(h), err
		},
	}
	if !o.noReaper {
		h, err := reaperapp.New(reaperCfg, reaperapp.Deps{DynamoDB: ddb, SQS: sqsClient, Logs: logs, Metrics: logs})
		if err != nil {
			return runner.Stats{}, err
		}
		cfg.Reap = func(ctx context.Context) (idem.SweepResult, error) {
			return h(ctx, events.EventBridgeEvent{DetailType: "Scheduled Event", Source: "aws.events", Time: time.Now().UTC()})
		}
		cfg.ReapEvery = o.reaperEvery
	}
	fmt.Fprintf(stderr, "run: %d consumer(s) on %s, batch size %d, function timeout %s, reaper every %s\n",
		o.consumers, o.queueURL, o.batchSize, o.functionTimeout, cfg.ReapEvery)
	return runner.Run(ctx, cfg)
}

// fromTemplate fills the settings the flags left to the template.
func (o *runOptions) fromTemplate(stderr io.Writer) error {
	if o.batchSize > 0 && (o.noReaper || o.reaperEvery > 0) {
		return nil
	}
	t, err := stack.Load(o.template)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (run idemctl from the repository root, or pass --template, or set --batch-size and --reaper-every)", err)
	}
	if err != nil {
		return err
	}
	if o.batchSize == 0 {
		es, err := t.EventSource()
		if err != nil {
			return err
		}
		o.batchSize = min(es.BatchSize, 10) // a receive returns at most 10 messages
		if o.visibilityTimeout == 0 && es.VisibilityTimeout > 0 {
			fmt.Fprintf(stderr, "run: the queue's visibility timeout is %s: failed records come back after that (see --retry-after)\n", es.VisibilityTimeout)
		}
	}
	if !o.noReaper && o.reaperEvery == 0 {
		if o.reaperEvery, err = t.ReaperPeriod(); err != nil {
			return err
		}
	}
	return nil
}

func init() {
	commands = append(commands,
		command{"run", "[--consumers N] [--until-idle D] [--batch-size N] [--visibility-timeout D] [--retry-after D] ...",
			"consume the input queue as Lambda's event source mapping does, and run the reaper on its schedule", runRun},
		command{"demo", "[--payments N] [--accounts M] [--consumers C] [--seed S] [--no-crash]",
			"the whole story on the local endpoint: duplicates, bad input, a killed consumer, then the ledger check", runDemo},
	)
}
