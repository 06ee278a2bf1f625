package cost_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence/memstore"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/cost"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
)

// Prices (us-east-1, on-demand, first tier) used by the cost table; BENCHMARKS.md gives
// their sources and date.
const (
	priceWRU       = 0.625 / 1e6  // DynamoDB, per write request unit
	priceRRU       = 0.125 / 1e6  // DynamoDB, per read request unit
	priceSQS       = 0.50 / 1e6   // SQS FIFO, per request (64 KB chunk)
	priceGBSecond  = 0.0000133334 // Lambda arm64, per GB-second
	priceInvoke    = 0.20 / 1e6   // Lambda, per request
	memoryGB       = 256.0 / 1024 // the template's MemorySize
	costMessages   = 20           // messages per case
	pollerPerMsg   = 2.0 / 10     // the event source mapping: a ReceiveMessage and a DeleteMessageBatch per batch of 10
	invokesPerMsg  = 1.0 / 10     // one invocation per batch of 10
	recordsPerCall = 10           // BatchSize
)

// costRow is one case of one design, per message.
type costRow struct {
	design, name string
	units        cost.Units
	sqs          float64 // requests the function sent, per message
	ms           float64 // function time per message, measured against moto
}

// dollarsPerMillion prices the row with the function's memory in GB.
func (r costRow) dollarsPerMillion(memoryGB float64) float64 {
	perMsg := (r.units.Write+r.units.IndexWrite)*priceWRU + r.units.Read*priceRRU +
		(r.sqs+pollerPerMsg)*priceSQS + r.ms/1000*memoryGB*priceGBSecond + invokesPerMsg*priceInvoke
	return perMsg * 1e6
}

// deliver runs msgs through h in batches of 10; every record must succeed.
func deliver(t *testing.T, h lambda.Handler, msgs []events.SQSMessage) {
	t.Helper()
	for i := 0; i < len(msgs); i += recordsPerCall {
		if failed := exampletest.Invoke(t, h, context.Background(), exampletest.Encode(t, msgs[i:min(i+recordsPerCall, len(msgs))])); len(failed) > 0 {
			t.Fatalf("failures %v", failed)
		}
	}
}

// powertools is the non-atomic design of AWS Lambda Powertools' idempotency utility,
// reduced to its requests: a conditional PutItem takes the record (or returns the stored
// one), the example's handler runs, its business writes go as separate requests and its
// outbound messages as a SendMessage each, then an UpdateItem completes the record. A
// crash between a business write and the completion applies it twice on redelivery:
// that is the guarantee this project's transaction buys.
type powertools struct {
	ddb      *dynamodb.Client
	sqs      *sqs.Client
	table    string
	keys     idem.KeyRule
	business idem.Handler // the example's
	attempts *idem.Client // on a MemoryStore: the Attempt the handler needs, no request
	cache    map[string]bool
}

func (p *powertools) handle(ctx context.Context, msg events.SQSMessage) error {
	key, err := p.keys.Key(msg)
	if err != nil {
		return err
	}
	if p.cache[key] {
		return nil
	}
	now := time.Now()
	_, err = p.ddb.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(p.table),
		Item: map[string]types.AttributeValue{
			"id": &types.AttributeValueMemberS{Value: key}, "status": &types.AttributeValueMemberS{Value: "INPROGRESS"},
			"expiration":             &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(time.Hour).Unix(), 10)},
			"in_progress_expiration": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(30*time.Second).UnixMilli(), 10)},
			"validation":             &types.AttributeValueMemberS{Value: strings.Repeat("h", 64)},
		},
		ConditionExpression:      aws.String("attribute_not_exists(id) OR expiration < :now OR (#s = :inprogress AND in_progress_expiration < :nowms)"),
		ExpressionAttributeNames: map[string]string{"#s": "status"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Unix(), 10)}, ":nowms": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixMilli(), 10)},
			":inprogress": &types.AttributeValueMemberS{Value: "INPROGRESS"},
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		p.cache[key] = true // COMPLETED in these cases: the stored response is returned
		return nil
	}
	if err != nil {
		return err
	}
	// The handler runs under an Attempt of idem's on a MemoryStore, which sends nothing:
	// its writes and messages are the baseline's to make.
	var res idem.Result
	if _, err := p.attempts.Do(ctx, &idem.Request{Key: key, Payload: []byte(msg.Body)}, func(ctx context.Context, req *idem.Request) (idem.Result, error) {
		r, err := p.business.Handle(ctx, req)
		res = r
		r.Messages = nil
		return r, err
	}); err != nil {
		return err
	}
	for _, w := range res.Writes {
		if err := writeAlone(ctx, p.ddb, w); err != nil {
			return err
		}
	}
	for i, m := range res.Messages {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(m.QueueURL), MessageBody: aws.String(m.Body)}
		if m.GroupID != "" {
			in.MessageGroupId = aws.String(m.GroupID)
		}
		if strings.HasSuffix(m.QueueURL, ".fifo") {
			in.MessageDeduplicationId = aws.String(outbox.DeduplicationID(fmt.Sprint(key, "#", i)))
		}
		if _, err := p.sqs.SendMessage(ctx, in); err != nil {
			return err
		}
	}
	_, err = p.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(p.table), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: key}},
		UpdateExpression:          aws.String("SET #s = :done, #d = :data"),
		ExpressionAttributeNames:  map[string]string{"#s": "status", "#d": "data"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":done": &types.AttributeValueMemberS{Value: "COMPLETED"}, ":data": &types.AttributeValueMemberS{Value: string(res.Response)}},
	})
	if err == nil {
		p.cache[key] = true
	}
	return err
}

// writeAlone makes one write of a transaction a request of its own. A condition check
// has none: the baseline has no transaction for it to hold back.
func writeAlone(ctx context.Context, ddb *dynamodb.Client, w types.TransactWriteItem) error {
	var err error
	switch {
	case w.Put != nil:
		_, err = ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: w.Put.TableName, Item: w.Put.Item, ConditionExpression: w.Put.ConditionExpression,
			ExpressionAttributeNames: w.Put.ExpressionAttributeNames, ExpressionAttributeValues: w.Put.ExpressionAttributeValues})
	case w.Update != nil:
		_, err = ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: w.Update.TableName, Key: w.Update.Key, UpdateExpression: w.Update.UpdateExpression,
			ConditionExpression: w.Update.ConditionExpression, ExpressionAttributeNames: w.Update.ExpressionAttributeNames, ExpressionAttributeValues: w.Update.ExpressionAttributeValues})
	case w.Delete != nil:
		_, err = ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: w.Delete.TableName, Key: w.Delete.Key, ConditionExpression: w.Delete.ConditionExpression,
			ExpressionAttributeNames: w.Delete.ExpressionAttributeNames, ExpressionAttributeValues: w.Delete.ExpressionAttributeValues})
	}
	return err
}

// journalRecords is an example whose records can live in one of its own tables, each
// its operation's journal entry (idem.Result.HomeGuard): that table's layout, and the
// consumer's variables that put the records there. The ledger is one.
type journalRecords interface {
	JournalRecords(table string) (persistence.Layout, map[string]string)
}

// TestCostPerMillion meters the four cases (first delivery, duplicate, warm duplicate,
// takeover after a crash) of this consumer and of the Powertools-style baseline, and
// prints the cost table of BENCHMARKS.md with COST_TABLE=1 (make cost), at the MemorySize the transformed template gives the consumer. Units come from
// the requests by DynamoDB's rules (package cost); SQS requests are counted by a
// middleware; function time is measured in a second pass without the meter's reads.
// Without COST_TABLE (make test) it checks the units only, on one batch per case (the
// units per message do not depend on the number of batches), without the timed pass,
// which checks nothing and only measures.
func TestCostPerMillion(t *testing.T) {
	table := os.Getenv("COST_TABLE") != ""
	messages := costMessages
	if !table {
		messages = recordsPerCall
	}
	f := newWired(t)
	ctx := context.Background()
	tpl, err := samtemplate.Transform(ctx, exampletest.TemplatePath())
	if err != nil {
		t.Fatal(err)
	}
	var fn struct{ MemorySize float64 }
	if err := tpl.Props("ConsumerFunction", &fn); err != nil || fn.MemorySize == 0 {
		t.Fatalf("ConsumerFunction MemorySize %v: %v", fn.MemorySize, err)
	}
	memoryGB := fn.MemorySize / 1024
	ptTable := awstest.Name(t, "pt")
	if err := awstest.CreateTable(ctx, f.ddb, &dynamodb.CreateTableInput{
		TableName: aws.String(ptTable), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		t.Fatal(err)
	}
	// The designs: ours in both modes (the single-transaction mode unless the example
	// needs the lease: example.LeaseOnly), each again with the records in a table of the
	// example's when it offers one (journalRecords: the variables a team sets for it,
	// read as the function reads them), and the baseline.
	type design struct {
		name  string
		cfg   consumerapp.Config
		store *persistence.DynamoStore
	}
	ourDesign := func(name string, cfg consumerapp.Config, mode idem.Mode) design {
		cfg.Mode = mode
		store, err := persistence.NewDynamoStoreLayout(f.ddb, cfg.Layout)
		if err != nil {
			t.Fatal(err)
		}
		return design{name: name, cfg: cfg, store: store}
	}
	modeErr := example.CheckMode(f.ex, idem.ModeSingleTransaction)
	designs := []design{ourDesign("ours", f.cfg, idem.ModeLease)}
	if modeErr == nil {
		designs = append(designs, ourDesign("ours, single-transaction", f.cfg, idem.ModeSingleTransaction))
	}
	tables := f.tables(t)
	if jr, ok := f.ex.(journalRecords); ok {
		foldTable := awstest.Name(t, "fold")
		layout, vars := jr.JournalRecords(foldTable)
		if err := persistence.CreateTableFor(ctx, f.ddb, layout); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = f.ddb.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(foldTable)})
		})
		if tables[foldTable], err = cost.Describe(ctx, f.ddb, foldTable); err != nil {
			t.Fatal(err)
		}
		foldCfg := f.st.Config(t, vars)
		designs = append(designs, ourDesign("ours, journal is the record", foldCfg, idem.ModeLease))
		if modeErr == nil {
			designs = append(designs, ourDesign("ours, single-transaction, journal is the record", foldCfg, idem.ModeSingleTransaction))
		}
	}
	designs = append(designs, design{name: "baseline"})
	if modeErr != nil {
		t.Logf("no single-transaction designs: %v", modeErr)
	}
	if tables[ptTable], err = cost.Describe(ctx, f.ddb, ptTable); err != nil {
		t.Fatal(err)
	}
	meter := cost.NewMeter(f.ddb, tables)
	metered := awstest.DynamoDB(t, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, meter.APIOption) })
	calls := awstest.NewCalls()
	sqsC := awstest.SQS(t, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, calls.APIOption) })
	var cur design // the design being measured
	consumer := func(ddb *dynamodb.Client) lambda.Handler {
		h, err := consumerapp.New(cur.cfg, consumerapp.Deps{DynamoDB: ddb, SQS: sqsC, Logs: io.Discard, Metrics: io.Discard, Owner: "cost"})
		if err != nil {
			t.Fatal(err)
		}
		return lambda.NewHandler(h)
	}
	baseline := func(ddb *dynamodb.Client) *powertools {
		business, err := f.ex.NewHandler(example.Deps{Env: f.cfg.Env, DynamoDB: ddb, SQS: sqsC, HTTP: &http.Client{}})
		if err != nil {
			t.Fatal(err)
		}
		attempts, err := idem.New(idem.Config{Store: memstore.NewMemoryStore(), Scope: "baseline"})
		if err != nil {
			t.Fatal(err)
		}
		return &powertools{ddb: ddb, sqs: sqsC, table: ptTable, keys: idem.KeyRule{Source: f.cfg.KeySource, Field: f.cfg.KeyField},
			business: business, attempts: attempts, cache: map[string]bool{}}
	}
	// crash leaves each message's record IN_PROGRESS with a lease that has ended, as a
	// consumer killed mid-handler leaves it (ours), or the baseline's INPROGRESS item.
	crash := func(msgs []events.SQSMessage) {
		past := time.Now().Add(-time.Hour)
		for _, m := range msgs {
			key := *m.MessageAttributes[idem.KeyAttribute].StringValue
			var err error
			if cur.store == nil {
				if _, err := f.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(ptTable), Item: map[string]types.AttributeValue{
					"id": &types.AttributeValueMemberS{Value: key}, "status": &types.AttributeValueMemberS{Value: "INPROGRESS"},
					"expiration":             &types.AttributeValueMemberN{Value: strconv.FormatInt(past.Add(2*time.Hour).Unix(), 10)},
					"in_progress_expiration": &types.AttributeValueMemberN{Value: strconv.FormatInt(past.UnixMilli(), 10)},
				}}); err != nil {
					t.Fatal(err)
				}
				continue
			}
			// The key the design's consumer derives (the payment id, with the journal as
			// the record).
			if key, err = (idem.KeyRule{Source: cur.cfg.KeySource, Field: cur.cfg.KeyField}).Key(m); err != nil {
				t.Fatal(err)
			}
			pk, _ := idem.RecordKey(cur.cfg.Scope, key, false)
			hash, _ := idem.HashPayload([]byte(m.Body))
			if _, _, err := cur.store.Create(ctx, &persistence.Record{Key: pk, Status: persistence.StatusInProgress, LeaseToken: "crashed", LeaseUntil: past,
				Inflight: "0", ExpiresAt: past.Add(2 * time.Hour), PayloadHash: hash, Attempt: 1, Owner: "crashed", CreatedAt: past, UpdatedAt: past}, past); err != nil {
				t.Fatal(err)
			}
		}
	}
	// redelivered is msgs as SQS delivers them again (ApproximateReceiveCount 2): a
	// visibility timeout, a lost delete, a batch that failed after its commits.
	redelivered := func(msgs []events.SQSMessage) []events.SQSMessage {
		out := make([]events.SQSMessage, len(msgs))
		for i, m := range msgs {
			m.Attributes = maps.Clone(m.Attributes)
			m.Attributes["ApproximateReceiveCount"] = "2"
			out[i] = m
		}
		return out
	}
	type runner func(msgs []events.SQSMessage, ddb *dynamodb.Client) (setup, measured func())
	ours := map[string]runner{
		"first delivery": func(msgs []events.SQSMessage, ddb *dynamodb.Client) (func(), func()) {
			h := consumer(ddb)
			return func() {}, func() { deliver(t, h, msgs) }
		},
		"duplicate": func(msgs []events.SQSMessage, ddb *dynamodb.Client) (func(), func()) {
			return func() { deliver(t, consumer(f.ddb), msgs) }, func() { deliver(t, consumer(ddb), msgs) }
		},
		"redelivery": func(msgs []events.SQSMessage, ddb *dynamodb.Client) (func(), func()) {
			return func() { deliver(t, consumer(f.ddb), msgs) }, func() { deliver(t, consumer(ddb), redelivered(msgs)) }
		},
		"warm duplicate": func(msgs []events.SQSMessage, ddb *dynamodb.Client) (func(), func()) {
			h := consumer(ddb)
			return func() { deliver(t, h, msgs) }, func() { deliver(t, h, msgs) }
		},
		"takeover": func(msgs []events.SQSMessage, ddb *dynamodb.Client) (func(), func()) {
			return func() { crash(msgs) }, func() { deliver(t, consumer(ddb), redelivered(msgs)) }
		},
	}
	runBaseline := func(p *powertools, msgs []events.SQSMessage) {
		for _, m := range msgs {
			if err := p.handle(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	theirs := map[string]runner{
		"first delivery": func(msgs []events.SQSMessage, ddb *dynamodb.Client) (func(), func()) {
			p := baseline(ddb)
			return func() {}, func() { runBaseline(p, msgs) }
		},
		"duplicate": func(msgs []events.SQSMessage, ddb *dynamodb.Client) (func(), func()) {
			return func() { runBaseline(baseline(f.ddb), msgs) }, func() { runBaseline(baseline(ddb), msgs) }
		},
		"redelivery": func(msgs []events.SQSMessage, ddb *dynamodb.Client) (func(), func()) {
			return func() { runBaseline(baseline(f.ddb), msgs) }, func() { runBaseline(baseline(ddb), redelivered(msgs)) }
		},
		"warm duplicate": func(msgs []events.SQSMessage, ddb *dynamodb.Client) (func(), func()) {
			p := baseline(ddb)
			return func() { runBaseline(p, msgs) }, func() { runBaseline(p, msgs) }
		},
		"takeover": func(msgs []events.SQSMessage, ddb *dynamodb.Client) (func(), func()) {
			return func() { crash(msgs) }, func() { runBaseline(baseline(ddb), redelivered(msgs)) }
		},
	}
	cases := []string{"first delivery", "duplicate", "redelivery", "warm duplicate", "takeover"}
	var rows []costRow
	for di, d := range designs {
		cur = d
		runners := ours
		if d.store == nil {
			runners = theirs
		}
		for i, name := range cases {
			row := costRow{design: d.name, name: name}
			// Metered pass: units and SQS requests.
			setup, run := runners[name](f.messages(t, fmt.Sprintf("d%dc%dm", di, i), messages), metered)
			setup()
			meter.Reset()
			calls.Reset()
			run()
			u := meter.Units()
			n := float64(messages)
			row.units = cost.Units{Write: u.Write / n, IndexWrite: u.IndexWrite / n, Read: u.Read / n, Reported: u.Reported / n}
			row.sqs = float64(calls.Total()) / n
			if table {
				// Timed pass, on other keys, without the meter's own reads.
				setup, run = runners[name](f.messages(t, fmt.Sprintf("d%dc%dt", di, i), messages), f.ddb)
				setup()
				start := time.Now()
				run()
				row.ms = float64(time.Since(start).Microseconds()) / 1000 / n
			}
			rows = append(rows, row)
		}
	}
	// The units follow from DynamoDB's rules for items under 1 KB. For any example: a
	// warm duplicate costs nothing; a duplicate or a redelivery costs the lease mode and
	// the baseline the refused PutItem (1); a redelivery costs the single-transaction
	// mode the strongly consistent read of the record (1 RRU, see below).
	want := map[string][3]float64{} // design/case -> table write units, index write units, read units per message
	for _, d := range designs {
		want[d.name+"/warm duplicate"] = [3]float64{0, 0, 0}
		if d.store == nil || d.cfg.Mode == idem.ModeLease {
			want[d.name+"/duplicate"], want[d.name+"/redelivery"] = [3]float64{1, 0, 0}, [3]float64{1, 0, 0}
		} else {
			want[d.name+"/redelivery"] = [3]float64{0, 0, 1}
		}
	}
	// Every figure of the ledger, the wired default. Ours, first delivery:
	// the acquire (1), the transaction of completion (with the receipt stored in the
	// record), credit and journal entry (3 x 2), and the mark that the receipt was sent
	// (an UpdateItem, 1); the index gains the record at the acquire and loses it at the
	// mark. A takeover adds the compare-and-swap UpdateItem (1), which moves the index
	// entry's sort key (2 index writes). In the single-transaction mode the acquire goes:
	// the transaction (3 x 2) and the mark (1); the record enters the index with its
	// receipt pending (the reaper must find it if the sender dies) and leaves it at the
	// mark (2 index writes); a duplicate is the transaction refused by the record's
	// condition, a takeover that transaction and the one conditioned on the record it
	// found (which moves the index entry: 2 more). A transaction refused by a condition is
	// charged as its prepare, one unit per item (see package cost). A redelivery in that
	// mode reads the record first (one strongly consistent read of an item under 4 KB:
	// 1 RRU) and writes nothing. With the journal entry as the record, the transaction
	// holds two items instead of three: 2 units fewer, and a refused one 1 fewer.
	maps.Copy(want, map[string]map[string][3]float64{"ledger": {
		"ours/first delivery": {8, 2, 0}, "ours/takeover": {9, 3, 0},
		"ours, single-transaction/first delivery": {7, 2, 0}, "ours, single-transaction/duplicate": {3, 0, 0}, "ours, single-transaction/takeover": {7, 3, 1},
		"ours, journal is the record/first delivery": {6, 2, 0}, "ours, journal is the record/takeover": {7, 3, 0},
		"ours, single-transaction, journal is the record/first delivery": {5, 2, 0}, "ours, single-transaction, journal is the record/duplicate": {2, 0, 0},
		"ours, single-transaction, journal is the record/takeover": {5, 3, 1},
		"baseline/first delivery":                                  {4, 0, 0}, "baseline/takeover": {4, 0, 0},
	}}[f.ex.Name()])
	var b strings.Builder
	b.WriteString("| design | case | table WRU | index WRU | RRU | moto reported | SQS requests (function + poller) | function ms | $ per million |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f + %.2f | %.1f | %.2f |\n", r.design, r.name, r.units.Write, r.units.IndexWrite, r.units.Read, r.units.Reported, r.sqs, pollerPerMsg, r.ms, r.dollarsPerMillion(memoryGB))
		if w, ok := want[r.design+"/"+r.name]; ok && (r.units.Write != w[0] || r.units.IndexWrite != w[1] || r.units.Read != w[2]) {
			t.Errorf("%s %s: %.2f table and %.2f index write units, %.2f read units per message, want %v, %v and %v", r.design, r.name, r.units.Write, r.units.IndexWrite, r.units.Read, w[0], w[1], w[2])
		}
	}
	if table {
		_, _ = os.Stdout.WriteString(b.String())
	} else {
		b.WriteString("(COST_TABLE unset: one batch per case, function time not measured, so the $ column leaves it out)\n")
	}
	t.Log("\n" + b.String())
}
