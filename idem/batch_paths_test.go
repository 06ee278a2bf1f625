package idem_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
)

// TestBatchRunsARecordWithExactlyTheMarginLeft: a record starts while at least the
// deadline margin is left, and not once less is (time stands still in the bubble, so the
// time left is exactly the timeout set).
func TestBatchRunsARecordWithExactlyTheMarginLeft(t *testing.T) {
	for _, c := range []struct {
		left time.Duration
		runs bool
	}{{2 * time.Second, true}, {2*time.Second - time.Nanosecond, false}} {
		synctest.Test(t, func(t *testing.T) {
			ran := false
			p, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{DeadlineMargin: 2 * time.Second, Handle: func(context.Context, events.SQSMessage) error {
				ran = true
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), c.left)
			defer cancel()
			resp, err := p.Process(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1"}}})
			if err != nil || ran != c.runs || (len(resp.BatchItemFailures) == 0) != c.runs {
				t.Errorf("%s left, margin 2s: ran %v, failures %+v, %v; want run %v", c.left, ran, resp.BatchItemFailures, err, c.runs)
			}
		})
	}
}

// TestRecordLogNamesWhyTheDeadLetterFailed: a permanent failure that cannot be
// dead-lettered is retried, and its log line has both errors: the record's and the
// dead-letter queue's.
func TestRecordLogNamesWhyTheDeadLetterFailed(t *testing.T) {
	var logs bytes.Buffer
	p, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{
		Handle: func(context.Context, events.SQSMessage) error {
			return idem.Permanent(errors.New("the body is refused"))
		},
		DeadLetter: &fakeDL{err: errors.New("the dead-letter queue is down")},
		Logger:     slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.Process(context.Background(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1"}}})
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("%+v %v, want the record retried", resp, err)
	}
	lines := logLines(t, &logs)
	if len(lines) != 1 {
		t.Fatalf("%d log lines, want 1: %s", len(lines), logs.String())
	}
	msg, _ := lines[0]["error"].(string)
	if !strings.Contains(msg, "the body is refused") || !strings.Contains(msg, "the dead-letter queue is down") {
		t.Errorf("the record's error %q, want both errors", msg)
	}
}

// TestRecordWhoseCommitLostTheLeaseIsLoggedAsAnError: a record whose commit found its
// lease taken over is logged at ERROR (outcome lease_lost): the handler ran while another
// holder had the key.
func TestRecordWhoseCommitLostTheLeaseIsLoggedAsAnError(t *testing.T) {
	var logs bytes.Buffer
	c, err := idem.New(idem.Config{Store: &commitFaults{Store: memstore.NewMemoryStore(), complete: idem.ErrLeaseLost}, Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	record, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Response: []byte("r")}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	p, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: record, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Process(context.Background(), events.SQSEvent{Records: []events.SQSMessage{keyedFIFORecord("m1", "g", "k", `{}`)}}); err != nil {
		t.Fatal(err)
	}
	lines := logLines(t, &logs)
	if len(lines) != 1 || lines[0]["level"] != "ERROR" || lines[0]["outcome"] != "lease_lost" {
		t.Errorf("log lines %v, want one at ERROR with the outcome lease_lost", lines)
	}
}
