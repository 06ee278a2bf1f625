package stack

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// props reads resolved properties with typed accessors and errors that name the
// resource and property. Every key must be read, ignored or refused: rest reports the
// first one nobody asked for.
type props struct {
	res    *resource
	prefix string // "GlobalSecondaryIndexes[0]." for nested mappings
	m      map[string]any
	used   map[string]bool
}

// resolveProps resolves the resource's properties, one top-level property at a time so
// errors name it.
func (r *resolver) resolveProps(res *resource) (*props, error) {
	p := &props{res: res, m: map[string]any{}, used: map[string]bool{}}
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

func (p *props) errorf(key, format string, args ...any) error {
	return fmt.Errorf("%s: %s", p.at(key), fmt.Sprintf(format, args...))
}

func (p *props) take(key string) (any, bool) {
	v, ok := p.m[key]
	if ok {
		p.used[key] = true
	}
	return v, ok && v != nil
}

// str reads a text property (numbers and booleans are rendered as text).
func (p *props) str(key string) (string, bool, error) {
	v, ok := p.take(key)
	if !ok {
		return "", false, nil
	}
	s, err := text(v)
	if err != nil {
		return "", false, p.errorf(key, "%v", err)
	}
	return s, true, nil
}

// integer reads a whole number, given as a number or as text.
func (p *props) integer(key string) (int64, bool, error) {
	v, ok := p.take(key)
	if !ok {
		return 0, false, nil
	}
	n, err := toInt(v)
	if err != nil {
		return 0, false, p.errorf(key, "%v", err)
	}
	return n, true, nil
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
func (p *props) boolean(key string) (bool, bool, error) {
	v, ok := p.take(key)
	if !ok {
		return false, false, nil
	}
	switch b := v.(type) {
	case bool:
		return b, true, nil
	case string:
		if pb, err := strconv.ParseBool(b); err == nil {
			return pb, true, nil
		}
	}
	return false, false, p.errorf(key, "want true or false")
}

// object reads a nested mapping.
func (p *props) object(key string) (*props, bool, error) {
	v, ok := p.take(key)
	if !ok {
		return nil, false, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, false, p.errorf(key, "want a mapping")
	}
	return &props{res: p.res, prefix: p.prefix + key + ".", m: m, used: map[string]bool{}}, true, nil
}

// objects reads a list of mappings.
func (p *props) objects(key string) ([]*props, bool, error) {
	v, ok := p.take(key)
	if !ok {
		return nil, false, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, false, p.errorf(key, "want a list")
	}
	out := make([]*props, len(list))
	for i, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, false, p.errorf(fmt.Sprintf("%s[%d]", key, i), "want a mapping")
		}
		out[i] = &props{res: p.res, prefix: fmt.Sprintf("%s%s[%d].", p.prefix, key, i), m: m, used: map[string]bool{}}
	}
	return out, true, nil
}

// strings reads a list of text values.
func (p *props) strings(key string) ([]string, bool, error) {
	v, ok := p.take(key)
	if !ok {
		return nil, false, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, false, p.errorf(key, "want a list")
	}
	out := make([]string, len(list))
	for i, item := range list {
		s, err := text(item)
		if err != nil {
			return nil, false, p.errorf(fmt.Sprintf("%s[%d]", key, i), "%v", err)
		}
		out[i] = s
	}
	return out, true, nil
}

// json reads a property SQS takes as a JSON document: a mapping, or text holding JSON.
func (p *props) json(key string) (string, bool, error) {
	v, ok := p.take(key)
	if !ok {
		return "", false, nil
	}
	if s, isText := v.(string); isText {
		if !json.Valid([]byte(s)) {
			return "", false, p.errorf(key, "is text but not JSON")
		}
		return s, true, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", false, p.errorf(key, "%v", err)
	}
	return string(b), true, nil
}

// tags reads a CloudFormation tag list, [{Key, Value}].
func (p *props) tags(key string) (map[string]string, error) {
	list, ok, err := p.objects(key)
	if err != nil || !ok {
		return nil, err
	}
	tags := make(map[string]string, len(list))
	for _, t := range list {
		k, _, err := t.str("Key")
		if err != nil {
			return nil, err
		}
		v, _, err := t.str("Value")
		if err != nil {
			return nil, err
		}
		if err := t.rest(); err != nil {
			return nil, err
		}
		tags[k] = v
	}
	return tags, nil
}

// ignore marks key as read and returns a note saying it is ignored locally, or "" when
// the property is not set.
func (p *props) ignore(key, why string) string {
	if _, ok := p.take(key); !ok {
		return ""
	}
	return fmt.Sprintf("%s: %s: ignored locally (%s)", p.res.id, p.prefix+key, why)
}

// rest reports the first property no accessor read.
func (p *props) rest() error {
	var left []string
	for k := range p.m {
		if !p.used[k] {
			left = append(left, k)
		}
	}
	if len(left) == 0 {
		return nil
	}
	slices.Sort(left)
	return p.errorf(left[0], "not supported locally by idemctl (%s)", p.res.typ)
}
