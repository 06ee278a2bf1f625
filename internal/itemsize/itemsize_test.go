package itemsize

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
	if got, want := Of(item), 13+5+3+4+8+13; got != want {
		t.Errorf("Of = %d, want %d", got, want)
	}
}
