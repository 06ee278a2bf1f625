package awstest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// TestDrainWaitsForWhatALostReceiveHid: a receive whose answer was lost leaves its
// message in flight, and the FIFO group behind it locked; Drain still returns every
// message, each once, in each group's order, once they are visible again.
func TestDrainWaitsForWhatALostReceiveHid(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	api := awstest.SQS(t)
	url := awstest.FIFOQueue(context.Background(), t, api, "q", nil)
	for i := range 6 {
		group := fmt.Sprint("g", i%2)
		if _, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(fmt.Sprint(group, "-", i/2)),
			MessageGroupId: aws.String(group), MessageDeduplicationId: aws.String(fmt.Sprint("d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	// The lost receive: g0's first message is in flight for 2 s, and nobody has its
	// receipt handle.
	lost, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 1, VisibilityTimeout: 2})
	if err != nil || len(lost.Messages) != 1 {
		t.Fatalf("the receive to lose: %v, %v", lost, err)
	}
	start := time.Now()
	got, err := awstest.Drain(ctx, api, url)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, m := range got {
		bodies = append(bodies, aws.ToString(m.Body))
		if m.Attributes["MessageGroupId"] == "" {
			t.Errorf("message %s without its system attributes: %v", aws.ToString(m.Body), m.Attributes)
		}
	}
	byGroup := map[string][]string{}
	for _, b := range bodies {
		byGroup[b[:2]] = append(byGroup[b[:2]], b)
	}
	if want := []string{"g0-0", "g0-1", "g0-2"}; !slices.Equal(byGroup["g0"], want) {
		t.Errorf("group g0: %v, want %v (all: %v)", byGroup["g0"], want, bodies)
	}
	if want := []string{"g1-0", "g1-1", "g1-2"}; !slices.Equal(byGroup["g1"], want) {
		t.Errorf("group g1: %v, want %v (all: %v)", byGroup["g1"], want, bodies)
	}
	if len(bodies) != 6 {
		t.Errorf("drained %d messages %v, want 6", len(bodies), bodies)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("drained in %v: it cannot have waited for the hidden message", waited)
	}
	if again, err := awstest.Drain(ctx, api, url); err != nil || len(again) != 0 {
		t.Errorf("second drain: %d messages, %v; want none", len(again), err)
	}
}

// skipFirstDelete is an SQS client whose first DeleteMessageBatch never reaches SQS: a
// deletion that came too late, after the message's visibility timeout.
type skipFirstDelete struct {
	*sqs.Client
	skipped bool
}

func (s *skipFirstDelete) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	if !s.skipped {
		s.skipped = true
		return &sqs.DeleteMessageBatchOutput{}, nil
	}
	return s.Client.DeleteMessageBatch(ctx, in, o...)
}

// TestDrainReturnsAMessageOnceWhenItsDeleteWasLost: a message Drain received whose
// deletion did not happen comes back after the visibility timeout; Drain receives it
// again, deletes it, and returns it once.
func TestDrainReturnsAMessageOnceWhenItsDeleteWasLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	api := awstest.SQS(t)
	url := awstest.FIFOQueue(context.Background(), t, api, "q", nil)
	if _, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("only"),
		MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d")}); err != nil {
		t.Fatal(err)
	}
	reader := &skipFirstDelete{Client: api}
	got, err := awstest.Drain(ctx, reader, url)
	if err != nil {
		t.Fatal(err)
	}
	if !reader.skipped || len(got) != 1 || aws.ToString(got[0].Body) != "only" {
		t.Fatalf("drained %d messages (first delete skipped: %v), want the one message once", len(got), reader.skipped)
	}
	if again, err := awstest.Drain(ctx, api, url); err != nil || len(again) != 0 {
		t.Errorf("second drain: %d messages, %v; want none: the second delete did happen", len(again), err)
	}
}
