package cli_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// TestRedriveOutboundKeepsEveryAttribute (issue 37, hole 1): an outbound message with
// as many attributes as SQS allows (9 of the handler's and its key), refused by its
// queue for good, is dead-lettered beside the dlq-* attributes and the signature, and
// redrive sends back exactly the committed message: its body and every one of its
// attributes, no more and no fewer.
func TestRedriveOutboundKeepsEveryAttribute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := upStack(t)
	api := awstest.SQS(t)
	q, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(awstest.Name(t, "out") + ".fifo"),
		Attributes: map[string]string{"FifoQueue": "true", "MaximumMessageSize": "1024"}})
	if err != nil {
		t.Fatal(err)
	}
	out := aws.ToString(q.QueueUrl)
	m := idem.Message{QueueURL: out, Body: `{"receipt":"r-1"}`, GroupID: "acct-1", Attributes: map[string]string{idem.KeyAttribute: "payments#p-1#0"}}
	for i := range idem.MaxMessageAttributes - 1 {
		m.Attributes[fmt.Sprintf("a-%d", i)] = fmt.Sprintf(`value "%d" <&>`, i) // characters JSON escapes
	}
	dl := &idem.SQSDeadLetter{API: api, QueueURL: e["DLQ_URL"], Source: "test-consumer", Keys: stackKeys(t, e)}
	refusal := errors.New("InvalidParameterValue: One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes.")
	if err := dl.DeadLetterOutbound(ctx, m, refusal); err != nil {
		t.Fatal(err)
	}
	if r := idemctl(t, e, "redrive", "--outbound-queue", out); r.code != 0 || !strings.Contains(r.stdout, "1 to "+out) {
		t.Fatalf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	got := receiveAll(t, out)
	if len(got) != 1 {
		t.Fatalf("outbound queue holds %d messages, want the one redriven", len(got))
	}
	attrs := map[string]string{}
	for name, v := range got[0].MessageAttributes {
		attrs[name] = aws.ToString(v.StringValue)
		if aws.ToString(v.DataType) != "String" {
			t.Errorf("attribute %s has type %s, want String", name, aws.ToString(v.DataType))
		}
	}
	if aws.ToString(got[0].Body) != m.Body || !maps.Equal(attrs, m.Attributes) || got[0].Attributes["MessageGroupId"] != m.GroupID {
		t.Fatalf("redriven message: body %s, group %s, attributes %v\nwant the committed one: body %s, group %s, attributes %v",
			aws.ToString(got[0].Body), got[0].Attributes["MessageGroupId"], attrs, m.Body, m.GroupID, m.Attributes)
	}
}
