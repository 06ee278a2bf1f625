package idem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/dedupgroup"
)

// TestDeadLetterKeepsDeduplicationGroup: a message dead-lettered twice (two consumers,
// or a retry after a lost answer), with different causes, goes to the dead-letter queue
// with the same deduplication id and the same group, so per-group deduplication
// (high-throughput FIFO) keeps one copy. A message without a group gets a fixed one.
func TestDeadLetterKeepsDeduplicationGroup(t *testing.T) {
	var m dedupgroup.Map
	for _, group := range []string{"acct-1", ""} {
		msg := poisonMsg()
		msg.MessageId += "-" + group // a message's group never changes: one id per group
		msg.Attributes = map[string]string{"MessageGroupId": group}
		for _, cause := range []error{errors.New("bad json"), errors.New("payload mismatch")} {
			c := &captureSender{}
			d := &sqsmsg.SQSDeadLetter{API: c, QueueURL: "https://sqs.us-east-1.amazonaws.com/1/dlq.fifo", Source: "t"}
			if err := d.DeadLetter(context.Background(), msg, idem.Permanent(cause)); err != nil {
				t.Fatal(err)
			}
			if err := m.Add("dlq", aws.ToString(c.in.MessageDeduplicationId), aws.ToString(c.in.MessageGroupId)); err != nil {
				t.Error(err)
			}
		}
	}
	if m.Len() != 2 {
		t.Errorf("%d deduplication ids for two messages, want 2", m.Len())
	}
}
