package reliability_test

import (
	"fmt"
	"strings"

	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
)

func fmtInts(vs ...int) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, " / ")
}

func kinds(m map[string]int) string {
	var parts []string
	for _, k := range demo.StormKinds {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

func dlq(s demo.Summary) int {
	n := 0
	for _, v := range s.DeadLettered {
		n += v
	}
	return n
}

func phases(m map[string]int) string {
	var parts []string
	for _, p := range append(append([]string(nil), demo.Phases...), demo.RandomKill) {
		if n, ok := m[p]; ok {
			parts = append(parts, fmt.Sprintf("%d %s", n, p))
		}
	}
	return strings.Join(parts, ", ")
}
