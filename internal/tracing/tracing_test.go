package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func lookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFromEnv(t *testing.T) {
	c, err := FromEnv(lookup(nil))
	if err != nil || c.On() || c.Export != ExportNone || c.SampleRatio != 1 {
		t.Fatalf("no variables: %+v %v, want none", c, err)
	}
	if p, err := New(context.Background(), c, "consumer", aws.Config{}); p != nil || err != nil || p.TracerProvider() != nil {
		t.Fatalf("none builds a provider: %v %v", p, err)
	}
	c, err = FromEnv(lookup(map[string]string{VarExport: "OTLP", VarEndpoint: "https://collector.example:4318/v1/traces", VarRatio: "0.25"}))
	if err != nil || c.Export != ExportOTLP || c.SampleRatio != 0.25 {
		t.Fatalf("otlp: %+v %v", c, err)
	}
	_, err = FromEnv(lookup(map[string]string{VarExport: "jaeger", VarEndpoint: "collector:4318", VarRatio: "2"}))
	for _, want := range []string{`TRACING="jaeger"`, `TRACING_ENDPOINT="collector:4318"`, `TRACING_SAMPLE_RATIO="2"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
	if _, err := FromEnv(lookup(map[string]string{VarExport: ExportFile})); err == nil || !strings.Contains(err.Error(), VarFile) {
		t.Errorf("file without TRACING_FILE: %v", err)
	}
}

func TestXRayEndpoint(t *testing.T) {
	for endpoint, want := range map[string]string{
		"https://xray.eu-west-1.amazonaws.com/v1/traces": "eu-west-1",
		"http://localhost:4318/v1/traces":                "",
		"https://xray.example.com/v1/traces":             "",
		"https://xray.a.b.amazonaws.com/v1/traces":       "",
	} {
		if got, ok := xrayEndpoint(endpoint); got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", endpoint, got, ok, want)
		}
	}
}

// TestSignedExport: a span exported to an X-Ray OTLP endpoint (here a local one with the
// same host name pattern, reached through the transport) is signed with SigV4 for the
// service xray, with the body's hash.
func TestSignedExport(t *testing.T) {
	var got atomic.Pointer[http.Request]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got.Store(r)
	}))
	defer srv.Close()
	sig := newSigV4(rewrite{to: srv.URL}, credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""), "eu-west-1", "xray")
	req, _ := http.NewRequest(http.MethodPost, "https://xray.eu-west-1.amazonaws.com/v1/traces", strings.NewReader("spans"))
	resp, err := sig.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	r := got.Load()
	if r == nil {
		t.Fatal("nothing reached the endpoint")
	}
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKID/") || !strings.Contains(auth, "/eu-west-1/xray/aws4_request") || r.Header.Get("X-Amz-Date") == "" {
		t.Errorf("Authorization %q", auth)
	}
}

// rewrite sends every request to another base URL, host header kept.
type rewrite struct{ to string }

func (rw rewrite) RoundTrip(r *http.Request) (*http.Response, error) {
	r2 := r.Clone(r.Context())
	r2.URL.Scheme, r2.URL.Host = "http", strings.TrimPrefix(rw.to, "http://")
	return http.DefaultTransport.RoundTrip(r2)
}

// TestFileRoundTrip: spans written by two processes' exporters to one file read back
// with their parentage, attributes, links, service and status.
func TestFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	p, err := New(context.Background(), Config{Export: ExportFile, File: path, SampleRatio: 1}, "consumer", aws.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tr := p.TracerProvider().Tracer("t")
	ctx, parent := tr.Start(context.Background(), "parent")
	_, child := tr.Start(ctx, "child", trace.WithAttributes(attribute.String("idem.record", "s#h:1"), attribute.Int("idem.attempt", 2)),
		trace.WithLinks(trace.Link{SpanContext: parent.SpanContext()}))
	child.RecordError(io.EOF)
	child.SetStatus(codes.Error, "boom")
	child.End()
	// Killed here: the parent never ends, the child is in the file already.
	spans, skipped, err := ReadFiles(path)
	if err != nil || skipped != 0 || len(spans) != 1 {
		t.Fatalf("%d spans, %d skipped, %v", len(spans), skipped, err)
	}
	s := spans[0]
	if s.Name != "child" || s.Parent != parent.SpanContext().SpanID().String() || s.Attr("idem.record") != "s#h:1" || s.Attr("idem.attempt") != "2" ||
		s.Service != "consumer" || s.PID == 0 || s.Error != "boom" || len(s.Links) != 1 || s.Links[0].ID != parent.SpanContext().SpanID().String() {
		t.Errorf("read back %+v", s)
	}
	parent.End()
	_ = p.Shutdown(context.Background())
	if spans, _, _ := ReadFiles(path); len(spans) != 2 {
		t.Errorf("%d spans after the parent ended, want 2", len(spans))
	}
}

type flushes struct {
	trace.TracerProvider
	n atomic.Int64
}

func (f *flushes) ForceFlush(context.Context) error { f.n.Add(1); return nil }

// TestInvocation: without a provider the handler is returned as is; with one, each
// invocation is a span under the header's context, with the request id, flushed after.
func TestInvocation(t *testing.T) {
	h := func(context.Context, map[string]string) (string, error) { return "ok", nil }
	if got := Invocation[map[string]string, string](nil, "x", trace.SpanKindServer, "http", nil, h); got == nil {
		t.Fatal("nil")
	}
	exp := tracetest.NewInMemoryExporter()
	tp := &flushes{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))}
	wrapped := Invocation(tp, "ingress", trace.SpanKindServer, "http", func(_ context.Context, hs map[string]string) trace.SpanContext {
		return HeaderParent(hs)
	}, h)
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-1"})
	if out, err := wrapped(ctx, map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}); out != "ok" || err != nil {
		t.Fatal(out, err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "ingress" || spans[0].Parent.SpanID().String() != "b7ad6b7169203331" || tp.n.Load() != 1 {
		t.Fatalf("spans %+v, flushes %d", spans, tp.n.Load())
	}
	// The Lambda's own X-Ray header is the parent only when sampled.
	exp.Reset()
	for _, c := range []struct {
		header string
		parent string
	}{{"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1", "53995c3f42cd8ad8"},
		{"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0", ""}} {
		exp.Reset()
		//nolint:staticcheck // aws-lambda-go's own key for the header
		ctx := context.WithValue(context.Background(), "x-amzn-trace-id", c.header)
		_, _ = Invocation(tp, "consumer", trace.SpanKindConsumer, "pubsub", nil, h)(ctx, nil)
		s := exp.GetSpans()[0]
		if got := s.Parent.SpanID().String(); (c.parent == "" && s.Parent.IsValid()) || (c.parent != "" && got != c.parent) {
			t.Errorf("header %s: parent %v, want %q", c.header, s.Parent, c.parent)
		}
	}
}

// TestOTLPExport: the two export paths over OTLP, in the build at hand. With the tag
// (make test runs it: go test -tags otlp -run TestOTLPExport) a span ended and the
// provider shut down reach the endpoint as one OTLP/HTTP protobuf POST that holds the
// span's name and the service's. Without it New refuses them with an error that names
// the tag.
func TestOTLPExport(t *testing.T) {
	for _, export := range []string{ExportOTLP, ExportXRay} {
		t.Run(export, func(t *testing.T) {
			var mu sync.Mutex
			var posts []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				posts = append(posts, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type")+" "+string(body))
				mu.Unlock()
			}))
			defer srv.Close()
			p, err := New(context.Background(), Config{Export: export, Endpoint: srv.URL + "/v1/traces", SampleRatio: 1}, "consumer-otlp-probe", aws.Config{})
			if !otlpBuilt {
				if p != nil || err == nil || !strings.Contains(err.Error(), "-tags "+OTLPBuildTag) || !strings.Contains(err.Error(), "TRACING="+export) {
					t.Fatalf("without the tag: %v, %v; want an error that names -tags %s", p, err, OTLPBuildTag)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, span := p.TracerProvider().Tracer("probe").Start(context.Background(), "span-otlp-probe")
			span.End()
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(posts) != 1 {
				t.Fatalf("%d posts, want 1", len(posts))
			}
			for _, want := range []string{"POST /v1/traces application/x-protobuf ", "span-otlp-probe", "consumer-otlp-probe"} {
				if !strings.Contains(posts[0], want) {
					t.Errorf("the export %q does not hold %q", posts[0], want)
				}
			}
		})
	}
}
