package idem_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsbatch"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
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

// discard is an exporter that drops what it is given: the benchmark measures what
// tracing costs the record's path, not an exporter.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkTracing is BenchmarkBatchFIFO with an outbound message per record (so the
// send and the mark are traced too), with tracing off (no TracerProvider: what the
// functions run with TRACING=none), on (every trace sampled, spans batched in the
// background as internal/tracing sets them up) and on with nothing sampled (ratio 0).
// ns/msg is the per-message cost; BENCHMARKS.md compares them with benchstat.
func BenchmarkTracing(b *testing.B) {
	for _, mode := range []string{"off", "on", "unsampled"} {
		b.Run("tracing="+mode, func(b *testing.B) {
			var tp trace.TracerProvider
			switch mode {
			case "on":
				p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
				defer func() { _ = p.Shutdown(context.Background()) }()
				tp = p
			case "unsampled":
				p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))))
				defer func() { _ = p.Shutdown(context.Background()) }()
				tp = p
			}
			out := &capture{}
			c, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "payments", Sender: out, Tracer: tp})
			if err != nil {
				b.Fatal(err)
			}
			h := idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
				return idem.Result{Response: []byte(`{"ok":true}`), Writes: []types.TransactWriteItem{benchWrite},
					Messages: []idem.Message{{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/receipts.fifo", Body: `{"receipt":1}`, GroupID: "acct-042"}}}, nil
			})
			rec, err := sqsbatch.NewSQSHandler(sqsbatch.SQSConfig{Client: c, Handler: h})
			if err != nil {
				b.Fatal(err)
			}
			p, err := sqsbatch.NewBatchProcessor(sqsbatch.BatchConfig{Handle: rec, Outbox: c, Tracer: tp})
			if err != nil {
				b.Fatal(err)
			}
			runBatches(b, p)
		})
	}
}

// readCounter counts the items DynamoDB reads for the sweep: Query and Scan report them
// in ScannedCount.
type readCounter struct {
	persistence.DynamoDBAPI
	scanned atomic.Int64
}

func (r *readCounter) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := r.DynamoDBAPI.Query(ctx, in, o...)
	if err == nil {
		r.scanned.Add(int64(out.ScannedCount))
	}
	return out, err
}

// BenchmarkReaperSweep fills a table with IDEM_BENCH_RECORDS completed records (default
// 100 000) and 10 stale locks, then measures one sweep of the sparse index (items read,
// time) against one scan-based sweep of the same table, for contrast. Run it with
// `make bench`; it takes a few minutes against moto, most of it loading the table.
func BenchmarkReaperSweep(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("IDEM_BENCH_RECORDS")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	ddb := awstest.DynamoDB(b)
	table := awstest.Name(b, "reap")
	if err := persistence.CreateTable(ctx, ddb, table); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	item := func(i int, stale bool) map[string]types.AttributeValue {
		it := map[string]types.AttributeValue{
			"pk":          &types.AttributeValueMemberS{Value: fmt.Sprintf("bench#pay-%07d", i)},
			"status":      &types.AttributeValueMemberS{Value: "COMPLETED"},
			"lease_token": &types.AttributeValueMemberS{Value: fmt.Sprintf("t%d", i)},
			"lease_until": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(-time.Hour).UnixMilli(), 10)},
			"expires_at":  &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(24*time.Hour).Unix(), 10)},
			"response":    &types.AttributeValueMemberB{Value: []byte(`{"payment_id":"x","amount_cents":125000}`)},
			"attempt":     &types.AttributeValueMemberN{Value: "1"},
		}
		if stale {
			it["status"] = &types.AttributeValueMemberS{Value: "IN_PROGRESS"}
			it["inflight"] = &types.AttributeValueMemberS{Value: strconv.Itoa(i % 4)}
		}
		return it
	}
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	var loadErr atomic.Value
	for lo := 0; lo < n+10; lo += 25 {
		var reqs []types.WriteRequest
		for i := lo; i < min(lo+25, n+10); i++ {
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item(i, i >= n)}})
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			pending := map[string][]types.WriteRequest{table: reqs}
			for len(pending[table]) > 0 {
				out, err := ddb.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
				if err != nil {
					loadErr.Store(err)
					return
				}
				pending = out.UnprocessedItems
			}
		}()
	}
	wg.Wait()
	if err, ok := loadErr.Load().(error); ok {
		b.Fatal(err)
	}
	b.Logf("loaded %d completed records and 10 stale locks in %s", n, time.Since(start).Round(time.Millisecond))

	rc := &readCounter{DynamoDBAPI: ddb}
	store, _ := persistence.NewDynamoStore(rc, table)
	b.ResetTimer()
	var res reaper.SweepResult
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// Put the stale locks back for every iteration after the first.
		if i > 0 {
			for j := n; j < n+10; j++ {
				if _, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item(j, true)}); err != nil {
					b.Fatal(err)
				}
			}
		}
		rc.scanned.Store(0)
		b.StartTimer()
		var err error
		res, err = (&reaper.Reaper{Store: store, Shards: 4, Grace: time.Second}).Sweep(ctx)
		if err != nil || res.Reaped != 10 {
			b.Fatalf("sweep: %+v %v", res, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(rc.scanned.Load()), "items-read/sweep")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/sweep")

	// The contrast: a sweep that scans the table for expired leases.
	scanStart := time.Now()
	var scanned int64
	pages := dynamodb.NewScanPaginator(ddb, &dynamodb.ScanInput{
		TableName:                 aws.String(table),
		FilterExpression:          aws.String("#s = :ip AND lease_until < :cut"),
		ExpressionAttributeNames:  map[string]string{"#s": "status"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":ip": &types.AttributeValueMemberS{Value: "IN_PROGRESS"}, ":cut": &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().UnixMilli(), 10)}},
	})
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			b.Fatal(err)
		}
		scanned += int64(out.ScannedCount)
	}
	scanTime := time.Since(scanStart)
	b.ReportMetric(float64(scanned), "scan-items-read")
	b.ReportMetric(float64(scanTime.Milliseconds()), "scan-ms")
}
