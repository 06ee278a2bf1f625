package consumerapp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// TestExampleRoundTrips counts the requests the payments consumer sends for a 10-record
// FIFO batch over 10 groups, as SDK middleware sees them (after the retry step): a first
// delivery, a duplicate reaching a cold container, a duplicate reaching a warm one.
// The receipts of a batch go out in one SendMessageBatch after the commits. Under the
// lease mode each record costs an acquire, its commit and the mark that its receipt was
// sent; under the single-transaction mode its commit and the mark.
func TestExampleRoundTrips(t *testing.T) {
	for _, mode := range []idem.Mode{idem.ModeLease, idem.ModeSingleTransaction} {
		t.Run(mode.String(), func(t *testing.T) { exampleRoundTrips(t, mode) })
	}
}

func exampleRoundTrips(t *testing.T, mode idem.Mode) {
	f := newFixture(t)
	f.cfg.Mode = mode
	ddbCalls, sqsCalls := awstest.NewCalls(), awstest.NewCalls()
	ddb := awstest.DynamoDB(t, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, ddbCalls.APIOption) })
	q := awstest.SQS(t, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, sqsCalls.APIOption) })
	newHandler := func() lambda.Handler {
		h, err := consumerapp.New(f.cfg, consumerapp.Deps{DynamoDB: ddb, SQS: q, Logs: &f.logs, Metrics: &f.emf, Owner: t.Name()})
		if err != nil {
			t.Fatal(err)
		}
		return lambda.NewHandler(h)
	}
	batch := func(round string) []byte {
		var recs []events.SQSMessage
		for i := range 10 {
			p := ledger.Payment{PaymentID: fmt.Sprintf("rt-%d", i), AccountID: fmt.Sprintf("acct-rt-%d", i), AmountCents: 100, Currency: "EUR"}
			recs = append(recs, events.SQSMessage{
				MessageId: round + p.PaymentID, Body: mustJSON(t, p), EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:in.fifo",
				Attributes: map[string]string{"MessageGroupId": p.AccountID, "MessageDeduplicationId": p.PaymentID, "ApproximateReceiveCount": "1"},
				MessageAttributes: map[string]events.SQSMessageAttribute{
					idem.KeyAttribute: {DataType: "String", StringValue: strPtr(ledger.Key(p))},
				},
			})
		}
		return encode(t, recs)
	}
	cold := newHandler()
	warm := newHandler()
	cases := []struct {
		name    string
		h       lambda.Handler
		wantDDB map[string]int
		wantSQS map[string]int
	}{
		{"first delivery", cold, map[string]int{"PutItem": 10, "TransactWriteItems": 10, "UpdateItem": 10}, map[string]int{"SendMessageBatch": 1}},
		{"duplicate, cold container", warm, map[string]int{"PutItem": 10}, map[string]int{}},
		{"duplicate, warm container", warm, map[string]int{}, map[string]int{}},
	}
	if mode == idem.ModeSingleTransaction {
		cases[0].wantDDB = map[string]int{"TransactWriteItems": 10, "UpdateItem": 10}
		cases[1].wantDDB = map[string]int{"TransactWriteItems": 10} // refused by the record's condition: the stored outcome
	}
	for i, tc := range cases {
		ddbCalls.Reset()
		sqsCalls.Reset()
		if failed := invoke(t, tc.h, context.Background(), batch(fmt.Sprint(i))); len(failed) != 0 {
			t.Fatalf("%s: failures %v", tc.name, failed)
		}
		d, s := ddbCalls.Ops(), sqsCalls.Ops()
		t.Logf("%-28s per 10 records: DynamoDB %d %v, SQS %d %v", tc.name, ddbCalls.Total(), d, sqsCalls.Total(), s)
		if fmt.Sprint(d) != fmt.Sprint(tc.wantDDB) || fmt.Sprint(s) != fmt.Sprint(tc.wantSQS) {
			t.Errorf("%s: DynamoDB %v and SQS %v, want %v and %v", tc.name, d, s, tc.wantDDB, tc.wantSQS)
		}
	}
	if n := len(f.drain(t, f.cfg.ReceiptsQueueURL)); n != 10 {
		t.Fatalf("%d receipts, want 10", n)
	}
}

func strPtr(s string) *string { return &s }

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
