package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// Exit codes of Main.
const (
	exitOK    = 0
	exitFail  = 1 // the command failed
	exitUsage = 2 // bad command line
)

// lookupEnv reads an environment variable: os.LookupEnv in main, a map in tests.
type lookupEnv = func(string) (string, bool)

// runFunc is a command: args are those after the command name. It returns the exit code.
type runFunc func(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int

// command is one idemctl subcommand, as listed by the usage text.
type command struct {
	name    string
	args    string // argument synopsis
	summary string
	run     runFunc
}

// commands are the subcommands, in the order the usage text lists them. A command's
// file holds its runFunc and adds it here from an init function. (Filled by init
// functions because the commands' usage texts look this list up.)
var commands []command

func init() {
	// First in the usage text, whichever file's init runs first.
	commands = append([]command{
		{"up", "[--template template.yaml] [--example NAME] [--stack idem-local] [--param K=V]...",
			"create the template's queues and tables (with the example's block) on the local endpoint; print export lines for eval", runUp},
		{"send", "[--example NAME] [--count N] [--groups M] [--duplicates F] [--from-file bodies.jsonl] [--record FILE] ...",
			"send the example's messages to the input queue (key, group and deduplication id set as a producer should)", runSend},
		{"inspect", "KEY [--scope S] [--json]",
			"show the idempotency record of a key", runInspect},
		{"unlock", "KEY [--scope S] [--reason \"operator unlock\"]",
			"fail a stuck IN_PROGRESS record (retryable), or clear a permanent failure so the next delivery runs again; fenced like the reaper", runUnlock},
		{"redrive", "[--dlq-url URL] [--queue-url URL] [--max N] [--dry-run]",
			"move messages from the dead-letter queue back to the input queue", runRedrive},
	}, commands...)
}

func findCommand(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// Main runs the idemctl command line args (without the program name) and returns the
// process exit code: 0 on success, 1 when the command failed, 2 for a bad command line.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, env func(string) (string, bool)) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 2 {
			fmt.Fprintf(stderr, "idemctl help: one command at a time, not %q\n\n", strings.Join(args[1:], " "))
			usage(stderr)
			return exitUsage
		}
		if len(args) > 1 {
			if c := findCommand(args[1]); c != nil {
				return c.run(ctx, []string{"-h"}, stdout, stdout, env)
			}
			fmt.Fprintf(stderr, "idemctl help: unknown command %q\n\n", args[1])
			usage(stderr)
			return exitUsage
		}
		usage(stdout)
		return exitOK
	}
	c := findCommand(args[0])
	if c == nil {
		fmt.Fprintf(stderr, "idemctl: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return c.run(ctx, args[1:], stdout, stderr, env)
}

func usage(w io.Writer) {
	fmt.Fprint(w, `idemctl runs the idempotent SQS consumer locally and operates it.

usage: idemctl <command> [arguments]

commands:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	_ = tw.Flush()
	fmt.Fprint(w, `
Start a local endpoint (moto_server or LocalStack, see localstack/), point the SDK at it
and create the resources from template.yaml:

  export AWS_ENDPOINT_URL=http://127.0.0.1:4566
  eval "$(idemctl up)"

"idemctl help <command>" describes a command's flags.
`)
}

// newFlags returns the flag set of a command; its usage text names the command.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	c := findCommand(name)
	fs := flag.NewFlagSet("idemctl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		if c != nil {
			fmt.Fprintf(stderr, "usage: idemctl %s %s\n\n%s.\n\nflags:\n", c.name, c.args, capitalize(c.summary))
		}
		fs.PrintDefaults()
	}
	return fs
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// parseArgs parses flags wherever they are among args (so `inspect KEY --json` works)
// and returns the other arguments; everything after "--" is positional. When it returns
// ok false, the command exits with code: 0 after -h, 2 after a bad flag (the flag
// package has printed why).
func parseArgs(fs *flag.FlagSet, args []string) (positional []string, code int, ok bool) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK, false
			}
			return nil, exitUsage, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, exitOK, true
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), exitOK, true
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// parseNoArgs is parseArgs for a command that takes flags only: a positional argument
// is a usage error.
func parseNoArgs(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	pos, code, ok := parseArgs(fs, args)
	if ok && len(pos) > 0 {
		return usageError(fs, stderr, "unexpected argument %q", pos[0]), false
	}
	return code, ok
}

// usageError prints msg and the command's usage, and returns exitUsage.
func usageError(fs *flag.FlagSet, stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "%s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	fs.Usage()
	return exitUsage
}

// exampleError reports an example the command cannot use: one the build does not list
// is a bad command line (usage error); one that lacks the optional interface the command
// needs (*example.MissingError) is a refusal, one line and exitFail, since no flag fixes
// it. suffix follows the reason (a way around it, or nothing).
func exampleError(fs *flag.FlagSet, stderr io.Writer, err error, suffix string) int {
	var missing *example.MissingError
	if errors.As(err, &missing) {
		fmt.Fprintf(stderr, "%s: %v%s\n", fs.Name(), err, suffix)
		return exitFail
	}
	return usageError(fs, stderr, "%v%s", err, suffix)
}

// fail prints err for command name and returns exitFail. An error connecting to the
// endpoint is reported as such.
func fail(stderr io.Writer, name string, err error) int {
	fmt.Fprintf(stderr, "idemctl %s: %v\n", name, stack.Unreachable(err))
	return exitFail
}

// setting returns the flag value when set, else the environment variable, trimmed.
func setting(flagValue string, env lookupEnv, name string) string {
	if flagValue != "" {
		return flagValue
	}
	v, _ := env(name)
	return strings.TrimSpace(v)
}

// errNotSet says how to provide a setting that is neither a flag nor in the environment.
func errNotSet(name, flagName string) error {
	return fmt.Errorf("%s is not set: run eval \"$(idemctl up)\" first, or pass --%s", name, flagName)
}
