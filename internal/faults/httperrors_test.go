package faults_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/faults"
)

const putTarget = "DynamoDB_20120810.PutItem"

func newHTTPErrors(t *testing.T, upstream string) *faults.HTTPErrors {
	t.Helper()
	h, err := faults.NewHTTPErrors(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// putNew writes pk only if it does not exist yet.
func putNew(c *dynamodb.Client, tbl, pk string) error {
	_, err := c.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName: aws.String(tbl), Item: key(pk), ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	return err
}

// TestKindsAreRetried: for each kind, two injected faults then success: the real SDK
// client retries each (3 attempts, its default) and the third attempt succeeds; with
// three faults it gives up with the fault's error. The SDK's own classifiers say which
// kinds are throttles (they cost less retry quota and back off longer under the 2026
// retry rules).
func TestKindsAreRetried(t *testing.T) {
	tbl := table(t)
	h := newHTTPErrors(t, awstest.Endpoint(t))
	c, calls := ddbVia(t, h.URL(), 3)
	throttle := retry.IsErrorThrottles(retry.DefaultThrottles)
	for i, kind := range faults.Kinds() {
		t.Run(string(kind), func(t *testing.T) {
			// Two faults, then the request goes through. An after-forwarding fault applied
			// the write each time: the put is unconditional here.
			h.ResetStats()
			calls.Reset()
			if err := h.InjectNext(kind, 2, putTarget); err != nil {
				t.Fatal(err)
			}
			if _, err := c.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(tbl), Item: key(fmt.Sprint("ok-", i))}); err != nil {
				t.Fatalf("after 2 faults: %v", err)
			}
			st := h.Stats()
			wantFwd := int64(1)
			if kind.Forwarded() {
				wantFwd = 3
			}
			if calls.Total() != 3 || st.Requests != 3 || st.Injected[kind] != 2 || st.Faults() != 2 || st.Forwarded != wantFwd {
				t.Fatalf("attempts %d, stats %+v; want 3 attempts, 3 requests, 2 %s, %d forwarded", calls.Total(), st, kind, wantFwd)
			}

			// Three faults: the SDK gives up after its 3 attempts with the fault's error.
			if err := h.InjectNext(kind, 3, putTarget); err != nil {
				t.Fatal(err)
			}
			calls.Reset()
			_, err := c.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(tbl), Item: key(fmt.Sprint("fail-", i))})
			var maxErr *retry.MaxAttemptsError
			if !errors.As(err, &maxErr) || calls.Total() != 3 {
				t.Fatalf("after 3 faults: %v after %d attempts, want the maximum attempts error after 3", err, calls.Total())
			}
			var api smithy.APIError
			var resp *smithyhttp.ResponseError
			switch {
			case errors.As(err, &api) && errors.As(err, &resp):
				t.Logf("%-40s HTTP %d %s (fault %v), SDK: retryable, throttle=%v", kind, resp.HTTPStatusCode(), api.ErrorCode(), api.ErrorFault(), throttle.IsErrorThrottle(err).Bool())
				if _, code := kindStatus(kind); api.ErrorCode() != code {
					t.Errorf("error code %s, want %s", api.ErrorCode(), code)
				}
			case !kind.Forwarded() && kind != faults.Dropped:
				t.Fatalf("%v is not an API error", err)
			default:
				t.Logf("%-40s connection error %v, SDK: retryable, throttle=%v", kind, errors.Unwrap(maxErr), throttle.IsErrorThrottle(err).Bool())
			}
			if rule := h.Stats(); rule.Injected[kind] != 5 {
				t.Fatalf("stats %+v: want 5 %s in all", rule, kind)
			}
		})
	}
}

// kindStatus is what the proxy answers for kind (0 for a closed connection).
func kindStatus(k faults.Kind) (int, string) {
	switch k {
	case faults.Throttling, faults.ThroughputExceeded:
		return 400, string(k)
	case faults.InternalError, faults.LostResponse:
		return 500, "InternalServerError"
	case faults.Unavailable:
		return 503, "ServiceUnavailable"
	}
	return 0, ""
}

// TestLostResponseAppliesTheWrite: the first attempt of a conditional PutItem reaches
// the emulator and is applied, its answer is lost (500 or closed connection); the SDK
// retries the same request, whose condition now fails on the item the first attempt
// wrote. A fault before forwarding leaves nothing behind: the retry succeeds.
func TestLostResponseAppliesTheWrite(t *testing.T) {
	tbl := table(t)
	h := newHTTPErrors(t, awstest.Endpoint(t))
	c, calls := ddbVia(t, h.URL(), 3)
	for _, kind := range []faults.Kind{faults.LostResponse, faults.LostConnection, faults.InternalError, faults.Dropped} {
		calls.Reset()
		h.ResetStats()
		if err := h.InjectNext(kind, 1, putTarget); err != nil {
			t.Fatal(err)
		}
		pk := "lost-" + string(kind)
		err := putNew(c, tbl, pk)
		var ccf *types.ConditionalCheckFailedException
		if kind.Forwarded() {
			if !errors.As(err, &ccf) {
				t.Fatalf("%s: %v, want ConditionalCheckFailed on the retry", kind, err)
			}
		} else if err != nil {
			t.Fatalf("%s: %v, want success on the retry", kind, err)
		}
		if st := h.Stats(); calls.Total() != 2 || st.Injected[kind] != 1 {
			t.Fatalf("%s: %d attempts, stats %+v", kind, calls.Total(), st)
		}
		// Either way the item exists exactly once, written by one of the attempts.
		out, gerr := awstest.DynamoDB(t).GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(tbl), Key: key(pk), ConsistentRead: aws.Bool(true)})
		if gerr != nil || out.Item == nil {
			t.Fatalf("%s: item %v, %v", kind, out, gerr)
		}
		t.Logf("%-15s conditional put: %v", kind, err)
	}
}

// TestSharesTargetsAndSQS: a share of the matching requests gets the fault, requests of
// other operations never do, the counts add up under concurrent use, and SQS calls are
// classified the same way (a lost SendMessage answer duplicates a standard message).
func TestSharesTargetsAndSQS(t *testing.T) {
	tbl := table(t)
	h := newHTTPErrors(t, awstest.Endpoint(t))
	c, calls := ddbVia(t, h.URL(), 30)
	if err := h.Set(
		faults.Rule{Kind: faults.Throttling, Share: 0.3, Targets: []string{"DynamoDB_20120810.Get*"}},
		faults.Rule{Kind: faults.Unavailable, Share: 0.2, Targets: []string{"DynamoDB_20120810.GetItem"}},
	); err != nil {
		t.Fatal(err)
	}
	const workers, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Go(func() {
			for range each {
				_, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(tbl), Key: key("x")})
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(tbl)}); err != nil {
		t.Fatal(err)
	}
	st := h.Stats()
	if st.Forwarded != workers*each+1 || st.Requests != st.Forwarded+st.Faults() || int64(calls.Total()) != st.Requests {
		t.Fatalf("stats %+v, %d attempts: want %d forwarded and requests = forwarded + faults = attempts", st, calls.Total(), workers*each+1)
	}
	if st.Injected[faults.Throttling] == 0 || st.Injected[faults.Unavailable] == 0 {
		t.Fatalf("stats %+v: want both kinds (p < 1e-4 to fail by chance)", st)
	}
	t.Logf("%d GetItem calls, %d attempts: %v", workers*each, calls.Total(), st.Injected)

	h.Clear()
	h.ResetStats()
	q, qcalls := sqsVia(t, h.URL(), 3)
	out, err := q.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(awstest.Name(t, "q"))})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Set(
		faults.Rule{Kind: faults.Throttling, Share: 1, Limit: 1, Targets: []string{"AmazonSQS.SendMessage"}},
		faults.Rule{Kind: faults.LostResponse, Share: 1, Limit: 1, Targets: []string{"AmazonSQS.SendMessage"}},
	); err != nil {
		t.Fatal(err)
	}
	qcalls.Reset()
	if _, err := q.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: out.QueueUrl, MessageBody: aws.String("m")}); err != nil {
		t.Fatal(err)
	}
	attrs, err := q.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(attrs.Attributes["ApproximateNumberOfMessages"])
	if st := h.Stats(); qcalls.Ops()["SendMessage"] != 3 || n != 2 || st.Injected[faults.Throttling] != 1 || st.Injected[faults.LostResponse] != 1 {
		t.Fatalf("SendMessage: %d attempts, %d messages queued, stats %+v; want 3 attempts, 2 messages", qcalls.Ops()["SendMessage"], n, st)
	}
}

func TestHTTPErrorsArguments(t *testing.T) {
	for _, up := range []string{"", "127.0.0.1:4566", "ftp://x"} {
		if h, err := faults.NewHTTPErrors(up); err == nil {
			_ = h.Close()
			t.Errorf("NewHTTPErrors(%q) accepted", up)
		}
	}
	h := newHTTPErrors(t, awstest.Endpoint(t))
	for _, r := range []faults.Rule{{Kind: "Nope", Share: 1}, {Kind: faults.Throttling, Share: 2}, {Kind: faults.Throttling, Share: 1, Limit: -1}} {
		if err := h.Set(r); err == nil {
			t.Errorf("rule %+v accepted", r)
		}
	}
	if err := h.InjectNext(faults.Throttling, 0); err == nil {
		t.Error("InjectNext(0) accepted")
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLostTransactionResponse: the SDK fills TransactWriteItems' ClientRequestToken and
// retries with the same token. Real DynamoDB answers such a retry (within 10 minutes)
// with success without applying it again; moto ignores the token and runs the
// transaction again, so the retry of a conditional transaction whose answer was lost
// fails with TransactionCanceledException. Either way the first attempt was applied.
func TestLostTransactionResponse(t *testing.T) {
	tbl := table(t)
	h := newHTTPErrors(t, awstest.Endpoint(t))
	c, calls := ddbVia(t, h.URL(), 3)
	if err := h.InjectNext(faults.LostResponse, 1, "DynamoDB_20120810.TransactWriteItems"); err != nil {
		t.Fatal(err)
	}
	_, err := c.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Put: &types.Put{
		TableName: aws.String(tbl), Item: key("txn"), ConditionExpression: aws.String("attribute_not_exists(pk)"),
	}}}})
	var canceled *types.TransactionCanceledException
	switch {
	case err == nil:
		t.Log("the retry succeeded: the emulator honours ClientRequestToken, as DynamoDB does")
	case errors.As(err, &canceled):
		t.Logf("the retry ran the transaction again (the emulator ignores ClientRequestToken; DynamoDB would answer success): %v", err)
	default:
		t.Fatal(err)
	}
	if calls.Total() != 2 || h.Stats().Forwarded != 2 {
		t.Fatalf("%d attempts, stats %+v: want 2 attempts, both forwarded", calls.Total(), h.Stats())
	}
	out, err := awstest.DynamoDB(t).GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(tbl), Key: key("txn"), ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item == nil {
		t.Fatalf("the first attempt was not applied: %v, %v", out, err)
	}
}
