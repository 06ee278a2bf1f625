package sqsmsg_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
)

// TestRedriveAttributes: what a redrive sends back with an input message's dead letter.
// A key travels as the attribute; a deduplication id that names something else than an
// operation (the dead-letter queue's own, a content-based one) never becomes a key, so a
// keyless message stays keyless, redriven (found by the simulator's late redrive: a
// keyless message came back keyed and was applied).
func TestRedriveAttributes(t *testing.T) {
	body := `{"acct":"a1","amt":5}`
	sum := sha256.Sum256([]byte(body))
	content := hex.EncodeToString(sum[:])
	str := func(v string) types.MessageAttributeValue { return sqsmsg.StringAttribute(v) }
	for _, c := range []struct {
		name    string
		dedup   string
		attrs   map[string]types.MessageAttributeValue
		wantKey string
		wantN   int // attributes sent back
	}{
		{"moved by SQS, keyed by its deduplication id", "op-1", nil, "op-1", 1},
		{"moved by SQS, content-based", content, nil, "", 0},
		{"moved by SQS, with its key attribute", "op-1", map[string]types.MessageAttributeValue{sqsmsg.KeyAttribute: str("k-9")}, "k-9", 1},
		{"the consumer's dead letter with its key", "dlq-m-1", map[string]types.MessageAttributeValue{
			sqsmsg.KeyAttribute: str("k-9"), sqsmsg.DLQSourceMessageIDAttribute: str("m-1"), sqsmsg.DLQReasonAttribute: str("r"), "own": str("x")}, "k-9", 2},
		{"the consumer's dead letter of a keyless message", "dlq-m-1", map[string]types.MessageAttributeValue{
			sqsmsg.DLQSourceMessageIDAttribute: str("m-1"), sqsmsg.DLQReasonAttribute: str("no key")}, "", 0},
		{"a redrive's deduplication id", sqsmsg.RedriveDedupPrefix + content, nil, "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, key, err := sqsmsg.RedriveAttributes(body, c.dedup, c.attrs)
			if err != nil {
				t.Fatal(err)
			}
			if key != c.wantKey || len(out) != c.wantN {
				t.Fatalf("key %q with %d attributes %v, want %q with %d", key, len(out), out, c.wantKey, c.wantN)
			}
			if got := aws.ToString(out[sqsmsg.KeyAttribute].StringValue); got != c.wantKey {
				t.Errorf("the %s attribute is %q, want %q", sqsmsg.KeyAttribute, got, c.wantKey)
			}
		})
	}
}
