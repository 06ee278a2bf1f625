package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/internal/gateway"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// runGateway serves a stand-in for each of the example's outside HTTP services
// (example.Caller) until Ctrl-C: one server (internal/gateway) per service, the first at
// --addr and the next ones on the ports after it, each applying each Idempotency-Key once
// and counting its own calls. It prints an export line for each service variable on
// stdout, each call as a JSON line on --log (default stderr) with the service it went to,
// and what each stand-in saw at the end.
func runGateway(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	flags := newFlags("gateway", stderr)
	addr := flags.String("addr", "127.0.0.1:8090", "loopback address of the first service's stand-in; the next ones listen on the ports after it (port 0: free ones)")
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
	services := example.ServicesOf(ex)
	if len(services) == 0 {
		fmt.Fprintf(stderr, "idemctl gateway: example %s calls no outside service (it is no example.Caller); serving one stand-in anyway\n", ex.Name())
		services = []string{""}
	}
	addrs, err := gatewayAddrs(*addr, len(services))
	if err != nil {
		return usageError(flags, stderr, "--addr: %v", err)
	}
	return serveGateway(ctx, services, addrs, log, stdout, stderr)
}

// serveGateway serves a stand-in for each of services (variable names; "" for an
// unnamed one), the i-th at addrs[i], until ctx ends: runGateway without its flags.
func serveGateway(ctx context.Context, services, addrs []string, log, stdout, stderr io.Writer) int {
	started, stop, err := startStandIns(services, addrs, log)
	if err != nil {
		return fail(stderr, "gateway", err)
	}
	defer stop()
	for _, name := range services {
		g := started[name]
		if name != "" {
			fmt.Fprintf(stdout, "export %s=%s\n", name, stack.ShellQuote(g.URL()))
		}
		fmt.Fprintf(stderr, "idemctl gateway: a stand-in for %s at %s (POST with an %s header; its calls: GET %s%s)\n",
			serviceName(name), g.URL(), gateway.KeyHeader, g.URL(), gateway.CallsPath)
	}
	fmt.Fprintln(stderr, "idemctl gateway: Ctrl-C stops it")
	<-ctx.Done()
	for _, name := range services {
		fmt.Fprintf(stderr, "idemctl gateway: %s: %s\n", serviceName(name), tallyLine(gateway.Count(started[name].Calls())))
	}
	return exitOK
}

func serviceName(variable string) string {
	if variable == "" {
		return "an outside service"
	}
	return variable
}

// gatewayAddrs returns n loopback addresses from addr (host:port): addr, then the ports
// after it on the same host; with port 0, n times addr (each a free port).
func gatewayAddrs(addr string, n int) ([]string, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port+n-1 > 65535 {
		return nil, fmt.Errorf("%q: want a port from 0 to %d for %d stand-ins", addr, 65536-n, n)
	}
	addrs := make([]string, n)
	for i := range addrs {
		p := port
		if port != 0 {
			p += i
		}
		addrs[i] = net.JoinHostPort(host, strconv.Itoa(p))
	}
	return addrs, nil
}

// tallyLine says what a stand-in saw, in one line.
func tallyLine(t gateway.Tally) string {
	return fmt.Sprintf("%d calls for %d keys, %d applied, %d keys called more than once, %d conflicts, %d faults injected",
		t.Calls, t.Keys, t.Applied, len(t.Repeated), t.Conflicts, t.Faults)
}

// startStandIns starts a stand-in (internal/gateway) for each service of names, the i-th
// at addrs[i] ("": a free port), logging to log (nil: nowhere), and returns them by
// name and a func that stops them. On an error none is left running.
func startStandIns(names, addrs []string, log io.Writer) (map[string]*gateway.Server, func(), error) {
	started := map[string]*gateway.Server{}
	stop := func() {
		for _, g := range started {
			_ = g.Close()
		}
	}
	for i, name := range names {
		g, err := gateway.StartFor(name, addrs[i], log)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("a stand-in for %s: %w", serviceName(name), err)
		}
		started[name] = g
	}
	return started, stop, nil
}

// standIns starts a stand-in (internal/gateway) for each outside service of ex whose
// variable env leaves empty, and returns env with their URLs, the stand-ins by variable,
// and a func that stops them.
func standIns(ex example.Example, env lookupEnv) (lookupEnv, map[string]*gateway.Server, func(), error) {
	var names []string
	for _, name := range example.ServicesOf(ex) {
		if v, _ := env(name); v == "" {
			names = append(names, name)
		}
	}
	started, stop, err := startStandIns(names, make([]string, len(names)), nil)
	if err != nil {
		return nil, nil, nil, err
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
		"serve a stand-in for each of the example's outside HTTP services (the payouts' payment gateway), each on its own port: it applies each Idempotency-Key once and counts its own calls", runGateway})
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
