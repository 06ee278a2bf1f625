package stack

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// props reads resolved properties with typed accessors. A property of the wrong type
// reads as absent and records an error that names the resource and property; the first
// error recorded, for the resource and its nested mappings alike, is what err returns.
// Every key must be read, ignored or refused: rest records the first one nobody asked
// for.
type props struct {
	res    *resource
	prefix string // "GlobalSecondaryIndexes[0]." for nested mappings
	m      map[string]any
	used   map[string]bool
	first  *error // shared with the nested mappings
}

// resolveProps resolves the resource's properties, one top-level property at a time so
// errors name it.
func (r *resolver) resolveProps(res *resource) (*props, error) {
	p := &props{res: res, m: map[string]any{}, used: map[string]bool{}, first: new(error)}
	if res.props == nil {
		return p, nil
	}
	for _, k := range res.props.keys {
		v, err := r.resolve(res.props.vals[k], res.where(k))
		if err != nil {
			return nil, err
		}
		if _, drop := v.(noValue); !drop {
			p.m[k] = v
		}
	}
	return p, nil
}

func (p *props) at(key string) string { return p.res.where(p.prefix + key) }

// fail records an error about key, unless one was recorded before.
func (p *props) fail(key, format string, args ...any) {
	if *p.first == nil {
		*p.first = fmt.Errorf("%s: %s", p.at(key), fmt.Sprintf(format, args...))
	}
}

// err returns the first error recorded, or nil.
func (p *props) err() error { return *p.first }

// nested returns the mapping m found at key (key and index for a list's).
func (p *props) nested(key string, m map[string]any) *props {
	return &props{res: p.res, prefix: p.prefix + key + ".", m: m, used: map[string]bool{}, first: p.first}
}

func (p *props) take(key string) (any, bool) {
	v, ok := p.m[key]
	if ok {
		p.used[key] = true
	}
	return v, ok && v != nil
}

// str reads a text property (numbers and booleans are rendered as text).
func (p *props) str(key string) (string, bool) {
	v, ok := p.take(key)
	if !ok {
		return "", false
	}
	s, err := text(v)
	if err != nil {
		p.fail(key, "%v", err)
		return "", false
	}
	return s, true
}

// integer reads a whole number, given as a number or as text.
func (p *props) integer(key string) (int64, bool) {
	v, ok := p.take(key)
	if !ok {
		return 0, false
	}
	n, err := toInt(v)
	if err != nil {
		p.fail(key, "%v", err)
		return 0, false
	}
	return n, true
}

func toInt(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case float64:
		if n != math.Trunc(n) {
			return 0, fmt.Errorf("%v is not a whole number", n)
		}
		return int64(n), nil
	case string:
		i, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a whole number", n)
		}
		return i, nil
	}
	return 0, fmt.Errorf("want a whole number")
}

// boolean reads true/false, given as a YAML boolean or as text.
func (p *props) boolean(key string) (bool, bool) {
	v, ok := p.take(key)
	if !ok {
		return false, false
	}
	switch b := v.(type) {
	case bool:
		return b, true
	case string:
		if pb, err := strconv.ParseBool(b); err == nil {
			return pb, true
		}
	}
	p.fail(key, "want true or false")
	return false, false
}

// object reads a nested mapping.
func (p *props) object(key string) (*props, bool) {
	v, ok := p.take(key)
	if !ok {
		return nil, false
	}
	m, ok := v.(map[string]any)
	if !ok {
		p.fail(key, "want a mapping")
		return nil, false
	}
	return p.nested(key, m), true
}

// objects reads a list of mappings.
func (p *props) objects(key string) []*props {
	list, ok := p.list(key)
	if !ok {
		return nil
	}
	out := make([]*props, 0, len(list))
	for i, item := range list {
		at := fmt.Sprintf("%s[%d]", key, i)
		m, ok := item.(map[string]any)
		if !ok {
			p.fail(at, "want a mapping")
			return nil
		}
		out = append(out, p.nested(at, m))
	}
	return out
}

// strings reads a list of text values.
func (p *props) strings(key string) []string {
	list, ok := p.list(key)
	if !ok {
		return nil
	}
	out := make([]string, len(list))
	for i, item := range list {
		s, err := text(item)
		if err != nil {
			p.fail(fmt.Sprintf("%s[%d]", key, i), "%v", err)
			return nil
		}
		out[i] = s
	}
	return out
}

func (p *props) list(key string) ([]any, bool) {
	v, ok := p.take(key)
	if !ok {
		return nil, false
	}
	list, ok := v.([]any)
	if !ok {
		p.fail(key, "want a list")
	}
	return list, ok
}

// json reads a property SQS takes as a JSON document: a mapping, or text holding JSON.
func (p *props) json(key string) (string, bool) {
	v, ok := p.take(key)
	if !ok {
		return "", false
	}
	if s, isText := v.(string); isText {
		if !json.Valid([]byte(s)) {
			p.fail(key, "is text but not JSON")
			return "", false
		}
		return s, true
	}
	b, err := json.Marshal(v)
	if err != nil {
		p.fail(key, "%v", err)
		return "", false
	}
	return string(b), true
}

// tags reads a CloudFormation tag list, [{Key, Value}].
func (p *props) tags(key string) map[string]string {
	list := p.objects(key)
	if list == nil {
		return nil
	}
	tags := make(map[string]string, len(list))
	for _, t := range list {
		k, _ := t.str("Key")
		tags[k], _ = t.str("Value")
		t.rest()
	}
	return tags
}

// ignore marks key as read and returns a note saying it is ignored locally, or "" when
// the property is not set.
func (p *props) ignore(key, why string) string {
	if _, ok := p.take(key); !ok {
		return ""
	}
	return fmt.Sprintf("%s: %s: ignored locally (%s)", p.res.id, p.prefix+key, why)
}

// rest records the first property no accessor read.
func (p *props) rest() {
	var left []string
	for k := range p.m {
		if !p.used[k] {
			left = append(left, k)
		}
	}
	if len(left) > 0 {
		slices.Sort(left)
		p.fail(left[0], "not supported locally by idemctl (%s)", p.res.typ)
	}
}

// done is rest and err: what a resource's reading ends with.
func (p *props) done() error {
	p.rest()
	return p.err()
}
