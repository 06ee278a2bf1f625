package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// The business handler of the simulation: a credit, a journal entry (the guard of most
// operations) and outbound messages, with a cap it checks by reading the account before
// it writes, and for some operations two calls to an outside service as recorded steps.
// What it writes and answers depends on the run, as a real handler's does: each carries
// the run (the invocation and message that ran it), the holder (the attempt's fencing
// token) and the environment's time, so that the oracle sees which attempt's writes
// landed and which attempt's response was stored.

// handler applies one operation for one consumer.
type handler struct {
	w               *world
	c               *consumer
	db              ddbAPI
	outFIFO, outStd string
	clock           func() time.Time // the environment's clock
}

// body is the message body of an operation.
type body struct {
	ID    string `json:"id,omitempty"`
	Acct  string `json:"acct"`
	Amt   int64  `json:"amt"`
	Out   int    `json:"out,omitempty"`
	Std   []int  `json:"std,omitempty"`
	Big   []int  `json:"big,omitempty"`
	Guard bool   `json:"guard,omitempty"`
	Call  bool   `json:"call,omitempty"` // two steps against the outside service (lease mode)
}

// decodeBody validates a body as the handler does.
func decodeBody(raw []byte) (body, error) {
	var b body
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return b, fmt.Errorf("invalid message: %w", err)
	}
	switch {
	case b.Acct == "":
		return b, fmt.Errorf("invalid message: acct missing")
	case b.Amt <= 0:
		return b, fmt.Errorf("invalid message: amt must be positive")
	}
	return b, nil
}

// response is what the handler answers, stored in the record.
type response struct {
	Applied string `json:"applied"`
	Run     string `json:"run"`
	Holder  string `json:"holder"`
	At      int64  `json:"at"`
}

// outbound is what a consumer's outbound message body says.
type outbound struct {
	Src string `json:"src"`
	I   int    `json:"i"`
	N   int    `json:"n"`
	Run string `json:"run"`
}

func avS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func avN(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func numAttr(item map[string]types.AttributeValue, name string) int64 {
	if v, ok := item[name].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return 0
}

// runOf names the handler's run: the invocation and the SQS message it runs for, which
// no other run shares.
func runOf(ctx context.Context) string {
	inv := invOf(ctx)
	m, _ := idem.MessageFromContext(ctx)
	return fmt.Sprintf("%s.%s", inv, m.MessageId)
}

// beatLease is the lease a beating handler (config.beat) keeps: shorter than its
// invocation, so that a slow call to the outside service outlasts it.
const beatLease = 3 * time.Second

// beat extends the lease of a beating handler to beatLease from now, before its n-th
// step (n = len(gatewaySteps): its commit). Between two steps it works a while first,
// drawn from the operation's id and attempt (no draw from the seed's sources, which stay
// as they were) and within half its invocation's time left: mostly less than its lease,
// and one time in eight (one in three under a fast reaper) up to 12 s (its first two
// attempts only: a retried handler makes progress), so its lease lapses, and the reaper
// may list it before it is extended.
func (h *handler) beat(ctx context.Context, a *idem.Attempt, id string, n int) error {
	if !h.w.sc.cfg.beat {
		return nil
	}
	if n > 0 && a.Number() <= 2 {
		f := fnv.New32a()
		fmt.Fprintf(f, "%s/%d/%d", id, n, a.Number())
		work := time.Duration(f.Sum32()%800) * time.Millisecond // within its lease, mostly
		if f.Sum32()%8 == 0 || h.w.sc.cfg.fastReaper && f.Sum32()%3 == 0 {
			work = time.Duration(f.Sum32()%12000) * time.Millisecond // a pause that outlasts it
		}
		if dl, ok := ctx.Deadline(); ok {
			work = min(work, max(0, time.Until(dl)-2*time.Second)/2) // it means to finish, and leave time for the batch
		}
		time.Sleep(work)
	}
	if err := a.Extend(ctx, beatLease); err != nil {
		return fmt.Errorf("extend the lease: %w", err)
	}
	return nil
}

// gatewaySteps are the outside service's calls an operation with Call makes.
var gatewaySteps = []string{"reserve", "charge"}

// step calls the outside service as the recorded step name, fed the answer of the step
// before it, and returns the service's answer: StepWith with the service's key window
// (and its lookup) when the configuration draws one, StepAnswer otherwise.
func (h *handler) step(ctx context.Context, a *idem.Attempt, name, fed, run string) ([]byte, error) {
	call := func(ctx context.Context) ([]byte, error) {
		return h.w.callGateway(ctx, h.c, a, name, fed, run)
	}
	cfg := h.w.sc.cfg
	if cfg.keyWindow == 0 {
		return a.StepAnswer(ctx, name, call)
	}
	svc := idem.Service{KeyWindow: cfg.keyWindow, MaxFlight: maxFlight}
	if cfg.lookup {
		svc.Lookup = func(ctx context.Context) ([]byte, bool, error) {
			return h.w.lookupGateway(ctx, h.c, a, name)
		}
	}
	answer, err := a.StepWith(ctx, name, svc, call)
	if errors.Is(err, idem.ErrPastKeyWindow) {
		h.w.notePark(ctx, h.c, a, name, h.clock())
	}
	return answer, err
}

// Handle applies one operation.
func (h *handler) Handle(ctx context.Context, req *idem.Request) (idem.Result, error) {
	b, err := decodeBody(req.Payload)
	if err != nil {
		return idem.Result{}, idem.Permanent(err)
	}
	id := b.ID
	if id == "" {
		id = req.Key
	}
	run, holder, at := runOf(ctx), req.Attempt.Token(), h.clock().UnixMilli()
	acctKey := map[string]types.AttributeValue{"pk": avS("acct#" + b.Acct)}
	got, err := h.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(bizTable), Key: acctKey, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return idem.Result{}, fmt.Errorf("read account %s: %w", b.Acct, err)
	}
	limit := numAttr(got.Item, "cap")
	balance := numAttr(got.Item, "balance")
	if limit > 0 && balance+b.Amt > limit {
		return idem.Result{}, idem.Permanent(fmt.Errorf("refused: %d more would take account %s over the cap of %d", b.Amt, b.Acct, limit))
	}
	var answers []string // the steps' answers, each fed to the next step and all to the commit
	if b.Call {
		for i, step := range gatewaySteps {
			if err := h.beat(ctx, req.Attempt, id, i); err != nil {
				return idem.Result{}, err
			}
			fed := ""
			if i > 0 {
				fed = answers[i-1]
			}
			answer, err := h.step(ctx, req.Attempt, step, fed, run)
			if err != nil {
				return idem.Result{}, fmt.Errorf("step %s: %w", step, err)
			}
			answers = append(answers, string(answer))
		}
		if err := h.beat(ctx, req.Attempt, id, len(gatewaySteps)); err != nil {
			return idem.Result{}, err
		}
	}
	stamp := map[string]types.AttributeValue{":op": avS(id), ":run": avS(run), ":holder": avS(holder), ":at": avN(at), ":amt": avN(b.Amt), ":one": avN(1)}
	credit := &types.Update{
		TableName: aws.String(bizTable), Key: acctKey,
		UpdateExpression:          aws.String("SET last_op = :op, last_run = :run, last_holder = :holder, last_at = :at ADD balance :amt, applied :one"),
		ConditionExpression:       aws.String("attribute_not_exists(closed)"),
		ExpressionAttributeValues: stamp,
	}
	if limit > 0 {
		credit.ConditionExpression = aws.String("attribute_not_exists(closed) AND (attribute_not_exists(balance) OR balance <= :room)")
		credit.ExpressionAttributeValues[":room"] = avN(limit - b.Amt)
	}
	journal := &types.Put{
		TableName: aws.String(bizTable),
		Item: map[string]types.AttributeValue{"pk": avS("entry#" + id), "op": avS(id), "acct": avS(b.Acct), "amt": avN(b.Amt),
			"run": avS(run), "holder": avS(holder), "at": avN(at)},
	}
	if len(answers) > 0 {
		journal.Item["calls"] = avS(strings.Join(answers, " "))
	}
	resp, _ := json.Marshal(response{Applied: id, Run: run, Holder: holder, At: at})
	res := idem.Result{
		Response: resp,
		Writes:   []types.TransactWriteItem{{Update: credit}, {Put: journal}},
		Explain: func(i int, item map[string]types.AttributeValue) string {
			if i != 0 {
				return ""
			}
			if _, ok := item["closed"]; ok {
				return "account " + b.Acct + " closed"
			}
			return fmt.Sprintf("%d more would take account %s over the cap of %d", b.Amt, b.Acct, numAttr(item, "cap"))
		},
	}
	if b.Guard {
		journal.ConditionExpression = aws.String("attribute_not_exists(pk)")
		res.Guards = []int{1}
		// The journal entry is the record's home: the store puts it at the record's key.
		// It stands for the business id, which the consumer keys every message by
		// (KeyFromField): one operation under two producer keys meets its one record.
		res.HomeGuard, res.HomeKey = h.c.fold, id
	}
	for i := range b.Out {
		m := idem.Message{Body: fmt.Sprintf(`{"src":%q,"i":%d,"n":%d,"run":%q}`, id, i, b.Out, run)}
		if slices.Contains(b.Big, i) {
			m.Body = fmt.Sprintf(`{"src":%q,"i":%d,"n":%d,"run":%q,"pad":%q}`, id, i, b.Out, run, strings.Repeat("x", 1500))
		}
		if slices.Contains(b.Std, i) {
			m.QueueURL = h.outStd
		} else {
			m.QueueURL, m.GroupID = h.outFIFO, b.Acct
		}
		h.w.shapeOutbound(&m, req.Attempt.RecordKey(), id, i)
		res.Messages = append(res.Messages, m)
	}
	return res, nil
}
