package demo_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
)

// TestCrashAtFindsEveryPhase drives the store's own requests to moto through CrashAt,
// one wrapper per phase, and checks that each phase fires at its request and no other
// (step-called before the step's record goes out, the others after their request),
// on the default layout and on one with other attribute names. (The crash-injection
// suite counts kills by phase; when idem's expressions changed shape, the acquire, sent
// and reap phases silently stopped firing and its children were all killed from outside.)
func TestCrashAtFindsEveryPhase(t *testing.T) {
	ctx := context.Background()
	ddb := awstest.DynamoDB(t)
	for _, name := range []string{"default", "powertools"} {
		t.Run(name, func(t *testing.T) {
			table := awstest.Name(t, "crash")
			layout := persistence.Layout{Table: table}
			if name == "powertools" {
				layout = persistence.PowertoolsLayout(table)
			}
			if err := persistence.CreateTableFor(ctx, ddb, layout); err != nil {
				t.Fatal(err)
			}
			fired := map[string]int{}
			var api persistence.DynamoDBAPI = ddb
			for _, p := range demo.Phases {
				var err error
				if api, err = demo.CrashAt(api, p, 1, func() { fired[p]++ }); err != nil {
					t.Fatal(err)
				}
			}
			store, err := persistence.NewDynamoStoreLayout(api, layout)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int{}
			step := func(what string, phases string, err error) {
				t.Helper()
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				for _, phase := range strings.Fields(phases) {
					want[phase]++
				}
				if fmt.Sprint(fired) != fmt.Sprint(want) {
					t.Fatalf("after %s: phases fired %v, want %v", what, fired, want)
				}
			}
			now := time.Now()
			create := func(key, token string, until time.Time) error {
				_, created, err := store.Create(ctx, &persistence.Record{
					Key: key, Status: persistence.StatusInProgress, LeaseToken: token, LeaseUntil: until,
					Inflight: "0", ExpiresAt: now.Add(time.Hour), PayloadHash: "h", Attempt: 1,
				}, now)
				if err == nil && !created {
					err = fmt.Errorf("record %s already there", key)
				}
				return err
			}
			lease := func(key, token string) persistence.Lease {
				return persistence.Lease{Key: key, Token: token, Until: now.Add(time.Minute), Shard: "0"}
			}

			step("an acquire", demo.PhaseAcquire, create("k1", "t1", now.Add(time.Minute)))
			_, err = store.Get(ctx, "k1", now)
			step("a read", "", err)
			// A step: its record dies before it goes out (step-called) and right after it
			// (step-recorded).
			step("a step recorded", demo.PhaseStepCalled+" "+demo.PhaseStepRecorded, store.AddStep(ctx, lease("k1", "t1"), "charge", nil, time.Time{}, now))
			biz := store.Key("business#k1")
			step("a completion with a business write and an outbound message", demo.PhaseCommit, store.Complete(ctx, lease("k1", "t1"), persistence.Completion{
				Response: []byte("ok"), ExpiresAt: now.Add(time.Hour),
				Writes: []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String(table), Item: biz}}},
				Outbox: []idem.Message{{QueueURL: "https://sqs.us-east-1.amazonaws.com/000000000000/out", Body: "{}"}},
			}, now))
			step("the mark that it was sent", demo.PhaseSent, store.MarkSent(ctx, "k1", "t1", 1, nil, now))

			// Phases fire once (n = 1): the second acquire and a handler's own failure
			// must not count as a reap, whose wrapper has seen nothing yet.
			step("a second acquire", "", create("k2", "t2", now.Add(-time.Minute)))
			step("a third acquire", "", create("k3", "t3", now.Add(time.Minute)))
			step("a handler's failure", "", store.FailWith(ctx, lease("k3", "t3"), persistence.Failure{Reason: "bad input", Category: persistence.CategoryInvalid}, now.Add(time.Hour), now))
			stale, _, err := store.Stale(ctx, "0", now, 10, "")
			step("the reaper's listing", "", err)
			if len(stale) != 1 || stale[0].Key != "k2" {
				t.Fatalf("stale locks %+v, want k2's", stale)
			}
			step("a reap", demo.PhaseReap, store.Reap(ctx, stale[0], "lease ended", now))

			// A completion without business writes is an UpdateItem: a commit too.
			var commits int
			api, err = demo.CrashAt(ddb, demo.PhaseCommit, 1, func() { commits++ })
			if err != nil {
				t.Fatal(err)
			}
			plain, err := persistence.NewDynamoStoreLayout(api, layout)
			if err != nil {
				t.Fatal(err)
			}
			if err := create("k4", "t4", now.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			if err := plain.Complete(ctx, lease("k4", "t4"), persistence.Completion{Response: []byte("ok"), ExpiresAt: now.Add(time.Hour)}, now); err != nil || commits != 1 {
				t.Fatalf("a completion without business writes: %v; the commit phase fired %d times, want 1", err, commits)
			}
		})
	}
}
