package sqsbatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/internal/handoff"
)

// VisibilityAPI is the SQS call Visibility makes; *sqs.Client satisfies it.
type VisibilityAPI interface {
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

// maxVisibility is the largest visibility timeout SQS accepts for a message: 12 hours
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html).
const maxVisibility = 12 * time.Hour

// Visibility keeps a message out of sight while the lease it depends on lasts, so that
// waiting on a lease never costs a receive. Each receive counts against the queue's
// maxReceiveCount: a message redelivered every visibility timeout onto a live lease
// (ErrInProgress) would reach the dead-letter queue without ever running, and on a FIFO
// queue the rest of its group after it. Visibility moves the message's visibility to the
// lease end (ChangeMessageVisibility with its receipt handle):
//   - when its delivery finds the key held by another live lease (LeaseHeldError);
//   - when the handler running it extends its own lease (Attempt.Extend).
//
// Visibility is best effort: a failed call is logged and the message comes back at its
// queue's visibility timeout, as it would without Visibility. The function's role needs
// sqs:ChangeMessageVisibility on the queue. It is safe for concurrent use.
type Visibility struct {
	// API changes the visibility (required).
	API VisibilityAPI
	// QueueURL returns the URL of the queue a record came from, given its
	// eventSourceARN (default QueueURLFromARN).
	QueueURL func(arn string) (string, error)
	// Margin is added to the lease end (default 1s): the message must come back after
	// the lease has ended by the clock of whichever consumer receives it.
	Margin time.Duration
	// Clock returns the current time (default time.Now).
	Clock func() time.Time
	// Logger receives failed calls (default: discard).
	Logger *slog.Logger
}

// QueueURLFromARN returns the URL of the SQS queue arn:PARTITION:sqs:REGION:ACCOUNT:NAME,
// https://sqs.REGION.DOMAIN/ACCOUNT/NAME (amazonaws.com, or amazonaws.com.cn in aws-cn).
// The SDK sends a request to its own endpoint and the queue is named by the URL's path,
// so the URL also serves a local endpoint.
func QueueURLFromARN(arn string) (string, error) {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[3] == "" || parts[4] == "" || parts[5] == "" {
		return "", fmt.Errorf("idem: %q is not an SQS queue ARN", arn)
	}
	domain := "amazonaws.com"
	if parts[1] == "aws-cn" {
		domain = "amazonaws.com.cn"
	}
	return fmt.Sprintf("https://sqs.%s.%s/%s/%s", parts[3], domain, parts[4], parts[5]), nil
}

// hideUntil makes msg invisible until until (plus the margin).
func (v *Visibility) hideUntil(ctx context.Context, msg events.SQSMessage, until time.Time, why string) {
	if v == nil || v.API == nil || msg.ReceiptHandle == "" || until.IsZero() {
		return
	}
	clock, margin, urlOf, log := v.Clock, v.Margin, v.QueueURL, v.Logger
	if clock == nil {
		clock = time.Now
	}
	if margin == 0 {
		margin = time.Second
	}
	if urlOf == nil {
		urlOf = QueueURLFromARN
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := min(until.Add(margin).Sub(clock()), maxVisibility)
	if d <= 0 {
		return
	}
	secs := int32(math.Ceil(d.Seconds()))
	err := func() error {
		url, err := urlOf(msg.EventSourceARN)
		if err != nil {
			return err
		}
		// The record's context may be done (the deadline); the call is short and bounded.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, err = v.API.ChangeMessageVisibility(cctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(url), ReceiptHandle: aws.String(msg.ReceiptHandle), VisibilityTimeout: secs,
		})
		return err
	}()
	if err != nil {
		log.LogAttrs(context.WithoutCancel(ctx), slog.LevelWarn, "change message visibility failed",
			slog.String("message_id", msg.MessageId), slog.String("why", why), slog.Int("seconds", int(secs)), slog.String("error", err.Error()))
	}
}

// inProgress hides msg until the lease that err reports ends; other errors are ignored.
func (v *Visibility) inProgress(ctx context.Context, msg events.SQSMessage, err error) {
	if held, ok := errors.AsType[*idem.LeaseHeldError](err); ok {
		v.hideUntil(ctx, msg, held.Until, "in_progress")
	}
}

type delivery struct {
	v   *Visibility
	msg events.SQSMessage
}

// withDelivery records in ctx the message a handler runs for, so Attempt.Extend can move
// its visibility along with the lease.
func (v *Visibility) withDelivery(ctx context.Context, msg events.SQSMessage) context.Context {
	if v == nil {
		return ctx
	}
	return handoff.WithExtender(ctx, delivery{v: v, msg: msg})
}

// Extended moves the visibility of the message to the new lease end.
func (d delivery) Extended(ctx context.Context, until time.Time) {
	d.v.hideUntil(ctx, d.msg, until, "extend")
}
