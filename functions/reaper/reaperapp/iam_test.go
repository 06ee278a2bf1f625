package reaperapp_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/functions/reaper/reaperapp"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
)

// TestTemplateGrantsEveryCall runs a sweep that reaps a crashed lease, records every
// DynamoDB action the reaper takes and on what (an SDK middleware), and checks that the
// ReaperFunction's role in template.yaml, as the SAM transform outputs it, allows each.
// moto does not enforce IAM.
func TestTemplateGrantsEveryCall(t *testing.T) {
	ctx := context.Background()
	table := awstest.Name(t, "idem")
	if err := persistence.CreateTable(ctx, awstest.DynamoDB(t), table); err != nil {
		t.Fatal(err)
	}
	rec := &exampletest.IAMCalls{}
	ddb := awstest.DynamoDB(t, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, rec.APIOption) })
	// A crashed holder's record: IN_PROGRESS, its lease ended an hour ago.
	store, err := persistence.NewDynamoStore(awstest.DynamoDB(t), table)
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	if _, _, err := store.Create(ctx, &persistence.Record{Key: "test#crashed", Status: persistence.StatusInProgress, LeaseToken: "t", LeaseUntil: past,
		Inflight: "0", ExpiresAt: past.Add(48 * time.Hour), PayloadHash: "h", Attempt: 1, Owner: "crashed", CreatedAt: past, UpdatedAt: past}, past); err != nil {
		t.Fatal(err)
	}
	h, err := reaperapp.New(reaperapp.Config{IdempotencyTable: table, Shards: 2, Grace: time.Second, Margin: time.Second, MetricsNamespace: "Test"},
		reaperapp.Deps{DynamoDB: ddb, Logs: &bytes.Buffer{}, Metrics: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "events", "scheduled.json"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := lambda.NewHandler(h).Invoke(ctx, raw); err != nil || !bytes.Contains(out, []byte(`"Reaped":1`)) {
		t.Fatalf("sweep: %s %v, want one reaped", out, err)
	}
	tpl, err := samtemplate.Transform(ctx, "../../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	allowed, err := tpl.FunctionAllowed("ReaperFunction")
	if err != nil {
		t.Fatal(err)
	}
	calls := rec.Used()
	if len(calls) < 2 {
		t.Fatalf("calls %v: want at least the index query and the reaping update", calls)
	}
	for _, c := range calls {
		action, res, _ := strings.Cut(c, " ")
		res = strings.Replace(res, table, "IdempotencyTable", 1) // the template's logical id
		if !slices.Contains(allowed[res], action) {
			t.Errorf("template.yaml does not allow %s on %s (ReaperFunction's role allows %v)", action, res, allowed[res])
		}
	}
	t.Logf("calls: %v", calls)
}
