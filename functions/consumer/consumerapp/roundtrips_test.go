package consumerapp_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// TestExampleRoundTrips counts the requests the consumer of the example sends for a
// 10-record FIFO batch, as SDK middleware sees them (after the retry step): a first
// delivery, a duplicate reaching a cold container, a duplicate reaching a warm one. The
// machinery's requests are counted apart from the handler's own: the handler reads
// through clients of its own (example.Deps), and its guard reads through idem
// (Attempt.Applied, a GetItem of a table other than the records') are the handler's too.
//
// The machinery's counts follow from what the handler returned and what the records
// say, whatever the example's shape: under the lease mode each record costs an acquire
// (PutItem) and its commit (TransactWriteItems with business writes, else UpdateItem),
// plus an UpdateItem per step recorded and one marking its outbound messages sent, if
// it has any; under the single-transaction mode its commit (TransactWriteItems, else
// PutItem). The batch's outbound messages go out in one SendMessageBatch per queue and
// 10 messages. Duplicates cost the machinery one PutItem each on a cold container
// (one TransactWriteItems under the single-transaction mode), nothing on a warm one;
// they do not run the handler (but on a cold container under the single-transaction
// mode, which runs it before it reads the record).
func TestExampleRoundTrips(t *testing.T) {
	for _, mode := range []idem.Mode{idem.ModeLease, idem.ModeSingleTransaction} {
		t.Run(mode.String(), func(t *testing.T) { exampleRoundTrips(t, mode) })
	}
}

func exampleRoundTrips(t *testing.T, mode idem.Mode) {
	if err := example.CheckMode(exampletest.Example(t), mode); err != nil {
		t.Skip(err)
	}
	f := newFixture(t, map[string]string{"IDEMPOTENCY_MODE": mode.String()})
	var machinery, handler struct{ ddb, sqs *awstest.Calls }
	machinery.ddb, machinery.sqs, handler.ddb, handler.sqs = awstest.NewCalls(), awstest.NewCalls(), awstest.NewCalls(), awstest.NewCalls()
	ddb := awstest.DynamoDB(t, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, machinery.ddb.APIOption) })
	q := awstest.SQS(t, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, machinery.sqs.APIOption) })
	guards := &guardReads{DynamoDBAPI: ddb, records: f.cfg.IdempotencyTable}
	// The example's handler, on clients of its own, watched: what it returns decides
	// the machinery's counts.
	business, err := f.ex.NewHandler(example.Deps{
		Env:      f.cfg.Env,
		DynamoDB: awstest.DynamoDB(t, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, handler.ddb.APIOption) }),
		SQS:      awstest.SQS(t, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, handler.sqs.APIOption) }),
		HTTP:     &http.Client{},
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := &results{}
	cfg := f.cfg
	cfg.Handler = seen.watch(business)
	newHandler := func() lambda.Handler {
		h, err := consumerapp.New(cfg, consumerapp.Deps{DynamoDB: guards, SQS: q, Logs: &f.logs, Metrics: &f.emf, Owner: t.Name()})
		if err != nil {
			t.Fatal(err)
		}
		return lambda.NewHandler(h)
	}
	valid := f.traffic(t, 10, 10)
	cold := newHandler()
	warm := newHandler()
	for i, tc := range []struct {
		name string
		h    lambda.Handler
	}{{"first delivery", cold}, {"duplicate, cold container", warm}, {"duplicate, warm container", warm}} {
		for _, c := range []*awstest.Calls{machinery.ddb, machinery.sqs, handler.ddb, handler.sqs} {
			c.Reset()
		}
		guards.reset()
		seen.reset()
		if failed := exampletest.Invoke(t, tc.h, context.Background(), exampletest.Encode(t, f.records(valid, fmt.Sprint(i)))); len(failed) != 0 {
			t.Fatalf("%s: failures %v", tc.name, failed)
		}
		wantDDB, wantSQS := map[string]int{}, map[string]int{}
		switch {
		case i == 0:
			wantDDB, wantSQS = f.firstDelivery(t, mode, valid, seen)
		case i == 1 && mode == idem.ModeSingleTransaction:
			wantDDB["TransactWriteItems"] = len(valid) // refused by the record's condition: the stored outcome
		case i == 1:
			wantDDB["PutItem"] = len(valid)
		}
		d := machinery.ddb.Ops()
		if n := guards.count(); n > 0 {
			d["GetItem"] -= n // the handler's guard reads
			if d["GetItem"] == 0 {
				delete(d, "GetItem")
			}
		}
		s := machinery.sqs.Ops()
		t.Logf("%-28s per 10 records: machinery DynamoDB %v, SQS %v; handler DynamoDB %v (and %d guard reads), SQS %v", tc.name, d, s,
			handler.ddb.Ops(), guards.count(), handler.sqs.Ops())
		if fmt.Sprint(d) != fmt.Sprint(wantDDB) || fmt.Sprint(s) != fmt.Sprint(wantSQS) {
			t.Errorf("%s: the machinery sent DynamoDB %v and SQS %v, want %v and %v", tc.name, d, s, wantDDB, wantSQS)
		}
		// A duplicate does not run the handler, except on a cold container under the
		// single-transaction mode, which runs it before it reads the record.
		if i > 0 && (mode == idem.ModeLease || i == 2) && (handler.ddb.Total()+handler.sqs.Total()+guards.count() != 0 || seen.runs() != 0) {
			t.Errorf("%s: the handler ran %d times and sent %v %v (%d guard reads), want nothing", tc.name, seen.runs(), handler.ddb.Ops(), handler.sqs.Ops(), guards.count())
		}
	}
	f.checkApplied(t, "after three deliveries", valid, valid)
	f.checkOutbound(t, valid)
}

// firstDelivery returns the machinery's requests for a first delivery of valid, from the
// handler's results (seen) and the records' steps.
func (f *fixture) firstDelivery(t *testing.T, mode idem.Mode, valid []example.Message, seen *results) (ddb, sqsOps map[string]int) {
	t.Helper()
	ddb, sqsOps = map[string]int{}, map[string]int{}
	store, err := persistence.NewDynamoStoreLayout(f.ddb, f.cfg.Layout)
	if err != nil {
		t.Fatal(err)
	}
	outbound := map[string]int{} // queue -> messages
	for _, m := range valid {
		res, ok := seen.of(m.Key)
		if !ok {
			t.Fatalf("the handler did not run for %s", m.ID)
		}
		commit := "UpdateItem"
		if mode == idem.ModeSingleTransaction {
			commit = "PutItem"
		} else {
			ddb["PutItem"]++
		}
		if len(res.Writes) > 0 {
			commit = "TransactWriteItems"
		}
		ddb[commit]++
		if len(res.Messages) > 0 {
			ddb["UpdateItem"]++ // marked sent
		}
		for _, msg := range res.Messages {
			outbound[msg.QueueURL]++
		}
		pk, err := idem.RecordKey(f.cfg.Scope, m.Key, false)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := store.Get(context.Background(), pk, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.Steps) > 0 {
			ddb["UpdateItem"] += len(rec.Steps)
		}
	}
	for _, n := range outbound {
		sqsOps["SendMessageBatch"] += (n + 9) / 10
	}
	return ddb, sqsOps
}

// results watches a handler: what it returned for each key.
type results struct {
	mu  sync.Mutex
	res map[string]idem.Result
	n   int
}

func (r *results) watch(h idem.Handler) idem.Handler {
	return idem.HandlerFunc(func(ctx context.Context, req *idem.Request) (idem.Result, error) {
		res, err := h.Handle(ctx, req)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.n++
		if err == nil {
			if r.res == nil {
				r.res = map[string]idem.Result{}
			}
			r.res[req.Key] = res
		}
		return res, err
	})
}

func (r *results) of(key string) (idem.Result, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res, ok := r.res[key]
	return res, ok
}

func (r *results) runs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *results) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res, r.n = nil, 0
}

// guardReads counts the GetItems of another table than the records': a handler's reads
// of its guards through idem (Attempt.Applied), which reach DynamoDB through the
// machinery's client.
type guardReads struct {
	persistence.DynamoDBAPI
	records string
	mu      sync.Mutex
	n       int
}

func (g *guardReads) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if aws.ToString(in.TableName) != g.records {
		g.mu.Lock()
		g.n++
		g.mu.Unlock()
	}
	return g.DynamoDBAPI.GetItem(ctx, in, o...)
}

func (g *guardReads) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

func (g *guardReads) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n = 0
}
