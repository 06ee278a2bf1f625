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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

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
