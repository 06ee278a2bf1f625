// Command mutation runs the mutation score of the library and the ingress (make
// mutation; internal/mutation and RELIABILITY.md, "Mutation score").
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/mutation"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	var (
		dir            = flag.String("dir", ".", "the module's root")
		pkgs           = flag.String("pkgs", "./idem/ ./functions/ingress/ingressapp/", "target packages (go list patterns, space- or comma-separated)")
		files          = flag.String("files", "", "keep the target files whose path from the root matches this regexp (default: all)")
		ops            = flag.String("ops", "all", "operators, comma-separated: "+opNames())
		killers        = flag.String("killers", "sim,own,functions", "killers, in the order they run (sim, own, functions), comma-separated")
		simSchedules   = flag.Int("sim-schedules", 2000, "the sim killer's budget: schedules from seed 1")
		timeoutFactor  = flag.Float64("timeout-factor", 3, "a killer's timeout for a mutant: this times its baseline")
		minTimeout     = flag.Duration("min-timeout", 2*time.Minute, "the least timeout of a killer for a mutant")
		workers        = flag.Int("workers", 1, "mutants run at once")
		maxMutants     = flag.Int("max", 0, "run at most this many pending mutants now (0: all)")
		out            = flag.String("out", ".aws-sam/mutation", "the folder of mutation.json and mutation.md")
		fresh          = flag.Bool("fresh", false, "ignore the earlier report's results")
		retrySurvivors = flag.Bool("retry-survivors", false, "run the earlier report's survivors again (after a new test)")
		onlySurvivors  = flag.Bool("only-survivors", false, "with -retry-survivors: run nothing else (not the pending mutants)")
		coverage       = flag.Bool("coverage", true, "record each killer's coverage in its baseline; run a mutant only through the killers that run its line")
		perTest        = flag.Bool("per-test", true, "with -coverage: record each test's coverage (run alone) of the killers that run whole packages; run a mutant only through the tests that run its line")
		dryRun         = flag.Bool("dry-run", false, "list the mutants in the report and run nothing")
		schemata       = flag.Bool("schemata", true, "compile each target once with every mutant behind a switch, build each killer's test binaries once, and run them per mutant (false: build each mutant with go test -overlay, once per killer)")
		progress       = flag.Duration("progress", 10*time.Second, "a progress line this often (0: none)")
	)
	flag.Parse()
	operators, err := mutation.ParseOperators(*ops)
	if err != nil {
		return err
	}
	ks, err := mutation.SelectKillers(*killers, *simSchedules)
	if err != nil {
		return err
	}
	c := mutation.Config{
		Dir: *dir, Packages: strings.FieldsFunc(*pkgs, func(r rune) bool { return r == ',' || r == ' ' }),
		Operators: operators, Killers: ks, TimeoutFactor: *timeoutFactor, MinTimeout: *minTimeout,
		Workers: *workers, Max: *maxMutants, Out: *out, Fresh: *fresh, RetrySurvivors: *retrySurvivors, OnlySurvivors: *onlySurvivors,
		Coverage: *coverage, PerTest: *perTest, DryRun: *dryRun, Schemata: *schemata, Log: os.Stderr, Progress: *progress,
	}
	if *files != "" {
		if c.Files, err = regexp.Compile(*files); err != nil {
			return fmt.Errorf("mutation: -files: %w", err)
		}
	}
	// One moto for every killer that needs AWS: the one AWS_ENDPOINT_URL names (make
	// mutation starts it), else one started here. AWSTEST_OWN_MOTO=0 keeps the packages
	// that would start their own (awstest.MainOwn) on it.
	c.AWSEnv = []string{awstest.OwnMotoVar + "=0"}
	if os.Getenv("AWS_ENDPOINT_URL") == "" && mutation.NeedAWS(ks) && !*dryRun {
		ep, cmd, err := awstest.StartMoto()
		if err != nil {
			return fmt.Errorf("mutation: %w", err)
		}
		defer awstest.StopMoto(cmd)
		fmt.Fprintf(os.Stderr, "mutation: moto on %s\n", ep)
		c.AWSEnv = append(c.AWSEnv, "AWS_ENDPOINT_URL="+ep)
	}
	// With schemata and more than one worker, a moto for each worker past the first: moto
	// applies DynamoDB requests one at a time, and the tests of two mutants would queue
	// behind each other in one.
	if *schemata && *workers > 1 && mutation.NeedAWS(ks) && !*dryRun {
		c.WorkerAWSEnv = [][]string{c.AWSEnv}
		for range *workers - 1 {
			ep, cmd, err := awstest.StartMoto()
			if err != nil {
				return fmt.Errorf("mutation: %w", err)
			}
			defer awstest.StopMoto(cmd)
			fmt.Fprintf(os.Stderr, "mutation: moto on %s\n", ep)
			c.WorkerAWSEnv = append(c.WorkerAWSEnv, []string{awstest.OwnMotoVar + "=0", "AWS_ENDPOINT_URL=" + ep})
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	rep, err := mutation.Run(ctx, c)
	if rep != nil {
		s := mutation.Summarize(rep.Mutants)
		fmt.Fprintf(os.Stderr, "mutation: score %.1f%%: %d mutants, %d killed (%d timed out), %d survived (%d not covered), %d not compiled, %d skipped (logging), %d pending; %s; report in %s/mutation.md and mutation.json\n",
			s.Score, s.Total, s.Killed, s.TimedOut, s.Survived, s.NotCovered, s.NotCompiled, s.Skipped, s.Pending, time.Since(start).Round(time.Second), c.Out)
	}
	return err
}

func opNames() string {
	names := make([]string, len(mutation.Operators))
	for i, o := range mutation.Operators {
		names[i] = string(o)
	}
	return strings.Join(names, ", ")
}
