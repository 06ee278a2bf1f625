package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/internal/sampleevents"
)

// eventsDir is where `idemctl events` writes an example's sample events when --out is
// not given, relative to the repository root: events/ for the wired default example
// (the one template.yaml carries), functions/consumer/<name>/events for the others.
func eventsDir(ex example.Example) string {
	if ex.Name() == examples[0].Name() {
		return "events"
	}
	return filepath.Join("functions", "consumer", ex.Name(), "events")
}

// runEvents writes the sample Lambda events of an example and their expected outcomes
// (internal/sampleevents), and prints the paths it wrote.
func runEvents(_ context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	flags := newFlags("events", stderr)
	name := flags.String("example", "", "the example whose events to generate (default $"+example.Var+", else the wired default)")
	out := flags.String("out", "", "directory to write to (default events for the wired default example, functions/consumer/<name>/events for another; run from the repository root)")
	seed := flags.Uint64("seed", sampleevents.DefaultSeed, "seed of the ids, amounts and timestamps: the same seed writes the same files")
	if code, ok := parseNoArgs(flags, args, stderr); !ok {
		return code
	}
	ex, _, err := needExample(*name, env, example.TrafficOf)
	if err != nil {
		return exampleError(flags, stderr, err, "")
	}
	dir := *out
	if dir == "" {
		// The default is relative to the repository root: refuse to scatter events
		// directories elsewhere.
		if _, err := os.Stat("go.mod"); err != nil {
			return fail(stderr, "events", errors.New("no go.mod here: run from the repository root, or pass --out DIR"))
		}
		dir = eventsDir(ex)
	}
	files, err := sampleevents.Render(ex, *seed)
	if err != nil {
		return fail(stderr, "events", err)
	}
	paths, err := sampleevents.Write(dir, files)
	if err != nil {
		return fail(stderr, "events", err)
	}
	fmt.Fprintf(stdout, "sample events of example %s, seed %d:\n", ex.Name(), *seed)
	for _, p := range paths {
		fmt.Fprintf(stdout, "  wrote %s\n", p)
	}
	return exitOK
}

func init() {
	commands = append(commands, command{"events", "[--example NAME] [--out DIR] [--seed N]",
		"write an example's sample Lambda events (SQS batches, the reaper's schedule) and their expected outcomes", runEvents})
}
