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
	done := map[string]types.AttributeValue{"pk": s("k"), "status": s("COMPLETED")}
	for name, c := range map[string]struct {
		before, after map[string]types.AttributeValue
		want          float64
	}{
		"added":               {nil, held, 1},
		"removed":             {held, done, 1},
		"key changed":         {held, moved, 2},
		"projection changed":  {held, retoken, 1},
		"unchanged":           {held, held, 0},
		"never in the index":  {nil, done, 0},
		"failed put, nothing": {done, done, 0},
	} {
		if got := indexWrites(ix, c.before, c.after); got != c.want {
			t.Errorf("%s: %v index writes, want %v", name, got, c.want)
		}
	}
}
