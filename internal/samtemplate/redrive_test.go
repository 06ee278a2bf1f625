package samtemplate_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
)

// sub is the text of a Fn::Sub, as the transformed template has it.
func sub(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var fn struct {
		Sub string `json:"Fn::Sub"`
	}
	if err := json.Unmarshal(raw, &fn); err != nil || fn.Sub == "" {
		t.Fatalf("%s is not a Fn::Sub of a string (%v)", raw, err)
	}
	return fn.Sub
}

// TestDLQTakesTheInputQueueOnly (issue 38, finding 1): the DLQ's redrive allow policy is
// byQueue, and its one source is the input queue's ARN, built from the same name the
// input queue gets; the input queue is the only queue that names the DLQ as its
// dead-letter queue. Without it any queue of the account could (allowAll, SQS's
// default: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html),
// and SQS would move its messages in. moto ignores the policy: this is checked on the
// template as CloudFormation receives it.
func TestDLQTakesTheInputQueueOnly(t *testing.T) {
	eachExample(t, func(t *testing.T, _ example.Example, tpl *samtemplate.Template) {
		var dlq struct {
			RedriveAllowPolicy struct {
				RedrivePermission string            `json:"redrivePermission"`
				SourceQueueArns   []json.RawMessage `json:"sourceQueueArns"`
			} `json:"RedriveAllowPolicy"`
		}
		if err := tpl.Props("DeadLetterQueue", &dlq); err != nil {
			t.Fatal(err)
		}
		if p := dlq.RedriveAllowPolicy; p.RedrivePermission != "byQueue" || len(p.SourceQueueArns) != 1 {
			t.Fatalf("DLQ redrive allow policy %+v, want byQueue with the input queue alone", p)
		}
		var in struct {
			QueueName json.RawMessage `json:"QueueName"`
		}
		if err := tpl.Props("InputQueue", &in); err != nil {
			t.Fatal(err)
		}
		arn, name := sub(t, dlq.RedriveAllowPolicy.SourceQueueArns[0]), sub(t, in.QueueName)
		if arn != "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:"+name || !strings.Contains(name, "${AWS::StackName}") || !strings.HasSuffix(name, ".fifo") {
			t.Errorf("the DLQ's source %s is not the ARN of the input queue named %s", arn, name)
		}
		for _, id := range tpl.OfType("AWS::SQS::Queue") {
			var q struct {
				RedrivePolicy struct {
					DeadLetterTargetArn json.RawMessage `json:"deadLetterTargetArn"`
				} `json:"RedrivePolicy"`
			}
			if err := tpl.Props(id, &q); err != nil {
				t.Fatal(err)
			}
			if target := q.RedrivePolicy.DeadLetterTargetArn; target != nil && refName(t, target) == "DeadLetterQueue" && id != "InputQueue" {
				t.Errorf("queue %s names the DLQ as its dead-letter queue, but the DLQ takes the input queue's only", id)
			}
		}
	})
}

// TestRecordsOutliveTheirDeadLetters (issue 37, hole 5): the consumer keeps a FAILED record
// that holds steps as long as the dead-letter queue keeps its message
// (idem.Config.DLQRetention), which it takes from DLQ_RETENTION, by default
// consumerapp.DefaultDLQRetention: the template sets no DLQ_RETENTION, so its
// DeadLetterQueue must keep messages no longer than that default, or a redrive would
// find no record and call a step's service again.
func TestRecordsOutliveTheirDeadLetters(t *testing.T) {
	eachExample(t, func(t *testing.T, _ example.Example, tpl *samtemplate.Template) {
		var dlq struct {
			MessageRetentionPeriod float64 `json:"MessageRetentionPeriod"`
		}
		if err := tpl.Props("DeadLetterQueue", &dlq); err != nil {
			t.Fatal(err)
		}
		kept := time.Duration(dlq.MessageRetentionPeriod) * time.Second
		if kept <= 0 || kept > consumerapp.DefaultDLQRetention {
			t.Errorf("the DLQ keeps messages %s, the consumer its records %s past it by default (DLQ_RETENTION)", kept, consumerapp.DefaultDLQRetention)
		}
	})
}
