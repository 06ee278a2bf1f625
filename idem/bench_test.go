package idem_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
)

// The benchmarks measure idem's own overhead per message with the in-memory store: key
// derivation, payload hashing, the state machine, the batch processor. Store round trips
// are not in them (see TestRoundTrips and BENCHMARKS.md for those).

const benchBody = `{"payment_id":"pay-000123","account_id":"acct-042","amount_cents":125000,"currency":"EUR"}`

func benchClient(b *testing.B, cache int) *idem.Client {
	b.Helper()
	c, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "payments", CacheSize: cache})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

var benchWrite = types.TransactWriteItem{Update: &types.Update{
	TableName:        aws.String("ledger"),
	Key:              map[string]types.AttributeValue{"account_id": &types.AttributeValueMemberS{Value: "acct-042"}},
	UpdateExpression: aws.String("ADD balance_cents :a"),
}}

func benchHandler(context.Context, *idem.Request) (idem.Result, error) {
	return idem.Result{Response: []byte(`{"ok":true}`), Writes: []types.TransactWriteItem{benchWrite}}, nil
}

func BenchmarkFirstDelivery(b *testing.B) {
	c := benchClient(b, 0)
	ctx := context.Background()
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = fmt.Sprintf("payment:pay-%09d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Do(ctx, &idem.Request{Key: keys[i], Payload: []byte(benchBody)}, benchHandler); err != nil {
			b.Fatal(err)
		}
	}
}

func benchDuplicate(b *testing.B, cache int) {
	c := benchClient(b, cache)
	ctx := context.Background()
	req := &idem.Request{Key: "payment:pay-000123", Payload: []byte(benchBody)}
	if _, err := c.Do(ctx, req, benchHandler); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := c.Do(ctx, req, benchHandler)
		if err != nil || !res.Replayed {
			b.Fatal(res, err)
		}
	}
}

func BenchmarkDuplicate(b *testing.B)          { benchDuplicate(b, 0) }
func BenchmarkDuplicateWarmCache(b *testing.B) { benchDuplicate(b, 1000) }

// BenchmarkBatchFIFO processes 10-record FIFO batches (5 groups) end to end through
// BatchProcessor and the SQS handler; ns/msg is the per-message cost.
func BenchmarkBatchFIFO(b *testing.B) {
	c := benchClient(b, 0)
	rec, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: idem.HandlerFunc(benchHandler)})
	if err != nil {
		b.Fatal(err)
	}
	p, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: rec})
	if err != nil {
		b.Fatal(err)
	}
	runBatches(b, p)
}

// runBatches times p over b.N batches of benchBatches; ns/msg is the per-message cost.
func runBatches(b *testing.B, p *sqsbatch.BatchProcessor) {
	b.Helper()
	batches := benchBatches(b.N)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := p.Process(ctx, batches[i])
		if err != nil || len(resp.BatchItemFailures) != 0 {
			b.Fatal(resp, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*10), "ns/msg")
}

// benchBatches are n FIFO batches of 10 first deliveries over 5 groups.
func benchBatches(n int) []events.SQSEvent {
	batches := make([]events.SQSEvent, n)
	for i := range batches {
		for j := range 10 {
			id := fmt.Sprintf("%d-%d", i, j)
			batches[i].Records = append(batches[i].Records, events.SQSMessage{
				MessageId: "m-" + id, Body: benchBody,
				Attributes: map[string]string{"MessageGroupId": fmt.Sprintf("g%d", j%5), "MessageDeduplicationId": "payment:" + id},
			})
		}
	}
	return batches
}
