package payouts

import (
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// TestPayoutIDsBelongToTheirCaller (issue 38, finding 3): a payout's journal entry, the
// one the guard puts and the one a redelivery reads (Applied), is keyed by its payout id
// scoped as the idempotency key is: two HTTP callers' payouts of one id are two entries,
// one caller's under two keys one entry, and a producer's key keeps the bare id.
func TestPayoutIDsBelongToTheirCaller(t *testing.T) {
	h := &handler{cfg: Config{PayeesTable: "payees"}}
	p := Payout{PayoutID: "po-7", PayeeID: "payee-1", AmountCents: 100}
	alice := func(k string) string { return idem.CallerKey("arn:aws:iam::111122223333:role/alice", k) }
	mallory := idem.CallerKey("arn:aws:iam::111122223333:role/mallory", "m-1")
	id := func(key string) string {
		put := h.entry(key, p, "tr_1").Put.Item[attrPayee].(*types.AttributeValueMemberS).Value
		if read := entryKey(key, p); !reflect.DeepEqual(read, map[string]types.AttributeValue{attrPayee: h.entry(key, p, "tr_1").Put.Item[attrPayee]}) {
			t.Errorf("key %s: the guard puts %s, a redelivery reads %v", key, put, read)
		}
		return put
	}
	if id(alice("a-1")) == id(mallory) {
		t.Errorf("Alice's and Mallory's payouts %s share the journal entry %s", p.PayoutID, id(mallory))
	}
	if id(alice("a-1")) != id(alice("a-2")) {
		t.Errorf("one caller's payout under two keys: entries %s and %s, want one", id(alice("a-1")), id(alice("a-2")))
	}
	if got := id("producer-key"); got != EntryPrefix+p.PayoutID || strings.Contains(got, idem.CallerKeyPrefix) {
		t.Errorf("a producer's payout: entry %s, want %s", got, EntryPrefix+p.PayoutID)
	}
}
