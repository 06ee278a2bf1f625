package guarded_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example/guarded"
	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// note is a message of the test's own: {"id": ..., "group": ...}.
type note struct {
	ID    string `json:"id"`
	Group string `json:"group"`
}

var errBad = errors.New("notes: invalid note")

func handler() *guarded.Handler[note] {
	return &guarded.Handler[note]{
		Name: "notes",
		Decode: func(body []byte) (note, error) {
			var n note
			if json.Unmarshal(body, &n) != nil || n.ID == "" {
				return note{}, errBad
			}
			return n, nil
		},
		Response: func(n note) any { return map[string]string{"id": n.ID} },
		Guard: func(key string, n note) types.TransactWriteItem {
			return guarded.Entry("notes", "pk", key, map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "entry#" + n.ID}})
		},
		Effect: func(n note) types.TransactWriteItem {
			return types.TransactWriteItem{Update: &types.Update{TableName: aws.String("notes")}}
		},
		Explain: func(n note, _ map[string]types.AttributeValue) string { return "refused " + n.ID },
		Outbound: guarded.Outbound[note]{
			Name: "copy", QueueURL: "https://sqs.example/q.fifo",
			Body:  func(key string, n note) any { return map[string]string{"id": n.ID, "key": key} },
			Group: func(n note) string { return n.Group },
		},
	}
}

func TestHandle(t *testing.T) {
	h := handler()
	if _, err := h.Handle(context.Background(), &idem.Request{Key: "k", Payload: []byte(`{"id":"n-1"}`)}); !errors.Is(err, idem.ErrNoLease) ||
		err.Error() != "notes: handler must run under the idem middleware: "+idem.ErrNoLease.Error() {
		t.Errorf("outside the middleware: %v", err)
	}
	req := func(body string) *idem.Request {
		return &idem.Request{Key: "note:n-1", Payload: []byte(body), Attempt: &idem.Attempt{}}
	}
	if _, err := h.Handle(context.Background(), req(`{}`)); !errors.Is(err, errBad) || !idem.IsPermanent(err) {
		t.Errorf("an invalid note: %v, want a permanent error wrapping Decode's", err)
	}
	res, err := h.Handle(context.Background(), req(`{"id":"n-1","group":"g"}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Response) != `{"id":"n-1"}` || len(res.Writes) != 2 || res.Writes[0].Put == nil || res.Writes[1].Update == nil ||
		len(res.Guards) != 1 || res.Guards[0] != 0 {
		t.Errorf("result %+v: want the response, the guard then the effect, the guard listed", res)
	}
	put := res.Writes[0].Put
	if aws.ToString(put.ConditionExpression) != "attribute_not_exists(#id)" || put.ExpressionAttributeNames["#id"] != "pk" ||
		put.Item[guarded.KeyHashAttr].(*types.AttributeValueMemberS).Value != idem.HashKey("note:n-1") {
		t.Errorf("guard %+v: want put if absent, stamped with the key's hash", put)
	}
	if len(res.Messages) != 1 {
		t.Fatalf("%d outbound messages, want 1", len(res.Messages))
	}
	m := res.Messages[0]
	if m.QueueURL != "https://sqs.example/q.fifo" || m.Body != `{"id":"n-1","key":"note:n-1"}` ||
		m.GroupID != idem.DeduplicationID("g") || m.DeduplicationID != idem.DeduplicationID("note:n-1") {
		t.Errorf("outbound message %+v", m)
	}
	if res.Explain(0, nil) != "" || res.Explain(1, nil) != "refused n-1" {
		t.Errorf("Explain: %q for the guard, %q for the effect", res.Explain(0, nil), res.Explain(1, nil))
	}

	h.Outbound.Body = func(string, note) any { return func() {} } // cannot be encoded
	if _, err := h.Handle(context.Background(), req(`{"id":"n-1"}`)); err == nil || idem.IsPermanent(err) ||
		!strings.HasPrefix(err.Error(), "notes: encode copy: ") {
		t.Errorf("an outbound body that cannot be encoded: %v", err)
	}
}
