package simdb

import (
	"bytes"
	"fmt"
	"math/big"
	"slices"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func typeOf(v types.AttributeValue) string {
	switch v.(type) {
	case *types.AttributeValueMemberS:
		return "S"
	case *types.AttributeValueMemberN:
		return "N"
	case *types.AttributeValueMemberB:
		return "B"
	case *types.AttributeValueMemberBOOL:
		return "BOOL"
	case *types.AttributeValueMemberNULL:
		return "NULL"
	case *types.AttributeValueMemberSS:
		return "SS"
	case *types.AttributeValueMemberNS:
		return "NS"
	case *types.AttributeValueMemberBS:
		return "BS"
	case *types.AttributeValueMemberL:
		return "L"
	case *types.AttributeValueMemberM:
		return "M"
	}
	return "?"
}

// number parses a DynamoDB number exactly.
func number(s string) (*big.Rat, error) {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil, fmt.Errorf("the parameter cannot be converted to a numeric value: %s", s)
	}
	return r, nil
}

// cmpNumbers compares two DynamoDB numbers, with a fast path for integers.
func cmpNumbers(a, b string) int {
	x, err1 := strconv.ParseInt(a, 10, 64)
	y, err2 := strconv.ParseInt(b, 10, 64)
	if err1 == nil && err2 == nil {
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	}
	ra, err1 := number(a)
	rb, err2 := number(b)
	if err1 != nil || err2 != nil {
		return bytes.Compare([]byte(a), []byte(b))
	}
	return ra.Cmp(rb)
}

// compare applies a comparator as DynamoDB does: a missing attribute or a type mismatch
// makes every comparison false but <>, which is true.
func compare(a types.AttributeValue, op string, b types.AttributeValue) bool {
	if a == nil || b == nil || typeOf(a) != typeOf(b) {
		return op == "<>"
	}
	var c int
	switch x := a.(type) {
	case *types.AttributeValueMemberS:
		c = bytes.Compare([]byte(x.Value), []byte(b.(*types.AttributeValueMemberS).Value))
	case *types.AttributeValueMemberN:
		c = cmpNumbers(x.Value, b.(*types.AttributeValueMemberN).Value)
	case *types.AttributeValueMemberB:
		c = bytes.Compare(x.Value, b.(*types.AttributeValueMemberB).Value)
	default:
		eq := equal(a, b)
		switch op {
		case "=":
			return eq
		case "<>":
			return !eq
		}
		return false
	}
	switch op {
	case "=":
		return c == 0
	case "<>":
		return c != 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	}
	return false
}

// equal reports whether two attribute values are the same value.
func equal(a, b types.AttributeValue) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if typeOf(a) != typeOf(b) {
		return false
	}
	switch x := a.(type) {
	case *types.AttributeValueMemberS:
		return x.Value == b.(*types.AttributeValueMemberS).Value
	case *types.AttributeValueMemberN:
		return cmpNumbers(x.Value, b.(*types.AttributeValueMemberN).Value) == 0
	case *types.AttributeValueMemberB:
		return bytes.Equal(x.Value, b.(*types.AttributeValueMemberB).Value)
	case *types.AttributeValueMemberBOOL:
		return x.Value == b.(*types.AttributeValueMemberBOOL).Value
	case *types.AttributeValueMemberNULL:
		return true
	case *types.AttributeValueMemberSS:
		return sameSet(x.Value, b.(*types.AttributeValueMemberSS).Value)
	case *types.AttributeValueMemberNS:
		return sameSet(x.Value, b.(*types.AttributeValueMemberNS).Value)
	case *types.AttributeValueMemberL:
		y := b.(*types.AttributeValueMemberL).Value
		if len(x.Value) != len(y) {
			return false
		}
		for i := range x.Value {
			if !equal(x.Value[i], y[i]) {
				return false
			}
		}
		return true
	case *types.AttributeValueMemberM:
		y := b.(*types.AttributeValueMemberM).Value
		if len(x.Value) != len(y) {
			return false
		}
		for k, v := range x.Value {
			if !equal(v, y[k]) {
				return false
			}
		}
		return true
	}
	return false
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, s := range a {
		if !slices.Contains(b, s) {
			return false
		}
	}
	return true
}

func sizeOf(v types.AttributeValue) (int, bool) {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return len(x.Value), true
	case *types.AttributeValueMemberB:
		return len(x.Value), true
	case *types.AttributeValueMemberSS:
		return len(x.Value), true
	case *types.AttributeValueMemberNS:
		return len(x.Value), true
	case *types.AttributeValueMemberL:
		return len(x.Value), true
	case *types.AttributeValueMemberM:
		return len(x.Value), true
	}
	return 0, false
}

func contains(a, b types.AttributeValue) bool {
	switch x := a.(type) {
	case *types.AttributeValueMemberS:
		y, ok := b.(*types.AttributeValueMemberS)
		return ok && bytes.Contains([]byte(x.Value), []byte(y.Value))
	case *types.AttributeValueMemberSS:
		y, ok := b.(*types.AttributeValueMemberS)
		return ok && slices.Contains(x.Value, y.Value)
	case *types.AttributeValueMemberNS:
		y, ok := b.(*types.AttributeValueMemberN)
		return ok && slices.ContainsFunc(x.Value, func(s string) bool { return cmpNumbers(s, y.Value) == 0 })
	case *types.AttributeValueMemberL:
		return slices.ContainsFunc(x.Value, func(v types.AttributeValue) bool { return equal(v, b) })
	}
	return false
}

// add is the ADD action: a number is added to, a set gets the new elements, a missing
// attribute becomes the value.
func add(cur, v types.AttributeValue) (types.AttributeValue, error) {
	if cur != nil && typeOf(cur) != typeOf(v) {
		return nil, fmt.Errorf("an operand in the update expression has an incorrect data type")
	}
	switch x := v.(type) {
	case *types.AttributeValueMemberN:
		if cur == nil {
			return v, nil
		}
		return arith(cur, x, false)
	case *types.AttributeValueMemberSS:
		return &types.AttributeValueMemberSS{Value: union(cur, x.Value)}, nil
	case *types.AttributeValueMemberNS:
		return &types.AttributeValueMemberNS{Value: union(cur, x.Value)}, nil
	}
	return nil, fmt.Errorf("incorrect operand type for operator or function; operator: ADD, operand type: %s", typeOf(v))
}

// union gives the elements of the string or number set cur (nil: none) and then of add,
// each once.
func union(cur types.AttributeValue, add []string) []string {
	var all []string
	switch c := cur.(type) {
	case *types.AttributeValueMemberSS:
		all = append(all, c.Value...)
	case *types.AttributeValueMemberNS:
		all = append(all, c.Value...)
	}
	return dedup(append(all, add...))
}

func dedup(s []string) []string {
	var out []string
	for _, v := range s {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

func subtractSet(cur, v types.AttributeValue) (types.AttributeValue, error) {
	if cur == nil {
		return nil, nil
	}
	var keep []string
	switch x := v.(type) {
	case *types.AttributeValueMemberSS:
		c, ok := cur.(*types.AttributeValueMemberSS)
		if !ok {
			return nil, fmt.Errorf("an operand in the update expression has an incorrect data type")
		}
		for _, s := range c.Value {
			if !slices.Contains(x.Value, s) {
				keep = append(keep, s)
			}
		}
		if len(keep) == 0 {
			return nil, nil
		}
		return &types.AttributeValueMemberSS{Value: keep}, nil
	}
	return nil, fmt.Errorf("incorrect operand type for operator or function; operator: DELETE, operand type: %s", typeOf(v))
}

func arith(a, b types.AttributeValue, minus bool) (types.AttributeValue, error) {
	x, ok1 := a.(*types.AttributeValueMemberN)
	y, ok2 := b.(*types.AttributeValueMemberN)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("an operand in the update expression has an incorrect data type")
	}
	p, err1 := strconv.ParseInt(x.Value, 10, 64)
	q, err2 := strconv.ParseInt(y.Value, 10, 64)
	if err1 == nil && err2 == nil {
		if minus {
			return num(p - q), nil
		}
		return num(p + q), nil
	}
	rp, err := number(x.Value)
	if err != nil {
		return nil, err
	}
	rq, err := number(y.Value)
	if err != nil {
		return nil, err
	}
	if minus {
		rq.Neg(rq)
	}
	return &types.AttributeValueMemberN{Value: rp.Add(rp, rq).RatString()}, nil
}

// keyString encodes a key attribute value for map lookups and ordering.
func keyString(v types.AttributeValue) (string, error) {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return "S" + x.Value, nil
	case *types.AttributeValueMemberN:
		return "N" + x.Value, nil
	case *types.AttributeValueMemberB:
		return "B" + string(x.Value), nil
	}
	return "", fmt.Errorf("key attribute must be of type S, N or B")
}
