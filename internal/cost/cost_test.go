package cost

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestItemSize(t *testing.T) {
	item := map[string]types.AttributeValue{
		"pk":     &types.AttributeValueMemberS{Value: "payments#k1"},   // 2 + 11
		"n":      &types.AttributeValueMemberN{Value: "-123.4500"},     // 1 + (5 significant digits: 3) + 1
		"ok":     &types.AttributeValueMemberBOOL{Value: true},         // 2 + 1
		"b":      &types.AttributeValueMemberB{Value: []byte{1, 2, 3}}, // 1 + 3
		"steps":  &types.AttributeValueMemberSS{Value: []string{"a", "bc"}},
		"nested": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"x": &types.AttributeValueMemberS{Value: "yz"}}},
	}
	// steps: 5 + 3; nested: 6 + 3 + (1 + 1 + 2)
	if got, want := ItemSize(item), 13+5+3+4+8+13; got != want {
		t.Errorf("ItemSize = %d, want %d", got, want)
	}
}

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
