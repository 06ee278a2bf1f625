//go:build otlp

package tracing

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// otlpBuilt: this build has the OTLP/HTTP exporter (-tags otlp, OTLPBuildTag).
const otlpBuilt = true

// newOTLPHTTP is the OTLP/HTTP exporter to endpoint (a …/v1/traces URL); client nil:
// the exporter's own.
func newOTLPHTTP(ctx context.Context, endpoint string, client *http.Client) (sdktrace.SpanExporter, error) {
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(endpoint), otlptracehttp.WithTimeout(5 * time.Second)}
	if client != nil {
		opts = append(opts, otlptracehttp.WithHTTPClient(client))
	}
	return otlptracehttp.New(ctx, opts...)
}
