package idem_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/canonjson"
)

// TestMembersDifferingInCaseHaveTheirOwnFingerprints (issue 38, finding 7): Go's decoder
// matches a member to a struct field regardless of case and keeps the last, so these two
// bodies are payments of 1 and of 100 000 cents. CanonicalJSON refuses an object with two
// member names equal under case folding (ErrAmbiguousJSON, Go's own folding: the Kelvin
// sign is a k); each body is fingerprinted as its bytes, and the second, under the first's
// key, is a payload mismatch, not a replay.
func TestMembersDifferingInCaseHaveTheirOwnFingerprints(t *testing.T) {
	a := `{"payment_id":"p-1","amount_cents":100000,"AMOUNT_CENTS":1}`
	b := `{"payment_id":"p-1","AMOUNT_CENTS":1,"amount_cents":100000}`
	for _, doc := range []string{a, b, `{"x":[{"Key":1,"kEY":2}]}`, "{\"k\":1,\"\u212a\":2}"} {
		_, err := canonjson.CanonicalJSON([]byte(doc))
		if !errors.Is(err, idem.ErrAmbiguousJSON) || !strings.Contains(err.Error(), "differ only in case") {
			t.Errorf("CanonicalJSON(%s): %v, want ErrAmbiguousJSON (names that differ only in case)", doc, err)
		}
	}
	ha, erra := idem.HashPayload([]byte(a))
	hb, errb := idem.HashPayload([]byte(b))
	if erra != nil || errb != nil || ha == hb {
		t.Errorf("fingerprints %s, %s (%v, %v): want two", ha, hb, erra, errb)
	}
	c := newClient(t)
	ok := idem.HandlerFunc(func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Response: []byte("ok")}, nil
	})
	if _, err := c.Do(context.Background(), &idem.Request{Key: "k-1", Payload: []byte(a)}, ok); err != nil {
		t.Fatal(err)
	}
	res, err := c.Do(context.Background(), &idem.Request{Key: "k-1", Payload: []byte(b)}, ok)
	if !errors.Is(err, idem.ErrPayloadMismatch) || res.Replayed {
		t.Errorf("the second body under the first's key: %+v, %v; want ErrPayloadMismatch", res, err)
	}
	// Names that fold to different letters are kept.
	if _, err := canonjson.CanonicalJSON([]byte(`{"a":1,"b":2,"ab":3,"A_":4}`)); err != nil {
		t.Errorf("distinct names: %v", err)
	}
}
