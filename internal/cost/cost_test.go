package cost

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestIndexWrites(t *testing.T) {
	ix := Index{Keys: []string{"inflight", "lease_until"}, Projected: []string{"lease_token"}}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	held := map[string]types.AttributeValue{"pk": s("k"), "inflight": s("0"), "lease_until": n("10"), "lease_token": s("a")}
	moved := map[string]types.AttributeValue{"pk": s("k"), "inflight": s("0"), "lease_until": n("20"), "lease_token": s("b")}
	retoken := map[string]types.AttributeValue{"pk": s("k"), "inflight": s("0"), "lease_until": n("10"), "lease_token": s("b")}
	withNote := map[string]types.AttributeValue{"pk": s("k"), "inflight": s("0"), "lease_until": n("10"), "lease_token": s("a"), "note": s("x")}
	done := map[string]types.AttributeValue{"pk": s("k"), "status": s("COMPLETED")}
	all := Index{Keys: ix.Keys, All: true}
	for name, c := range map[string]struct {
		ix            Index
		before, after map[string]types.AttributeValue
		want          float64
	}{
		"added":               {ix, nil, held, 1},
		"removed":             {ix, held, done, 1},
		"key changed":         {ix, held, moved, 2},
		"projection changed":  {ix, held, retoken, 1},
		"unchanged":           {ix, held, held, 0},
		"never in the index":  {ix, nil, done, 0},
		"failed put, nothing": {ix, done, done, 0},
		"ALL, any attribute":  {all, held, retoken, 1},
		"ALL, unchanged":      {all, held, held, 0},
		"not projected":       {ix, held, withNote, 0},
		"ALL, an attribute":   {all, held, withNote, 1},
	} {
		if got := indexWrites(c.ix, c.before, c.after); got != c.want {
			t.Errorf("%s: %v index writes, want %v", name, got, c.want)
		}
	}
}
