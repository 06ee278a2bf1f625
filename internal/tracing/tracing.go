// Package tracing sets up OpenTelemetry for the functions and idemctl: a TracerProvider
// exporting where the TRACING variables say (nothing by default; X-Ray through the ADOT
// collector Lambda layer; an OTLP endpoint, X-Ray's own signed with SigV4 when none is
// named; a JSON-lines file for the local tools), the AWS SDK clients instrumented
// (otelaws), and each Lambda invocation a span flushed before the invocation returns.
// With TRACING=none it builds nothing: the functions then run exactly as without it.
// The two OTLP paths (xray, otlp) need a build with the tag OTLPBuildTag.
// docs/operations.md, "Tracing", says how to turn it on and what it costs.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"go.opentelemetry.io/contrib/instrumentation/github.com/aws/aws-sdk-go-v2/otelaws"
	"go.opentelemetry.io/contrib/propagators/aws/xray"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Export paths (the variable TRACING; the template's Tracing parameter).
const (
	ExportNone = "none" // the default: no tracer, no cost
	ExportXRay = "xray" // OTLP/HTTP to the ADOT collector layer on localhost, which sends to X-Ray
	ExportOTLP = "otlp" // OTLP/HTTP to TRACING_ENDPOINT, or X-Ray's OTLP endpoint (SigV4) when it is empty
	ExportFile = "file" // JSON lines appended to TRACING_FILE: the local tools (idemctl run, serve)
)

// OTLPBuildTag is the build tag that compiles the OTLP/HTTP exporter into a bootstrap,
// which the export paths xray and otlp need: its OTLP protobuf encoding pulls in
// google.golang.org/protobuf and gRPC, which would double every bootstrap that never
// exports (Makefile's LAMBDA_TAGS; docs/operations.md, "Tracing"). Without it, New
// refuses those two paths; none and file work in every build.
const OTLPBuildTag = "otlp"

// Variables.
const (
	VarExport   = "TRACING"
	VarEndpoint = "TRACING_ENDPOINT"
	VarRatio    = "TRACING_SAMPLE_RATIO"
	VarFile     = "TRACING_FILE"
)

// collectorEndpoint is where the ADOT collector layer listens for OTLP/HTTP traces: its
// default configuration's receiver
// (https://aws-otel.github.io/docs/getting-started/lambda/lambda-go).
const collectorEndpoint = "http://localhost:4318/v1/traces"

// Config is the tracing configuration of a process.
type Config struct {
	Export      string  // TRACING: none, xray, otlp or file (default none)
	Endpoint    string  // TRACING_ENDPOINT: the OTLP/HTTP traces URL (…/v1/traces)
	SampleRatio float64 // TRACING_SAMPLE_RATIO: of the traces this process starts (default 1); a span with a parent follows its parent
	File        string  // TRACING_FILE: with file, the JSON-lines file
}

// On reports whether c records anything.
func (c Config) On() bool { return c.Export != "" && c.Export != ExportNone }

// FromEnv reads the configuration through lookup (os.LookupEnv in main).
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	get := func(name string) string {
		v, _ := lookup(name)
		return strings.TrimSpace(v)
	}
	c := Config{Export: strings.ToLower(get(VarExport)), Endpoint: get(VarEndpoint), File: get(VarFile), SampleRatio: 1}
	if c.Export == "" {
		c.Export = ExportNone
	}
	var errs []error
	switch c.Export {
	case ExportNone, ExportXRay, ExportOTLP:
	case ExportFile:
		if c.File == "" {
			errs = append(errs, fmt.Errorf("%s=%s needs %s", VarExport, ExportFile, VarFile))
		}
	default:
		errs = append(errs, fmt.Errorf("%s=%q is not one of %s, %s, %s, %s", VarExport, c.Export, ExportNone, ExportXRay, ExportOTLP, ExportFile))
	}
	if c.Endpoint != "" {
		if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("%s=%q is not an http(s) URL", VarEndpoint, c.Endpoint))
		}
	}
	if v := get(VarRatio); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 || r > 1 {
			errs = append(errs, fmt.Errorf("%s=%q is not a number between 0 and 1", VarRatio, v))
		}
		c.SampleRatio = r
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("tracing configuration: %w", err)
	}
	return c, nil
}

// Provider is a process's TracerProvider. A nil *Provider is tracing off: every method
// is then a no-op and TracerProvider returns nil.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// New builds the provider of cfg for service ("consumer", "reaper", "ingress", ...);
// nil, and no error, when cfg.Export is none. awsCfg signs the requests to X-Ray's OTLP
// endpoint.
func New(ctx context.Context, cfg Config, service string, awsCfg aws.Config) (*Provider, error) {
	if !cfg.On() {
		return nil, nil
	}
	res := resource.NewSchemaless(resourceAttrs(service)...)
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
	}
	switch cfg.Export {
	case ExportFile:
		exp, err := NewFileExporter(cfg.File)
		if err != nil {
			return nil, err
		}
		// One write per span as it ends: a process killed mid-batch (the demo's crash)
		// loses none of the spans it ended. Local only.
		opts = append(opts, sdktrace.WithSyncer(exp))
	case ExportXRay, ExportOTLP:
		if !otlpBuilt {
			return nil, fmt.Errorf("tracing: %s=%s exports over OTLP, which this bootstrap was built without: build it with -tags %s (make build LAMBDA_TAGS=%s, or LAMBDA_TAGS=%s sam build)",
				VarExport, cfg.Export, OTLPBuildTag, OTLPBuildTag, OTLPBuildTag)
		}
		exp, err := otlpExporter(ctx, cfg, awsCfg)
		if err != nil {
			return nil, err
		}
		// Batched and exported in the background; Invocation flushes once per invocation,
		// after the records are done.
		opts = append(opts, sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(8192)))
		if cfg.Export == ExportXRay {
			// Trace ids whose first 32 bits are their start time, as X-Ray's: the
			// collector's awsxray exporter sends segments, which need them; the OTLP
			// endpoint takes W3C ids as they are
			// (https://aws-otel.github.io/docs/getting-started/x-ray).
			opts = append(opts, sdktrace.WithIDGenerator(xray.NewIDGenerator()))
		}
	}
	return &Provider{tp: sdktrace.NewTracerProvider(opts...)}, nil
}

func resourceAttrs(service string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{attribute.String("service.name", service), attribute.String("cloud.provider", "aws"),
		attribute.Int("process.pid", os.Getpid())}
	if fn := os.Getenv("AWS_LAMBDA_FUNCTION_NAME"); fn != "" {
		attrs = append(attrs, attribute.String("faas.name", fn))
	}
	if r := os.Getenv("AWS_REGION"); r != "" {
		attrs = append(attrs, attribute.String("cloud.region", r))
	}
	return attrs
}

// otlpExporter sends OTLP/HTTP: to the collector layer (xray), to cfg.Endpoint, or, with
// none, to X-Ray's OTLP endpoint of the region, signed with SigV4
// (https://docs.aws.amazon.com/xray/latest/devguide/xray-opentelemetry.html).
func otlpExporter(ctx context.Context, cfg Config, awsCfg aws.Config) (sdktrace.SpanExporter, error) {
	endpoint := cfg.Endpoint
	if endpoint == "" && cfg.Export == ExportXRay {
		endpoint = collectorEndpoint
	}
	if endpoint == "" {
		if awsCfg.Region == "" {
			return nil, fmt.Errorf("tracing: %s=%s without %s sends to X-Ray's OTLP endpoint, which needs the region", VarExport, ExportOTLP, VarEndpoint)
		}
		endpoint = "https://xray." + awsCfg.Region + ".amazonaws.com/v1/traces"
	}
	var client *http.Client
	if region, ok := xrayEndpoint(endpoint); ok {
		client = &http.Client{Transport: newSigV4(http.DefaultTransport, awsCfg.Credentials, region, "xray")}
	}
	exp, err := newOTLPHTTP(ctx, endpoint, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter to %s: %w", endpoint, err)
	}
	return exp, nil
}

// xrayEndpoint reports whether endpoint is X-Ray's OTLP endpoint, and its region.
func xrayEndpoint(endpoint string) (string, bool) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", false
	}
	rest, ok := strings.CutPrefix(u.Hostname(), "xray.")
	if !ok {
		return "", false
	}
	region, ok := strings.CutSuffix(rest, ".amazonaws.com")
	if !ok || region == "" || strings.Contains(region, ".") {
		return "", false
	}
	return region, true
}

// TracerProvider is the provider for idem's and the functions' spans; nil when off.
func (p *Provider) TracerProvider() trace.TracerProvider {
	if p == nil {
		return nil
	}
	return p.tp
}

// InstrumentAWS adds otelaws's middleware to cfg, so that every client made from it
// records a span per call (DynamoDB, SQS), under the span of the context it is called
// with. The X-Ray header it puts on the requests is what SQS keeps as a message's
// AWSTraceHeader when the message sets none. A no-op when tracing is off.
func (p *Provider) InstrumentAWS(cfg *aws.Config) {
	if p == nil {
		return
	}
	InstrumentAWSWith(cfg, p.tp)
}

// InstrumentAWSWith is InstrumentAWS with any TracerProvider (a test's); nil: a no-op.
func InstrumentAWSWith(cfg *aws.Config, tp trace.TracerProvider) {
	if tp == nil {
		return
	}
	otelaws.AppendMiddlewares(&cfg.APIOptions, otelaws.WithTracerProvider(tp), otelaws.WithTextMapPropagator(xray.Propagator{}))
}

// Shutdown exports what is left and stops the provider.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// Setup is what a function's main calls: the configuration from the environment, the
// provider, and cfg instrumented. nil when tracing is off.
func Setup(ctx context.Context, lookup func(string) (string, bool), service string, cfg *aws.Config) (*Provider, error) {
	c, err := FromEnv(lookup)
	if err != nil {
		return nil, err
	}
	p, err := New(ctx, c, service, *cfg)
	if err != nil {
		return nil, err
	}
	p.InstrumentAWS(cfg)
	return p, nil
}
