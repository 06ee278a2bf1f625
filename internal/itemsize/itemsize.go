// Package itemsize measures a DynamoDB item as DynamoDB does: the size its read and
// write units are counted from, and the size its 400 KB item limit applies to. The cost
// model and the simulated DynamoDB (internal/simdb) both read it here, so the two cannot
// count an item differently.
package itemsize

import (
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Max is the largest item DynamoDB stores: 400 KB, attribute names and values together.
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-items
const Max = 400 * 1024

// Of is an item's size by DynamoDB's rules: the UTF-8 length of each attribute name
// plus the size of its value.
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html
func Of(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return len(x.Value)
	case *types.AttributeValueMemberN:
		return numberSize(x.Value)
	case *types.AttributeValueMemberB:
		return len(x.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		return sum(x.Value, func(s string) int { return len(s) })
	case *types.AttributeValueMemberNS:
		return sum(x.Value, numberSize)
	case *types.AttributeValueMemberBS:
		return sum(x.Value, func(b []byte) int { return len(b) })
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range x.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range x.Value {
			n += 1 + len(k) + valueSize(e)
		}
		return n
	}
	return 0
}

// sum is the total of size over a set's elements.
func sum[T any](set []T, size func(T) int) int {
	n := 0
	for _, e := range set {
		n += size(e)
	}
	return n
}

// numberSize: 1 byte per two significant digits, plus 1.
func numberSize(s string) int {
	s = strings.TrimLeft(s, "-")
	digits := strings.Trim(strings.ReplaceAll(s, ".", ""), "0")
	return (len(digits)+1)/2 + 1
}
