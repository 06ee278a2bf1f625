package example

import (
	"encoding/json"
	"fmt"
)

// Need reads the variable name; unset or empty, it is an error naming it.
func (l Lookup) Need(name string) (string, error) {
	if v, ok := l(name); ok && v != "" {
		return v, nil
	}
	return "", fmt.Errorf("%s is not set", name)
}

// DecodeAll decodes the body of each message of msgs with decode; the first that does
// not decode is an error naming the message.
func DecodeAll[T any](msgs []Message, decode func([]byte) (T, error)) ([]T, error) {
	out := make([]T, 0, len(msgs))
	for _, m := range msgs {
		v, err := decode([]byte(m.Body))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.ID, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// Distinct returns vs with each business id (id) once, the first: what Checker.Expect
// counts of the applied messages.
func Distinct[T any](vs []T, id func(T) string) []T {
	seen := make(map[string]bool, len(vs))
	var out []T
	for _, v := range vs {
		if !seen[id(v)] {
			seen[id(v)] = true
			out = append(out, v)
		}
	}
	return out
}

// Confirmed is Confirmer.Confirms for outbound bodies that are JSON of a T: the
// business id (id) of the body, false when it is no T or names no id.
func Confirmed[T any](body string, id func(T) string) (string, bool) {
	var v T
	if json.Unmarshal([]byte(body), &v) != nil || id(v) == "" {
		return "", false
	}
	return id(v), true
}
