package sim

import (
	"context"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// How the oracle finds a consumer's records among a table's items, as an operator
// would: by the layout's keys and attribute names, whatever else the table holds (the
// business items, another consumer's records).

// recordNames are the names of the record attributes the oracle reads, in a layout.
type recordNames struct {
	pk, sk, static, prefix              string
	status, inflight, outbox, exp       string
	token, until, response, responseEnc string
	category, refusedBy, created, hash  string
	keyPrefix                           string // the start of every record key of the scope in the key attribute
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func namesOf(l persistence.Layout, scope string) recordNames {
	a := l.Attributes
	n := recordNames{
		pk: or(l.PartitionKey, "pk"), sk: l.SortKey, prefix: l.KeyPrefix,
		status: or(a.Status, "status"), inflight: or(a.Inflight, "inflight"), outbox: or(a.Outbox, "outbox"),
		exp: or(a.ExpiresAt, "expires_at"), token: or(a.LeaseToken, "lease_token"), until: or(a.LeaseUntil, "lease_until"),
		response: or(a.Response, "response"), responseEnc: or(a.ResponseEnc, "response_enc"),
		category: or(a.ErrorCategory, "error_category"), refusedBy: or(a.RefusedBy, "refused_by"),
		created: or(a.CreatedAt, "created_at"), hash: or(a.PayloadHash, "payload_hash"),
	}
	if n.sk != "" {
		n.static = or(l.StaticPartitionKey, "idempotency")
	}
	n.keyPrefix = l.KeyPrefix + scope + "#"
	return n
}

// recordKey returns the record key (idem.RecordKey's) of a consumer's record item, and
// whether the item is one of its records at all.
func (c *consumer) recordKey(it map[string]types.AttributeValue) (string, bool) {
	n := &c.names
	attr := n.pk
	if n.sk != "" {
		if v, ok := it[n.pk].(*types.AttributeValueMemberS); !ok || v.Value != n.static {
			return "", false
		}
		attr = n.sk
	}
	v, ok := it[attr].(*types.AttributeValueMemberS)
	if !ok || !strings.HasPrefix(v.Value, n.keyPrefix) {
		return "", false
	}
	return strings.TrimPrefix(v.Value, n.prefix), true
}

// records returns the consumer's record items.
func (w *world) records(c *consumer) []map[string]types.AttributeValue {
	items, _ := w.db.Items(c.layout.Table)
	out := items[:0:0]
	for _, it := range items {
		if _, ok := c.recordKey(it); ok {
			out = append(out, it)
		}
	}
	return out
}

// record reads a consumer's record through idem's own reader, as idemctl inspect does,
// expired or not; nil when there is none.
func (w *world) record(c *consumer, rk string) *persistence.Record {
	rec, err := c.store.Get(context.Background(), rk, w.start)
	if err != nil {
		return nil
	}
	return rec
}

func strAttr(it map[string]types.AttributeValue, name string) string {
	if v, ok := it[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}
