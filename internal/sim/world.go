package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/sim/simsqs"
	"github.com/idemgo/sqs-lambda-consumer/internal/simdb"
)

// Names of the simulated resources.
const (
	idemTable = "idem"
	bizTable  = "biz"
	scope     = "sim"
	// recPrefix starts the key of a record folded into its journal entry (layoutFold).
	recPrefix = "rec#"
)

// world is one simulated run: the services, the Lambda side, the workload and what the
// oracle observed. Everything but the code under test runs in the scheduler's goroutine.
type world struct {
	seed uint64
	rng  *rand.Rand
	sc   *scenario

	db  *simdb.DB
	sqs *simsqs.Service

	dlq, outFIFO, outStd  string // queue names (the input queues are the consumers')
	dlqURL                string
	outFIFOURL, outStdURL string
	keys                  map[string][2]string // table -> its key attributes (hash, range)

	// scheduler
	mu       sync.Mutex // guards arrivals, finished and parks, which goroutines append to
	arrivals []*call
	finished []*invocation
	parks    []stepPark // steps StepWith parked past their service's key window (outside.go)
	events   eventHeap
	evSeq    int64
	callSeq  int64
	start    time.Time

	// lambda side (each consumer's slots and reaper are in its consumer)
	invSeq    int
	envSeq    int
	inflight  map[*call]bool       // requests of live invocations not yet answered
	live      map[*invocation]bool // invocations whose goroutine has not returned
	stopped   bool
	cur       *call // the request being applied, for the oracle
	sendsLeft int

	// workload and observations
	ops     []*op
	obs     observations
	trace   *tracer
	ingress *ingressSide // the ingress and its clients, when the configuration has it
	txns    txnFlights   // DynamoDB transactions in flight (conflict.go)
	skew    *rand.Rand   // draws the environments' clock offsets
}

// faultsOn reports whether faults are injected now: they stop at the scenario's
// faultEnd, so the oracle can check that nothing stays stuck once they do.
func (w *world) faultsOn() bool { return time.Now().Before(w.start.Add(w.sc.faultEnd)) }

func (w *world) p(x float64) bool { return w.rng.Float64() < x }

// ddbAPI is the DynamoDB client the code under test gets: every call goes through the
// scheduler.
type ddbAPI struct{ w *world }

func keyDesc(table string, key map[string]types.AttributeValue) string {
	for _, k := range []string{"pk", "id"} {
		if v, ok := key[k].(*types.AttributeValueMemberS); ok {
			if sk, ok := key["sk"].(*types.AttributeValueMemberS); ok {
				return table + "/" + v.Value + "/" + sk.Value
			}
			return table + "/" + v.Value
		}
	}
	return table
}

func (a ddbAPI) PutItem(ctx context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	t := aws.ToString(in.TableName)
	out, err := a.w.do(ctx, "dynamodb", "PutItem", keyDesc(t, in.Item), []string{a.w.itemID(t, in.Item)}, func() (any, error) {
		return a.w.db.PutItem(context.Background(), in)
	})
	o, _ := out.(*dynamodb.PutItemOutput)
	return o, err
}

func (a ddbAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	t := aws.ToString(in.TableName)
	out, err := a.w.do(ctx, "dynamodb", "UpdateItem", keyDesc(t, in.Key), []string{a.w.itemID(t, in.Key)}, func() (any, error) {
		return a.w.db.UpdateItem(context.Background(), in)
	})
	o, _ := out.(*dynamodb.UpdateItemOutput)
	return o, err
}

func (a ddbAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := a.w.do(ctx, "dynamodb", "GetItem", keyDesc(aws.ToString(in.TableName), in.Key), nil, func() (any, error) {
		return a.w.db.GetItem(context.Background(), in)
	})
	o, _ := out.(*dynamodb.GetItemOutput)
	return o, err
}

func (a ddbAPI) Query(ctx context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	desc := aws.ToString(in.TableName) + "/" + aws.ToString(in.IndexName)
	if v, ok := in.ExpressionAttributeValues[":shard"].(*types.AttributeValueMemberS); ok {
		desc += "/" + v.Value
	}
	out, err := a.w.do(ctx, "dynamodb", "Query", desc, nil, func() (any, error) {
		return a.w.db.Query(context.Background(), in)
	})
	o, _ := out.(*dynamodb.QueryOutput)
	return o, err
}

func (a ddbAPI) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	parts := make([]string, 0, len(in.TransactItems))
	items := make([]string, 0, len(in.TransactItems))
	for _, it := range in.TransactItems {
		var t string
		var key map[string]types.AttributeValue
		switch {
		case it.Put != nil:
			t, key = aws.ToString(it.Put.TableName), it.Put.Item
		case it.Update != nil:
			t, key = aws.ToString(it.Update.TableName), it.Update.Key
		case it.Delete != nil:
			t, key = aws.ToString(it.Delete.TableName), it.Delete.Key
		case it.ConditionCheck != nil:
			t, key = aws.ToString(it.ConditionCheck.TableName), it.ConditionCheck.Key
		}
		parts = append(parts, keyDesc(t, key))
		items = append(items, a.w.itemID(t, key))
	}
	out, err := a.w.do(ctx, "dynamodb", "TransactWriteItems", strings.Join(parts, "+"), items, func() (any, error) {
		return a.w.db.TransactWriteItems(context.Background(), in)
	})
	o, _ := out.(*dynamodb.TransactWriteItemsOutput)
	return o, err
}

// sqsAPI is the SQS client the code under test gets.
type sqsAPI struct{ w *world }

func queueName(u string) string { return u[strings.LastIndexByte(u, '/')+1:] }

func (a sqsAPI) SendMessage(ctx context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	out, err := a.w.do(ctx, "sqs", "SendMessage", queueName(aws.ToString(in.QueueUrl))+"/"+aws.ToString(in.MessageDeduplicationId), nil, func() (any, error) {
		return a.w.sqs.SendMessage(context.Background(), in)
	})
	o, _ := out.(*sqs.SendMessageOutput)
	return o, err
}

func (a sqsAPI) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	desc := queueName(aws.ToString(in.QueueUrl))
	if len(in.Entries) > 0 {
		desc += "/" + aws.ToString(in.Entries[0].MessageDeduplicationId) + "/" + sqsKey(in.Entries[0].MessageAttributes)
	}
	out, err := a.w.do(ctx, "sqs", "SendMessageBatch", desc, nil, func() (any, error) {
		return a.w.sendBatch(in)
	})
	o, _ := out.(*sqs.SendMessageBatchOutput)
	return o, err
}

func sqsKey(attrs map[string]sqstypes.MessageAttributeValue) string {
	if v, ok := attrs[idem.KeyAttribute]; ok {
		return aws.ToString(v.StringValue)
	}
	return ""
}

func (a sqsAPI) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	out, err := a.w.do(ctx, "sqs", "ChangeMessageVisibility", queueName(aws.ToString(in.QueueUrl))+"/"+aws.ToString(in.ReceiptHandle), nil, func() (any, error) {
		return a.w.sqs.ChangeMessageVisibility(context.Background(), in)
	})
	o, _ := out.(*sqs.ChangeMessageVisibilityOutput)
	return o, err
}

// sendBatch is SendMessageBatch, with the per-entry internal failures SQS reports on a
// standard queue when the scenario injects them.
func (w *world) sendBatch(in *sqs.SendMessageBatchInput) (any, error) {
	if w.faultsOn() && queueName(aws.ToString(in.QueueUrl)) == w.outStd && len(in.Entries) > 1 && w.p(w.sc.faults.entryFail) {
		// One entry fails for a server-side reason; the others are stored.
		i := w.rng.IntN(len(in.Entries))
		rest := *in
		rest.Entries = append(append([]sqstypes.SendMessageBatchRequestEntry{}, in.Entries[:i]...), in.Entries[i+1:]...)
		out, err := w.sqs.SendMessageBatch(context.Background(), &rest)
		if err != nil {
			return out, err
		}
		out.Failed = append(out.Failed, sqstypes.BatchResultErrorEntry{Id: in.Entries[i].Id, Code: aws.String("InternalError"), Message: aws.String("sim: internal error"), SenderFault: false})
		return out, nil
	}
	return w.sqs.SendMessageBatch(context.Background(), in)
}

// Fault errors, as the SDK returns them once its retries are spent.
func throttle(service string) error {
	if service == "dynamodb" {
		return &types.ProvisionedThroughputExceededException{Message: aws.String("sim: throughput exceeded")}
	}
	return &smithy.GenericAPIError{Code: "RequestThrottled", Message: "sim: throttled", Fault: smithy.FaultServer}
}

func serverError(service string) error {
	if service == "dynamodb" {
		return &types.InternalServerError{Message: aws.String("sim: internal server error")}
	}
	return &smithy.GenericAPIError{Code: "InternalError", Message: "sim: internal error", Fault: smithy.FaultServer}
}

// injected reports whether err comes from a fault the simulation injected, or from a
// transaction conflict DynamoDB has (conflict.go).
func injected(err error) bool {
	var (
		tp  *types.ProvisionedThroughputExceededException
		ise *types.InternalServerError
		tc  *types.TransactionConflictException
		tce *types.TransactionCanceledException
		ge  *smithy.GenericAPIError
	)
	return errors.Is(err, errLostAnswer) || errors.Is(err, errKilled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &tp) || errors.As(err, &ise) || errors.As(err, &tc) || errors.As(err, &tce) ||
		errors.As(err, &ge) && (ge.Code == "RequestThrottled" || ge.Code == "InternalError")
}

// errLostAnswer is a request that was applied but whose answer never came back (a
// reset connection, a timeout after the write).
var errLostAnswer = errors.New("sim: connection reset by peer (the request may have been applied)")

// The network's bounds (schedule): a request hangs at most maxHang, and one sent during
// a partition waits at most maxPartition for it to heal (lambda.go), so a call reaches
// its service at most maxFlight after it was made, its sender dead or not; an answer
// comes back at once (or is lost). The stepping handler declares it
// (idem.Service.MaxFlight): a lookup cannot see a call on its way.
const (
	maxHang      = 59 * time.Second
	maxPartition = 2 * time.Minute
	maxFlight    = maxPartition + maxHang + time.Second
)

// schedule decides a request's fate when it arrives.
func (w *world) schedule(c *call) {
	f := w.faultsOn()
	fr := w.sc.faults
	base := time.Duration(1+w.rng.IntN(15)) * time.Millisecond // DynamoDB's own time on it
	lat := base
	if c.service == "gateway" {
		// The outside service's own work: a fraction of a second, and now and then
		// seconds (a gateway under load), so a handler's steps can run late in its
		// invocation.
		lat += time.Duration(20+w.rng.IntN(400)) * time.Millisecond
		if w.p(0.125) {
			lat += time.Duration(1000+w.rng.IntN(7000)) * time.Millisecond
		}
	}
	if f && w.p(fr.slow) {
		// A request that hangs on the network: seconds, and one in five until TCP gives
		// up on a lost segment, long enough to arrive after its sender's lease and grace
		// ended and another holder took its key.
		lat = time.Duration(500+w.rng.IntN(12000)) * time.Millisecond
		if w.p(0.2) {
			lat = time.Duration(10+w.rng.IntN(int(maxHang/time.Second)-9)) * time.Second
		}
	}
	if c.inv.kind == "reaper" && c.op == "UpdateItem" && (w.sc.cfg.slowReaper || w.sc.cfg.fastReaper) {
		lat += time.Duration(1000+w.rng.IntN(3000)) * time.Millisecond
	}
	now := time.Now()
	if c.inv.reqs++; c.inv.reqs == c.inv.cutAt {
		c.inv.cut = [2]time.Time{now, now.Add(c.inv.cutFor)}
		w.tracef("%s: its network is cut until %s", c.inv, w.since(c.inv.cut[1]))
	}
	if cut := c.inv.cut; !now.Before(cut[0]) && now.Before(cut[1]) {
		lat += cut[1].Sub(now) // it leaves when the partition heals
	}
	// It reaches the service base before it is applied: a hang or a partition keeps it
	// on the network, not in DynamoDB (conflict.go).
	c.reach = now.Add(lat - base)
	w.inflight[c] = true
	if f {
		switch r := w.rng.Float64(); {
		case r < fr.crashBefore:
			w.tracef("%s #%d %s %s: crash before it is sent", c.inv, c.n, c.op, c.desc)
			w.kill(c.inv, "crash at "+c.op+" (not sent)")
			return
		case r < fr.crashBefore+fr.throttle:
			w.at(now.Add(lat), func() {
				w.tracef("%s #%d %s %s: throttled", c.inv, c.n, c.op, c.desc)
				w.respond(c, reply{err: throttle(c.service)})
			})
			return
		case r < fr.crashBefore+fr.throttle+fr.serverError:
			w.at(now.Add(lat), func() {
				w.tracef("%s #%d %s %s: server error", c.inv, c.n, c.op, c.desc)
				w.respond(c, reply{err: serverError(c.service)})
			})
			return
		}
	}
	if c.op == "TransactWriteItems" {
		w.txns.fly(c)
	}
	w.at(now.Add(lat), func() { w.apply(c, f) })
}

// execute runs a request at its apply: DynamoDB's transaction conflicts first
// (conflict.go), then the service.
func (w *world) execute(c *call) (any, error) {
	if c.op == "TransactWriteItems" {
		w.txns.land(c)
	}
	if err := w.conflict(c); err != nil {
		w.obs.stats.Conflicts++
		return nil, err
	}
	out, err := c.exec()
	if err == nil && c.op == "TransactWriteItems" {
		w.txns.committed(c, time.Now())
	}
	return out, err
}

func (w *world) respond(c *call, r reply) {
	delete(w.inflight, c)
	c.answer(r)
}

// apply applies a request at its time, then answers it, loses the answer, or kills the
// invocation after it.
func (w *world) apply(c *call, f bool) {
	if c.inv.isDead() {
		delete(w.inflight, c)
		// The process died while the request was on the wire: it may have arrived.
		if w.p(0.5) {
			w.cur = c
			out, err := w.execute(c)
			w.cur = nil
			w.tracef("%s #%d %s %s: applied after its sender died: %s", c.inv, c.n, c.op, c.desc, outcome(out, err))
		} else if c.op == "TransactWriteItems" {
			w.txns.land(c)
		}
		return
	}
	w.cur = c
	out, err := w.execute(c)
	w.cur = nil
	w.tracef("%s #%d %s %s: %s", c.inv, c.n, c.op, c.desc, outcome(out, err))
	fr := w.sc.faults
	if !f {
		w.respond(c, reply{out, err})
		return
	}
	switch r := w.rng.Float64(); {
	case r < fr.lost:
		if w.p(0.5) {
			w.tracef("%s #%d: answer lost, error returned", c.inv, c.n)
			w.respond(c, reply{err: errLostAnswer})
			return
		}
		// The SDK retries the request: DynamoDB answers a transaction's retry from its
		// ClientRequestToken when the first try was applied (within 10 minutes); other
		// requests run again.
		// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
		back := time.Duration(20+w.rng.IntN(300)) * time.Millisecond
		idempotent := c.op == "TransactWriteItems" && err == nil && w.p(0.5)
		w.at(time.Now().Add(back), func() {
			if c.inv.isDead() {
				delete(w.inflight, c)
				return
			}
			if idempotent {
				w.tracef("%s #%d: answer lost, the retry answered from the token", c.inv, c.n)
				w.respond(c, reply{out, err})
				return
			}
			out2, err2 := c.exec()
			w.tracef("%s #%d: answer lost, retried: %s", c.inv, c.n, outcome(out2, err2))
			w.respond(c, reply{out2, err2})
		})
	case r < fr.lost+fr.crashAfter:
		w.tracef("%s #%d: crash after it was applied", c.inv, c.n)
		w.kill(c.inv, "crash after "+c.op)
	default:
		w.respond(c, reply{out, err})
	}
}

func outcome(out any, err error) string {
	if err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) {
			return "error " + ae.ErrorCode()
		}
		return "error " + err.Error()
	}
	if o, ok := out.(*sqs.SendMessageBatchOutput); ok && len(o.Failed) > 0 {
		return fmt.Sprintf("ok, %d entries failed", len(o.Failed))
	}
	return "ok"
}
