package idem

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idemgo/sqs-lambda-consumer/idem/internal/handoff"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
)

// readFails is a store whose reads of records fail, as a throttled DynamoDB's would.
type readFails struct{ persistence.Store }

var errReadThrottled = errors.New("ProvisionedThroughputExceededException: read throttled")

func (readFails) Get(context.Context, string, time.Time) (*persistence.Record, error) {
	return nil, errReadThrottled
}

// TestSingleRedeliveryReadFails: in the single-transaction mode a redelivery (SQS's
// ApproximateReceiveCount above 1) reads the record before it runs the handler; when
// that read fails, nothing is decided: the handler does not run, and the error, which
// names the store's, is retried.
func TestSingleRedeliveryReadFails(t *testing.T) {
	c, err := New(Config{Store: readFails{memstore.NewMemoryStore()}, Scope: "payments", Mode: ModeSingleTransaction})
	if err != nil {
		t.Fatal(err)
	}
	msg := events.SQSMessage{MessageId: "m-1", Attributes: map[string]string{"ApproximateReceiveCount": "2"}}
	ctx := handoff.WithMessage(context.Background(), msg)
	runs := 0
	_, err = c.Do(ctx, &Request{Key: "k-1", Payload: []byte(`{}`)}, HandlerFunc(func(context.Context, *Request) (Result, error) {
		runs++
		return Result{Response: []byte("ok")}, nil
	}))
	if !errors.Is(err, errReadThrottled) || IsPermanent(err) || runs != 0 {
		t.Fatalf("a redelivery whose read fails: %v (permanent %t), %d runs; want the read's error, retryable, and no run", err, IsPermanent(err), runs)
	}
}
