package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// The workload: operations a producer sends, with duplicates of every kind, and the
// business handler that applies them. An operation credits an account (a business
// write committed with the record), puts a journal entry (a guard write, for most), and
// asks for several outbound messages, some to a FIFO queue in the account's group, some
// to a standard queue, some too large for a queue whose MaximumMessageSize is small.

// opKind is what an operation must end as.
type opKind int

const (
	kindValid   opKind = iota // applied exactly once
	kindBad                   // invalid body: dead-lettered
	kindClosed                // refused by a business rule (a write's condition): dead-lettered
	kindCapped                // applied, or refused over the account's cap (by the handler or the condition)
	kindTwin                  // the same key with another payload than an earlier op: one of the two is dead-lettered
	kindKeyless               // no key but a content-based deduplication id: dead-lettered
	kindNoKey                 // no key at all (standard queue, no KEY_FIELD): dead-lettered
)

func (k opKind) String() string {
	return [...]string{"valid", "bad", "closed", "capped", "twin", "keyless", "nokey"}[k]
}

// reasonFor is the text the dead-letter reason of an operation of this kind contains.
func (k opKind) reason() string {
	switch k {
	case kindBad:
		return "invalid message"
	case kindClosed:
		return "account closed"
	case kindCapped:
		return "over the cap"
	case kindTwin:
		return "payload does not match"
	case kindKeyless:
		return "content-based deduplication"
	case kindNoKey:
		return "no idempotency key"
	}
	return ""
}

// op is one operation of the workload.
type op struct {
	n      int
	name   string // o<n>: the sim-op attribute of every send
	id     string // business id in the body ("" for keyless operations)
	key    string // idempotency-key attribute ("" when none)
	acct   string
	amt    int64
	out    int
	guard  bool
	body   string
	kind   opKind
	twinOf *op
	sends  []send
}

// send is one SendMessage of an operation by the producer.
type send struct {
	at      time.Duration // after the start
	dedupID string        // FIFO: "" only with content-based deduplication
	group   string
	why     string // first, retry in window, retry after window, other group, after TTL
}

// effectID is the journal id and outbound source of an operation's effect: its
// business id, or, without one, the idempotency key the consumer derives.
func (o *op) effectID() string {
	if o.id != "" {
		return o.id
	}
	return o.contentKey()
}

func (o *op) contentKey() string { return idemContentID(o.body) }

// body is the message body of an operation.
type body struct {
	ID    string `json:"id,omitempty"`
	Acct  string `json:"acct"`
	Amt   int64  `json:"amt"`
	Out   int    `json:"out,omitempty"`
	Std   []int  `json:"std,omitempty"`
	Big   []int  `json:"big,omitempty"`
	Guard bool   `json:"guard,omitempty"`
}

// handler is the business handler of the simulation: a credit, a journal entry and
// outbound messages, with a cap a handler checks by reading state before it writes.
type handler struct {
	w               *world
	db              ddbAPI
	table           string
	outFIFO, outStd string
	fold            bool // a guarded operation's journal entry is its record
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

// Handle applies one operation.
func (h *handler) Handle(ctx context.Context, req *idem.Request) (idem.Result, error) {
	var b body
	dec := json.NewDecoder(bytes.NewReader(req.Payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return idem.Result{}, idem.Permanent(fmt.Errorf("invalid message: %w", err))
	}
	switch {
	case b.Acct == "":
		return idem.Result{}, idem.Permanent(fmt.Errorf("invalid message: acct missing"))
	case b.Amt <= 0:
		return idem.Result{}, idem.Permanent(fmt.Errorf("invalid message: amt must be positive"))
	}
	id := b.ID
	if id == "" {
		id = req.Key
	}
	acctKey := map[string]types.AttributeValue{"pk": avS("acct#" + b.Acct)}
	got, err := h.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(h.table), Key: acctKey, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return idem.Result{}, fmt.Errorf("read account %s: %w", b.Acct, err)
	}
	limit := numAttr(got.Item, "cap")
	balance := numAttr(got.Item, "balance")
	if limit > 0 && balance+b.Amt > limit {
		return idem.Result{}, idem.Permanent(fmt.Errorf("refused: %d more would take account %s over the cap of %d", b.Amt, b.Acct, limit))
	}
	credit := &types.Update{
		TableName: aws.String(h.table), Key: acctKey,
		UpdateExpression:          aws.String("SET last_op = :op ADD balance :amt, applied :one"),
		ConditionExpression:       aws.String("attribute_not_exists(closed)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":op": avS(id), ":amt": avN(b.Amt), ":one": avN(1)},
	}
	if limit > 0 {
		credit.ConditionExpression = aws.String("attribute_not_exists(closed) AND (attribute_not_exists(balance) OR balance <= :room)")
		credit.ExpressionAttributeValues[":room"] = avN(limit - b.Amt)
	}
	journal := &types.Put{
		TableName: aws.String(h.table),
		Item:      map[string]types.AttributeValue{"pk": avS("entry#" + id), "op": avS(id), "acct": avS(b.Acct), "amt": avN(b.Amt)},
	}
	res := idem.Result{
		Response: []byte(`{"applied":"` + id + `"}`),
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
		res.HomeGuard, res.HomeKey = h.fold, req.Key
	}
	for i := range b.Out {
		m := idem.Message{Body: fmt.Sprintf(`{"src":%q,"i":%d,"n":%d}`, id, i, b.Out)}
		if slices.Contains(b.Big, i) {
			m.Body = fmt.Sprintf(`{"src":%q,"i":%d,"n":%d,"pad":%q}`, id, i, b.Out, strings.Repeat("x", 1500))
		}
		if slices.Contains(b.Std, i) {
			m.QueueURL = h.outStd
		} else {
			m.QueueURL, m.GroupID = h.outFIFO, b.Acct
		}
		res.Messages = append(res.Messages, m)
	}
	return res, nil
}

// outbound is what a consumer's outbound message body says.
type outbound struct {
	Src string `json:"src"`
	I   int    `json:"i"`
	N   int    `json:"n"`
}

// producerSend sends one message of an operation, as a producer outside the system.
func (w *world) producerSend(o *op, s send) {
	in := &sqs.SendMessageInput{
		QueueUrl: aws.String(w.inputURL), MessageBody: aws.String(o.body),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			"sim-op": {DataType: aws.String("String"), StringValue: aws.String(o.name)},
		},
	}
	if o.key != "" {
		in.MessageAttributes[idem.KeyAttribute] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(o.key)}
	}
	if w.sc.fifo {
		in.MessageGroupId = aws.String(s.group)
		if s.dedupID != "" {
			in.MessageDeduplicationId = aws.String(s.dedupID)
		}
	}
	before := len(w.sqs.Messages(w.input))
	out, err := w.sqs.SendMessage(context.Background(), in)
	if err != nil {
		w.obs.violation("producer", "op %s: the input queue refused a send (%s): %v", o.name, s.why, err)
		return
	}
	stored := len(w.sqs.Messages(w.input)) > before
	w.tracef("producer sends %s (%s, %s) as %s%s", o.name, o.kind, s.why, aws.ToString(out.MessageId), map[bool]string{true: "", false: ": dropped by SQS deduplication"}[stored])
	if stored {
		w.obs.sent[o] = append(w.obs.sent[o], aws.ToString(out.MessageId))
		w.wakePollers()
	}
}
