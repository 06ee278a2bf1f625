package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.opentelemetry.io/otel/sdk/trace"
)

type discard struct{}

func (discard) ExportSpans(context.Context, []trace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                          { return nil }

// BenchmarkSDKCall is one DynamoDB GetItem through the real SDK client to a loopback
// server that answers at once, with the client as main.go builds it with tracing off and
// with otelaws's middleware (every span sampled, batched): what tracing adds to each
// AWS call of a record, CPU only (the request is the same).
func BenchmarkSDKCall(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = w.Write([]byte(`{"Item":{"pk":{"S":"k"}}}`))
	}))
	defer srv.Close()
	for _, mode := range []string{"off", "on"} {
		b.Run("tracing="+mode, func(b *testing.B) {
			cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("a", "b", ""), BaseEndpoint: aws.String(srv.URL)}
			if mode == "on" {
				tp := trace.NewTracerProvider(trace.WithBatcher(discard{}))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				InstrumentAWSWith(&cfg, tp)
			}
			client := dynamodb.NewFromConfig(cfg)
			in := &dynamodb.GetItemInput{TableName: aws.String("t"), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}}}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := client.GetItem(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
