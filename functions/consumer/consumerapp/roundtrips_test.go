package consumerapp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// TestExampleRoundTrips counts the requests the consumer of the example sends for a
// 10-record FIFO batch, as SDK middleware sees them (after the retry step): a first
// delivery, a duplicate reaching a cold container, a duplicate reaching a warm one. The
// example's business writes go in the completion transaction and its outbound messages
// through the outbox, so the counts are the machinery's: under the lease mode each
// record costs an acquire (PutItem) and its commit (TransactWriteItems); under the
// single-transaction mode its commit. A record with outbound messages adds the mark
// that they were sent (UpdateItem), and the batch's outbound messages go out in one
// SendMessageBatch after the commits.
func TestExampleRoundTrips(t *testing.T) {
	for _, mode := range []idem.Mode{idem.ModeLease, idem.ModeSingleTransaction} {
		t.Run(mode.String(), func(t *testing.T) { exampleRoundTrips(t, mode) })
	}
}

func exampleRoundTrips(t *testing.T, mode idem.Mode) {
	f := newFixture(t, map[string]string{"IDEMPOTENCY_MODE": mode.String()})
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
	valid := f.traffic(t, 10, 10)
	cold := newHandler()
	warm := newHandler()
	first := map[string]int{"PutItem": 10, "TransactWriteItems": 10}
	firstSQS := map[string]int{}
	if f.outbound != "" {
		first["UpdateItem"] = 10
		firstSQS["SendMessageBatch"] = 1
	}
	cases := []struct {
		name    string
		h       lambda.Handler
		wantDDB map[string]int
		wantSQS map[string]int
	}{
		{"first delivery", cold, first, firstSQS},
		{"duplicate, cold container", warm, map[string]int{"PutItem": 10}, map[string]int{}},
		{"duplicate, warm container", warm, map[string]int{}, map[string]int{}},
	}
	if mode == idem.ModeSingleTransaction {
		delete(cases[0].wantDDB, "PutItem")
		cases[1].wantDDB = map[string]int{"TransactWriteItems": 10} // refused by the record's condition: the stored outcome
	}
	for i, tc := range cases {
		ddbCalls.Reset()
		sqsCalls.Reset()
		if failed := exampletest.Invoke(t, tc.h, context.Background(), exampletest.Encode(t, f.records(valid, fmt.Sprint(i)))); len(failed) != 0 {
			t.Fatalf("%s: failures %v", tc.name, failed)
		}
		d, s := ddbCalls.Ops(), sqsCalls.Ops()
		t.Logf("%-28s per 10 records: DynamoDB %d %v, SQS %d %v", tc.name, ddbCalls.Total(), d, sqsCalls.Total(), s)
		if fmt.Sprint(d) != fmt.Sprint(tc.wantDDB) || fmt.Sprint(s) != fmt.Sprint(tc.wantSQS) {
			t.Errorf("%s: DynamoDB %v and SQS %v, want %v and %v", tc.name, d, s, tc.wantDDB, tc.wantSQS)
		}
	}
	f.checkApplied(t, "after three deliveries", valid, valid)
	f.checkOutbound(t, valid)
}
