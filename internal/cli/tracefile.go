package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"github.com/idemgo/sqs-lambda-consumer/internal/tracing"
)

// traceFile is the --trace-file of `idemctl run`, `serve` and `demo`: the functions'
// spans appended to a file as JSON lines (internal/tracing, TRACING=file), for
// `idemctl trace`. The functions' execution environments are told it through their
// variables; handlers in this process get a provider of their own.
type traceFile struct {
	path      string
	providers []*tracing.Provider
}

func addTraceFile(flags *flag.FlagSet) *traceFile {
	t := &traceFile{}
	flags.StringVar(&t.path, "trace-file", "", "append the functions' spans to this `file` as JSON lines, for idemctl trace (TRACING=file)")
	return t
}

// env is env with the functions' tracing variables set to write to the file (env itself
// without a file).
func (t *traceFile) env(env lookupEnv) (lookupEnv, error) {
	if t == nil || t.path == "" {
		return env, nil
	}
	abs, err := filepath.Abs(t.path) // the environments run in other directories
	if err != nil {
		return nil, fmt.Errorf("--trace-file: %w", err)
	}
	t.path = abs
	return func(name string) (string, bool) {
		switch name {
		case tracing.VarExport:
			return tracing.ExportFile, true
		case tracing.VarFile:
			return abs, true
		}
		return env(name)
	}, nil
}

// vars are the tracing variables for a child's environment (nil without a file).
func (t *traceFile) vars() []string {
	if t == nil || t.path == "" {
		return nil
	}
	return []string{tracing.VarExport + "=" + tracing.ExportFile, tracing.VarFile + "=" + t.path}
}

// inProcess returns the provider of a handler of service called in this process and
// cfg with the SDK's calls traced by it: the provider nil and cfg itself without a file.
func (t *traceFile) inProcess(ctx context.Context, service string, cfg aws.Config) (*tracing.Provider, aws.Config, error) {
	if t == nil || t.path == "" {
		return nil, cfg, nil
	}
	p, err := tracing.New(ctx, tracing.Config{Export: tracing.ExportFile, File: t.path, SampleRatio: 1}, service, cfg)
	if err != nil {
		return nil, cfg, err
	}
	t.providers = append(t.providers, p)
	traced := cfg.Copy()
	traced.APIOptions = slices.Clone(cfg.APIOptions)
	p.InstrumentAWS(&traced)
	return p, traced, nil
}

// close closes the file of every provider made.
func (t *traceFile) close() {
	if t == nil {
		return
	}
	for _, p := range t.providers {
		_ = p.Shutdown(context.Background())
	}
	t.providers = nil
}

// traceHint tells, after a demo with --trace-file, how to see a record that was taken
// over after a crash: the first one in the file.
func traceHint(w io.Writer, t *traceFile) {
	if t == nil || t.path == "" {
		return
	}
	spans, _, err := tracing.ReadFiles(t.path)
	if err != nil {
		fmt.Fprintf(w, "demo: the trace file: %v\n", err)
		return
	}
	for _, s := range spans {
		if s.Name == telemetry.SpanAcquire && s.Attr(telemetry.AttrDecision) == telemetry.DecisionTakenOver {
			fmt.Fprintf(w, "demo: %d spans in %s; a record taken over after its holder died: idemctl trace --trace-file %s --record '%s' (or the KEY itself)\n",
				len(spans), t.path, t.path, s.Attr(telemetry.AttrRecord))
			return
		}
	}
	fmt.Fprintf(w, "demo: %d spans in %s (idemctl trace KEY --trace-file %s)\n", len(spans), t.path, t.path)
}
