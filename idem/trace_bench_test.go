package idem_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
)

// discard is an exporter that drops what it is given: the benchmark measures what
// tracing costs the record's path, not an exporter.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkTracing is BenchmarkBatchFIFO with an outbound message per record (so the
// send and the mark are traced too), with tracing off (no TracerProvider: what the
// functions run with TRACING=none), on (every trace sampled, spans batched in the
// background as internal/tracing sets them up) and on with nothing sampled (ratio 0).
// ns/msg is the per-message cost; BENCHMARKS.md compares them with benchstat.
func BenchmarkTracing(b *testing.B) {
	for _, mode := range []string{"off", "on", "unsampled"} {
		b.Run("tracing="+mode, func(b *testing.B) {
			var tp trace.TracerProvider
			switch mode {
			case "on":
				p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
				defer func() { _ = p.Shutdown(context.Background()) }()
				tp = p
			case "unsampled":
				p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))))
				defer func() { _ = p.Shutdown(context.Background()) }()
				tp = p
			}
			out := &capture{}
			c, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "payments", Sender: out, Tracer: tp})
			if err != nil {
				b.Fatal(err)
			}
			h := idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
				return idem.Result{Response: []byte(`{"ok":true}`), Writes: []types.TransactWriteItem{benchWrite},
					Messages: []idem.Message{{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/receipts.fifo", Body: `{"receipt":1}`, GroupID: "acct-042"}}}, nil
			})
			rec, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: h})
			if err != nil {
				b.Fatal(err)
			}
			p, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: rec, Outbox: c, Tracer: tp})
			if err != nil {
				b.Fatal(err)
			}
			runBatches(b, p)
		})
	}
}
