package sqsbatch

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// visSecs records the visibility timeouts asked for.
type visSecs []int32

func (v *visSecs) ChangeMessageVisibility(_ context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	*v = append(*v, in.VisibilityTimeout)
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

// TestHideUntilAPastLeaseEnd: a lease that ends (with the margin) now or before leaves
// the message's visibility alone, instead of asking SQS for 0 s (visible at once, a
// receive burnt) or a negative timeout (refused); a lease end after now, to the
// second, is asked for in whole seconds rounded up.
func TestHideUntilAPastLeaseEnd(t *testing.T) {
	now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	var calls visSecs
	v := &Visibility{API: &calls, Clock: func() time.Time { return now }, Margin: time.Second}
	msg := events.SQSMessage{MessageId: "m", ReceiptHandle: "rh", EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:q"}
	for _, until := range []time.Time{now.Add(-time.Second), now.Add(-time.Minute)} {
		v.hideUntil(context.Background(), msg, until, "test")
	}
	if len(calls) != 0 {
		t.Fatalf("visibility asked for %v for leases that ended, want nothing", calls)
	}
	v.hideUntil(context.Background(), msg, now.Add(500*time.Millisecond), "test")
	if len(calls) != 1 || calls[0] != 2 {
		t.Fatalf("visibility asked for %v for a lease ending in 0.5 s (plus 1 s), want [2]", calls)
	}
}

// TestHideUntilWithoutAQueueURL: a record whose event source ARN gives no queue URL
// asks SQS nothing and logs why.
func TestHideUntilWithoutAQueueURL(t *testing.T) {
	now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	var calls visSecs
	var logs bytes.Buffer
	v := &Visibility{API: &calls, Clock: func() time.Time { return now }, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	msg := events.SQSMessage{MessageId: "m", ReceiptHandle: "rh", EventSourceARN: "not-an-arn"}
	v.hideUntil(context.Background(), msg, now.Add(time.Minute), "test")
	if len(calls) != 0 || !strings.Contains(logs.String(), "change message visibility failed") || !strings.Contains(logs.String(), "not-an-arn") {
		t.Fatalf("calls %v, logs %s; want no call and the ARN's error logged", calls, logs.String())
	}
}

// refusedVisibility refuses every visibility change.
type refusedVisibility struct{}

func (refusedVisibility) ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return nil, errors.New("ReceiptHandleIsInvalid: injected")
}

// TestHideUntilLogsARefusal: a visibility change SQS refuses is logged with its error
// and the seconds asked for (the message then comes back at its old timeout).
func TestHideUntilLogsARefusal(t *testing.T) {
	now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	var logs bytes.Buffer
	v := &Visibility{API: refusedVisibility{}, Clock: func() time.Time { return now }, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	msg := events.SQSMessage{MessageId: "m", ReceiptHandle: "rh", EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:q"}
	v.hideUntil(context.Background(), msg, now.Add(time.Minute), "test")
	for _, want := range []string{"change message visibility failed", "ReceiptHandleIsInvalid: injected", `"seconds":61`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs %s: want %s", logs.String(), want)
		}
	}
}
