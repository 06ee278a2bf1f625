package consumerapp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// TestTemplateGrantsEveryCall runs the consumer over the example's traffic (first
// deliveries, duplicates, bad messages for the DLQ, a delivery of a held key), records
// every AWS action it takes and on what, and checks that the ConsumerFunction's policies
// in template.yaml allow each one, in the template as the SAM transform outputs it. The
// resources are named by the stack's own list (logical id, name, URL, ARN), so the test
// names none. moto does not enforce IAM, so without this test a missing action would
// only show once deployed, as AccessDenied on every message.
func TestTemplateGrantsEveryCall(t *testing.T) {
	f := newFixture(t)
	rec := &exampletest.IAMCalls{}
	ddb := dynamodb.New(f.ddb.Options(), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, rec.APIOption) })
	sq := sqs.New(f.sqs.Options(), func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, rec.APIOption) })
	h, err := consumerapp.New(f.cfg, consumerapp.Deps{DynamoDB: ddb, SQS: sq, Logs: &f.logs, Metrics: &f.emf, Owner: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	valid := f.traffic(t, 6, 3)
	recs := f.records(valid[:3], "m-")
	for i, b := range f.gen(t).Bad(f.run, valid[:3]) {
		recs = append(recs, f.record(b.Message, fmt.Sprintf("bad-%d", i)))
	}
	for _, batch := range [][]events.SQSMessage{recs, f.records(valid[3:], "m-")} {
		for range 2 { // the second time, every record is a duplicate
			exampletest.Invoke(t, lambda.NewHandler(h), context.Background(), exampletest.Encode(t, batch))
		}
	}
	if n := len(exampletest.ReceiveAll(t, f.sqs, f.cfg.DLQURL)); n == 0 {
		t.Error("nothing was dead-lettered: the DLQ's grant is not exercised")
	}
	// A delivery that finds its key held by a live lease hides its message until the
	// lease ends (ChangeMessageVisibility on the queue of its eventSourceARN).
	held := events.SQSEvent{Records: []events.SQSMessage{f.record(valid[0], "iam-held-message")}}
	held.Records[0].MessageAttributes[idem.KeyAttribute] = events.SQSMessageAttribute{DataType: "String", StringValue: aws.String("iam-held-key")}
	holder, err := idem.New(idem.Config{Store: mustStore(t, f), Scope: f.cfg.Scope, Owner: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Do(context.Background(), &idem.Request{Key: "iam-held-key", Payload: []byte(held.Records[0].Body)},
		func(ctx context.Context, _ *idem.Request) (idem.Result, error) {
			if failed := exampletest.Invoke(t, lambda.NewHandler(h), context.Background(), exampletest.Encode(t, held.Records)); len(failed) != 1 {
				t.Errorf("a delivery of a held key: failures %v, want its message id", failed)
			}
			return idem.Result{Response: []byte("{}")}, nil
		}); err != nil {
		t.Fatal(err)
	}
	used := rec.Used()
	f.st.CheckGrants(t, "ConsumerFunction", used)
	if f.outbound != "" && !rec.Has("sqs:SendMessage "+f.outbound) {
		t.Errorf("no outbound message was sent: the example's grant on its outbound queue is not exercised")
	}
	t.Logf("%d action/resource pairs used: %v", len(used), used)
}

func mustStore(t *testing.T, f *fixture) persistence.Store {
	t.Helper()
	s, err := persistence.NewDynamoStore(f.ddb, f.cfg.IdempotencyTable)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
