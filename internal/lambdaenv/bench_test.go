package lambdaenv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/idemgo/sqs-lambda-consumer/internal/lambdaenv"
)

// batch is a 10-record SQS event whose records ask testdata/fn to do nothing.
func batch(b *testing.B) []byte {
	b.Helper()
	ev := events.SQSEvent{Records: make([]events.SQSMessage, 10)}
	for i := range ev.Records {
		ev.Records[i] = events.SQSMessage{
			MessageId: fmt.Sprintf("m%d", i), Body: `{"do":"ok"}`, EventSource: "aws:sqs",
			Attributes: map[string]string{"ApproximateReceiveCount": "1", "MessageGroupId": "g"},
		}
	}
	p, err := json.Marshal(ev)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkRuntimeLoop is the cost of one invocation of a handler that does nothing
// with a 10-record SQS event: through a warm execution environment (the Runtime API on
// loopback, a child process: what the local runner adds per invocation), against the
// same JSON in and out in this process (lambda.NewHandler, what --in-process does).
func BenchmarkRuntimeLoop(b *testing.B) {
	payload := batch(b)
	b.Run("environment", func(b *testing.B) {
		e, err := lambdaenv.New(lambdaenv.Function{Name: "fn", Bin: fnBin, Timeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = e.Close() }()
		if _, err := e.Invoke(context.Background(), payload); err != nil { // the cold start, not measured
			b.Fatal(err)
		}
		b.ResetTimer()
		for b.Loop() {
			if _, err := e.Invoke(context.Background(), payload); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("in-process", func(b *testing.B) {
		h := lambda.NewHandler(func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			var resp events.SQSEventResponse
			for _, r := range ev.Records {
				var body struct{ Do string }
				if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
					return resp, err
				}
			}
			return resp, nil
		})
		for b.Loop() {
			if _, err := h.Invoke(context.Background(), payload); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkColdStart is a fresh environment's first invocation: process start, init
// (aws-lambda-go's), the first GET /next, the 10-record event, the response, and the
// kill that ends it.
func BenchmarkColdStart(b *testing.B) {
	payload := batch(b)
	for b.Loop() {
		e, err := lambdaenv.New(lambdaenv.Function{Name: "fn", Bin: fnBin, Timeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Invoke(context.Background(), payload); err != nil {
			b.Fatal(err)
		}
		_ = e.Close()
	}
}
