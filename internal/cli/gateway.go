package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/internal/gateway"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// runGateway serves a stand-in for the example's outside HTTP services (example.Caller)
// until Ctrl-C: one server (internal/gateway) at --addr, which applies each
// Idempotency-Key once and records every call. It prints an export line for each of
// the example's service variables on stdout, each call as a JSON line on --log (default
// stderr), and what it saw at the end.
func runGateway(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	flags := newFlags("gateway", stderr)
	addr := flags.String("addr", "127.0.0.1:8090", "loopback address to listen on (port 0: a free one)")
	logPath := flags.String("log", "", "write each call as a JSON line to this `file` (default: stderr)")
	exName := exampleFlag(flags)
	pos, code, ok := parseArgs(flags, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(flags, stderr, "unexpected argument %q", pos[0])
	}
	ex, err := pickExample(*exName, env)
	if err != nil {
		return usageError(flags, stderr, "%v", err)
	}
	log := stderr
	if *logPath != "" {
		f, err := createPrivate(*logPath)
		if err != nil {
			return fail(stderr, "gateway", err)
		}
		defer f.Close() //nolint:errcheck // the calls are written as they come
		log = f
	}
	g, err := gateway.Start(*addr, log)
	if err != nil {
		return fail(stderr, "gateway", err)
	}
	defer g.Close() //nolint:errcheck // stopping: nothing left to lose
	services := example.ServicesOf(ex)
	for _, name := range services {
		fmt.Fprintf(stdout, "export %s=%s\n", name, stack.ShellQuote(g.URL()))
	}
	if len(services) == 0 {
		fmt.Fprintf(stderr, "idemctl gateway: example %s calls no outside service (it is no example.Caller); serving anyway\n", ex.Name())
	}
	fmt.Fprintf(stderr, "idemctl gateway: a stand-in for an outside service at %s (POST with an %s header; its calls: GET %s%s); Ctrl-C stops it\n",
		g.URL(), gateway.KeyHeader, g.URL(), gateway.CallsPath)
	<-ctx.Done()
	fmt.Fprintf(stderr, "idemctl gateway: %s\n", tallyLine(gateway.Count(g.Calls())))
	return exitOK
}

// tallyLine says what a stand-in saw, in one line.
func tallyLine(t gateway.Tally) string {
	return fmt.Sprintf("%d calls for %d keys, %d applied, %d keys called more than once, %d conflicts, %d faults injected",
		t.Calls, t.Keys, t.Applied, len(t.Repeated), t.Conflicts, t.Faults)
}

// standIns starts a stand-in (internal/gateway) for each outside service of ex whose
// variable env leaves empty, and returns env with their URLs, the stand-ins by variable,
// and a func that stops them.
func standIns(ex example.Example, env lookupEnv) (lookupEnv, map[string]*gateway.Server, func(), error) {
	started := map[string]*gateway.Server{}
	stop := func() {
		for _, g := range started {
			_ = g.Close()
		}
	}
	for _, name := range example.ServicesOf(ex) {
		if v, _ := env(name); v != "" {
			continue
		}
		g, err := gateway.Start("", nil)
		if err != nil {
			stop()
			return nil, nil, nil, fmt.Errorf("a stand-in for %s: %w", name, err)
		}
		started[name] = g
	}
	if len(started) == 0 {
		return env, started, stop, nil
	}
	return func(k string) (string, bool) {
		if g, ok := started[k]; ok {
			return g.URL(), true
		}
		return env(k)
	}, started, stop, nil
}

func init() {
	commands = append(commands, command{"gateway", "[--addr 127.0.0.1:8090] [--log FILE] [--example NAME]",
		"serve a stand-in for the example's outside HTTP service (the payouts' payment gateway): it applies each Idempotency-Key once and records every call", runGateway})
}

// createPrivate creates (or truncates) the file at path readable and writable by its
// owner alone: the gateway's log holds every call's key and body.
func createPrivate(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	// An existing file keeps its mode through O_TRUNC: make it the owner's too.
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}
