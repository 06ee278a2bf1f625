package simdb

import (
	"fmt"
	"strings"
	"sync"
	"unicode"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The expression language is the subset of DynamoDB's that idem, the examples and the
// simulator's handler write: top-level attribute names (plain or #name), :values,
// comparisons, BETWEEN, IN, AND/OR/NOT, parentheses, attribute_exists,
// attribute_not_exists, attribute_type, begins_with, size; and updates with SET (a value,
// a + b, a - b, if_not_exists, list_append), REMOVE, ADD and DELETE. Anything else is a
// ValidationException, so a test that strays outside the subset fails loudly instead of
// being evaluated wrongly.

// token kinds
const (
	tEOF = iota
	tName
	tAlias // #name
	tValue // :value
	tOp    // = <> < <= > >= + - ( ) ,
)

type token struct {
	kind int
	text string
}

func lex(s string) ([]token, error) {
	var out []token
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#' || c == ':':
			j := i + 1
			for j < len(s) && isNameByte(s[j]) {
				j++
			}
			if j == i+1 {
				return nil, fmt.Errorf("invalid expression: %q at %d", string(c), i)
			}
			kind := tAlias
			if c == ':' {
				kind = tValue
			}
			out = append(out, token{kind, s[i:j]})
			i = j
		case isNameByte(c):
			j := i
			for j < len(s) && isNameByte(s[j]) {
				j++
			}
			out = append(out, token{tName, s[i:j]})
			i = j
		case c == '<' && i+1 < len(s) && (s[i+1] == '>' || s[i+1] == '='):
			out = append(out, token{tOp, s[i : i+2]})
			i += 2
		case c == '>' && i+1 < len(s) && s[i+1] == '=':
			out = append(out, token{tOp, ">="})
			i += 2
		case strings.IndexByte("=<>+-(),", c) >= 0:
			out = append(out, token{tOp, string(c)})
			i++
		case c == '.' || c == '[':
			return nil, fmt.Errorf("invalid expression: nested paths are outside the simulator's subset (%q)", s)
		default:
			return nil, fmt.Errorf("invalid expression: unexpected %q at %d", string(c), i)
		}
	}
	return append(out, token{kind: tEOF}), nil
}

func isNameByte(c byte) bool {
	return c == '_' || c < 128 && (unicode.IsLetter(rune(c)) || unicode.IsDigit(rune(c)))
}

// operand is an attribute path or a value placeholder.
type operand struct {
	path  string // attribute name, or #alias before resolution
	value string // :placeholder
	fn    string // size
}

// cond is a parsed condition.
type cond struct {
	op   string // and, or, not, cmp, between, in, exists, notexists, type, begins
	cmp  string
	kids []*cond
	args []operand
}

type parser struct {
	toks []token
	pos  int
}

func (p *parser) peek() token { return p.toks[p.pos] }
func (p *parser) next() token { t := p.toks[p.pos]; p.pos++; return t }

func (p *parser) keyword(k string) bool {
	t := p.peek()
	if t.kind == tName && strings.EqualFold(t.text, k) {
		p.pos++
		return true
	}
	return false
}

func (p *parser) opIs(o string) bool {
	t := p.peek()
	if t.kind == tOp && t.text == o {
		p.pos++
		return true
	}
	return false
}

func (p *parser) expect(o string) error {
	if !p.opIs(o) {
		return fmt.Errorf("invalid expression: expected %q, got %q", o, p.peek().text)
	}
	return nil
}

func (p *parser) orExpr() (*cond, error)  { return p.chain("OR", p.andExpr) }
func (p *parser) andExpr() (*cond, error) { return p.chain("AND", p.notExpr) }

// chain parses operands joined by word (AND or OR), left to right.
func (p *parser) chain(word string, operand func() (*cond, error)) (*cond, error) {
	l, err := operand()
	if err != nil {
		return nil, err
	}
	for p.keyword(word) {
		r, err := operand()
		if err != nil {
			return nil, err
		}
		l = &cond{op: strings.ToLower(word), kids: []*cond{l, r}}
	}
	return l, nil
}

func (p *parser) notExpr() (*cond, error) {
	if p.keyword("NOT") {
		k, err := p.notExpr()
		if err != nil {
			return nil, err
		}
		return &cond{op: "not", kids: []*cond{k}}, nil
	}
	return p.primary()
}

var condFuncs = map[string]string{
	"attribute_exists": "exists", "attribute_not_exists": "notexists",
	"attribute_type": "type", "begins_with": "begins", "contains": "contains",
}

func (p *parser) primary() (*cond, error) {
	if p.opIs("(") {
		c, err := p.orExpr()
		if err != nil {
			return nil, err
		}
		return c, p.expect(")")
	}
	t := p.peek()
	if t.kind == tName {
		if f, ok := condFuncs[strings.ToLower(t.text)]; ok && p.toks[p.pos+1].kind == tOp && p.toks[p.pos+1].text == "(" {
			p.pos += 2
			args, err := p.operands()
			if err != nil {
				return nil, err
			}
			want := map[string]int{"exists": 1, "notexists": 1, "type": 2, "begins": 2, "contains": 2}[f]
			if len(args) != want {
				return nil, fmt.Errorf("invalid expression: %s takes %d arguments", t.text, want)
			}
			return &cond{op: f, args: args}, nil
		}
	}
	l, err := p.operand()
	if err != nil {
		return nil, err
	}
	if p.keyword("BETWEEN") {
		lo, err := p.operand()
		if err != nil {
			return nil, err
		}
		if !p.keyword("AND") {
			return nil, fmt.Errorf("invalid expression: BETWEEN without AND")
		}
		hi, err := p.operand()
		if err != nil {
			return nil, err
		}
		return &cond{op: "between", args: []operand{l, lo, hi}}, nil
	}
	if p.keyword("IN") {
		if err := p.expect("("); err != nil {
			return nil, err
		}
		args, err := p.operands()
		if err != nil {
			return nil, err
		}
		return &cond{op: "in", args: append([]operand{l}, args...)}, nil
	}
	t = p.next()
	if t.kind != tOp || !isComparator(t.text) {
		return nil, fmt.Errorf("invalid expression: expected a comparator, got %q", t.text)
	}
	r, err := p.operand()
	if err != nil {
		return nil, err
	}
	return &cond{op: "cmp", cmp: t.text, args: []operand{l, r}}, nil
}

func isComparator(s string) bool {
	switch s {
	case "=", "<>", "<", "<=", ">", ">=":
		return true
	}
	return false
}

// operands parses "a, b, c)" (the opening parenthesis already read).
func (p *parser) operands() ([]operand, error) {
	var out []operand
	for {
		o, err := p.operand()
		if err != nil {
			return nil, err
		}
		out = append(out, o)
		if p.opIs(")") {
			return out, nil
		}
		if err := p.expect(","); err != nil {
			return nil, err
		}
	}
}

func (p *parser) operand() (operand, error) {
	t := p.next()
	switch t.kind {
	case tName:
		if strings.EqualFold(t.text, "size") && p.opIs("(") {
			inner, err := p.operand()
			if err != nil {
				return operand{}, err
			}
			if err := p.expect(")"); err != nil {
				return operand{}, err
			}
			inner.fn = "size"
			return inner, nil
		}
		return operand{path: t.text}, nil
	case tAlias:
		return operand{path: t.text}, nil
	case tValue:
		return operand{value: t.text}, nil
	}
	return operand{}, fmt.Errorf("invalid expression: expected an operand, got %q", t.text)
}

// update is a parsed update expression: its actions in the order written.
type update struct {
	actions []action
}

// action is one SET, REMOVE, ADD or DELETE of one attribute.
type action struct {
	clause string // SET, REMOVE, ADD, DELETE
	path   string
	val    valueExpr // SET's right-hand side
	value  string    // ADD's and DELETE's :value
}

type valueExpr struct {
	kind string // operand, plus, minus, ifnotexists, listappend
	op   operand
	a, b *valueExpr
}

func parseUpdate(s string) (*update, error) {
	toks, err := lex(s)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	u := &update{}
	seen := map[string]bool{}
	for p.peek().kind != tEOF {
		t := p.next()
		clause := strings.ToUpper(t.text)
		if t.kind != tName || seen[clause] {
			return nil, fmt.Errorf("invalid update expression: unexpected %q", t.text)
		}
		if clause != "SET" && clause != "REMOVE" && clause != "ADD" && clause != "DELETE" {
			return nil, fmt.Errorf("invalid update expression: unknown clause %q", t.text)
		}
		seen[clause] = true
		for {
			a, err := p.action(clause)
			if err != nil {
				return nil, err
			}
			u.actions = append(u.actions, a)
			if !p.opIs(",") {
				break
			}
		}
	}
	return u, nil
}

// action parses one action of clause: "path = value" (SET), "path" (REMOVE) or
// "path :value" (ADD, DELETE).
func (p *parser) action(clause string) (action, error) {
	path, err := p.path()
	if err != nil {
		return action{}, err
	}
	a := action{clause: clause, path: path}
	switch clause {
	case "SET":
		if err := p.expect("="); err != nil {
			return action{}, err
		}
		a.val, err = p.valueExpr()
		return a, err
	case "ADD", "DELETE":
		v := p.next()
		if v.kind != tValue {
			return action{}, fmt.Errorf("invalid update expression: %s %s needs a :value", clause, path)
		}
		a.value = v.text
	}
	return a, nil
}

func (p *parser) path() (string, error) {
	t := p.next()
	if t.kind != tName && t.kind != tAlias {
		return "", fmt.Errorf("invalid update expression: expected an attribute, got %q", t.text)
	}
	return t.text, nil
}

func (p *parser) valueExpr() (valueExpr, error) {
	l, err := p.valueTerm()
	if err != nil {
		return valueExpr{}, err
	}
	var kind string
	switch {
	case p.opIs("+"):
		kind = "plus"
	case p.opIs("-"):
		kind = "minus"
	default:
		return l, nil
	}
	r, err := p.valueTerm()
	if err != nil {
		return valueExpr{}, err
	}
	return valueExpr{kind: kind, a: &l, b: &r}, nil
}

func (p *parser) valueTerm() (valueExpr, error) {
	t := p.peek()
	if t.kind == tName && p.toks[p.pos+1].kind == tOp && p.toks[p.pos+1].text == "(" {
		fn := strings.ToLower(t.text)
		if fn != "if_not_exists" && fn != "list_append" {
			return valueExpr{}, fmt.Errorf("invalid update expression: function %s is outside the simulator's subset", t.text)
		}
		p.pos += 2
		a, err := p.valueExpr()
		if err != nil {
			return valueExpr{}, err
		}
		if err := p.expect(","); err != nil {
			return valueExpr{}, err
		}
		b, err := p.valueExpr()
		if err != nil {
			return valueExpr{}, err
		}
		if err := p.expect(")"); err != nil {
			return valueExpr{}, err
		}
		kind := "ifnotexists"
		if fn == "list_append" {
			kind = "listappend"
		}
		return valueExpr{kind: kind, a: &a, b: &b}, nil
	}
	o, err := p.operand()
	if err != nil {
		return valueExpr{}, err
	}
	return valueExpr{kind: "operand", op: o}, nil
}

// Parsed expressions are cached: idem sends the same few strings millions of times.
var (
	condCache   sync.Map // string -> *cond or error
	updateCache sync.Map // string -> *update or error
)

type cached[T any] struct {
	v   T
	err error
}

func parseCond(s string) (*cond, error) {
	if v, ok := condCache.Load(s); ok {
		c := v.(cached[*cond])
		return c.v, c.err
	}
	toks, err := lex(s)
	var c *cond
	if err == nil {
		p := &parser{toks: toks}
		c, err = p.orExpr()
		if err == nil && p.peek().kind != tEOF {
			err = fmt.Errorf("invalid expression: unexpected %q", p.peek().text)
		}
	}
	condCache.Store(s, cached[*cond]{c, err})
	return c, err
}

func parseUpdateCached(s string) (*update, error) {
	if v, ok := updateCache.Load(s); ok {
		c := v.(cached[*update])
		return c.v, c.err
	}
	u, err := parseUpdate(s)
	updateCache.Store(s, cached[*update]{u, err})
	return u, err
}

// exprEnv resolves #names and :values of one request.
type exprEnv struct {
	names  map[string]string
	values map[string]types.AttributeValue
	used   map[string]bool
}

func (e *exprEnv) name(p string) (string, error) {
	if strings.HasPrefix(p, "#") {
		n, ok := e.names[p]
		if !ok {
			return "", fmt.Errorf("value provided in ExpressionAttributeNames unused or undefined: %s", p)
		}
		e.mark(p)
		return n, nil
	}
	if reserved[strings.ToUpper(p)] {
		return "", fmt.Errorf("attribute name is a reserved keyword; reserved keyword: %s", p)
	}
	return p, nil
}

func (e *exprEnv) value(v string) (types.AttributeValue, error) {
	av, ok := e.values[v]
	if !ok {
		return nil, fmt.Errorf("an expression attribute value used in expression is not defined; attribute value: %s", v)
	}
	e.mark(v)
	return av, nil
}

// markRefs marks every #name and :value an expression string mentions as used.
func (e *exprEnv) markRefs(exprs ...*string) {
	for _, x := range exprs {
		if x == nil {
			continue
		}
		toks, err := lex(*x)
		if err != nil {
			continue
		}
		for _, t := range toks {
			if t.kind == tAlias || t.kind == tValue {
				e.mark(t.text)
			}
		}
	}
}

func (e *exprEnv) mark(s string) {
	if e.used == nil {
		e.used = map[string]bool{}
	}
	e.used[s] = true
}

// unused reports a name or value given but not used by any expression of the request,
// which DynamoDB refuses.
func (e *exprEnv) unused() error {
	for n := range e.names {
		if !e.used[n] {
			return fmt.Errorf("value provided in ExpressionAttributeNames unused in expressions: keys: {%s}", n)
		}
	}
	for v := range e.values {
		if !e.used[v] {
			return fmt.Errorf("value provided in ExpressionAttributeValues unused in expressions: keys: {%s}", v)
		}
	}
	return nil
}

// reserved holds the DynamoDB reserved words that appear as attribute names in this
// repository's data, so that writing one unaliased is refused as DynamoDB refuses it.
// (DynamoDB reserves about 570 words; these are the ones a test here could trip on.)
var reserved = map[string]bool{
	"STATUS": true, "OWNER": true, "ERROR": true, "RESPONSE": true, "DATA": true, "NAME": true,
	"KEY": true, "VALUE": true, "TIMESTAMP": true, "COUNT": true, "SIZE": true, "TTL": true,
	"ITEMS": true, "USER": true, "STATE": true, "TYPE": true, "CONNECTION": true,
}

// eval evaluates c against item (nil: no item).
func (c *cond) eval(e *exprEnv, item map[string]types.AttributeValue) (bool, error) {
	switch c.op {
	case "and", "or":
		l, err := c.kids[0].eval(e, item)
		if err != nil {
			return false, err
		}
		r, err := c.kids[1].eval(e, item)
		if err != nil {
			return false, err
		}
		if c.op == "and" {
			return l && r, nil
		}
		return l || r, nil
	case "not":
		v, err := c.kids[0].eval(e, item)
		return !v, err
	case "exists", "notexists":
		n, err := e.name(c.args[0].path)
		if err != nil {
			return false, err
		}
		_, ok := item[n]
		return ok == (c.op == "exists"), nil
	}
	vals := make([]types.AttributeValue, len(c.args))
	for i, a := range c.args {
		v, err := e.resolve(a, item)
		if err != nil {
			return false, err
		}
		vals[i] = v
	}
	switch c.op {
	case "cmp":
		return compare(vals[0], c.cmp, vals[1]), nil
	case "between":
		return compare(vals[0], ">=", vals[1]) && compare(vals[0], "<=", vals[2]), nil
	case "in":
		for _, v := range vals[1:] {
			if compare(vals[0], "=", v) {
				return true, nil
			}
		}
		return false, nil
	case "type":
		t, ok := vals[1].(*types.AttributeValueMemberS)
		return ok && vals[0] != nil && typeOf(vals[0]) == t.Value, nil
	case "begins":
		a, ok1 := vals[0].(*types.AttributeValueMemberS)
		b, ok2 := vals[1].(*types.AttributeValueMemberS)
		return ok1 && ok2 && strings.HasPrefix(a.Value, b.Value), nil
	case "contains":
		return contains(vals[0], vals[1]), nil
	}
	return false, fmt.Errorf("invalid expression: operator %s", c.op)
}

// resolve gives an operand's value in item (nil when the attribute is missing).
func (e *exprEnv) resolve(o operand, item map[string]types.AttributeValue) (types.AttributeValue, error) {
	var v types.AttributeValue
	if o.value != "" {
		av, err := e.value(o.value)
		if err != nil {
			return nil, err
		}
		v = av
	} else {
		n, err := e.name(o.path)
		if err != nil {
			return nil, err
		}
		v = item[n]
	}
	if o.fn == "size" {
		if v == nil {
			return nil, nil
		}
		n, ok := sizeOf(v)
		if !ok {
			return nil, fmt.Errorf("invalid function operand: size of %s", typeOf(v))
		}
		return num(int64(n)), nil
	}
	return v, nil
}

// apply runs u on item (a copy), returning the new item.
func (u *update) apply(e *exprEnv, old map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	// Every right-hand side is evaluated against the item as it was, as DynamoDB does;
	// a nil value removes the attribute.
	next := make(map[string]types.AttributeValue, len(u.actions))
	for _, a := range u.actions {
		n, err := e.name(a.path)
		if err != nil {
			return nil, err
		}
		if _, dup := next[n]; dup {
			return nil, fmt.Errorf("two document paths overlap with each other; must remove or rewrite one of these paths; path one: [%s], path two: [%s]", n, n)
		}
		if next[n], err = a.eval(e, old, old[n]); err != nil {
			return nil, err
		}
	}
	item := make(map[string]types.AttributeValue, len(old)+len(next))
	for k, v := range old {
		item[k] = v
	}
	for k, v := range next {
		if v == nil {
			delete(item, k)
		} else {
			item[k] = v
		}
	}
	return item, nil
}

// eval gives the attribute's new value (nil: removed), cur being its value in old.
func (a *action) eval(e *exprEnv, old map[string]types.AttributeValue, cur types.AttributeValue) (types.AttributeValue, error) {
	switch a.clause {
	case "SET":
		return a.val.eval(e, old)
	case "REMOVE":
		return nil, nil
	}
	v, err := e.value(a.value)
	if err != nil {
		return nil, err
	}
	if a.clause == "ADD" {
		return add(cur, v)
	}
	return subtractSet(cur, v)
}

func (v *valueExpr) eval(e *exprEnv, item map[string]types.AttributeValue) (types.AttributeValue, error) {
	switch v.kind {
	case "operand":
		av, err := e.resolve(v.op, item)
		if err != nil {
			return nil, err
		}
		if av == nil {
			return nil, fmt.Errorf("the provided expression refers to an attribute that does not exist in the item")
		}
		return av, nil
	case "ifnotexists":
		if v.a.kind != "operand" || v.a.op.path == "" {
			return nil, fmt.Errorf("invalid update expression: if_not_exists needs an attribute first")
		}
		n, err := e.name(v.a.op.path)
		if err != nil {
			return nil, err
		}
		if cur, ok := item[n]; ok {
			return cur, nil
		}
		return v.b.eval(e, item)
	case "plus", "minus", "listappend":
		a, err := v.a.eval(e, item)
		if err != nil {
			return nil, err
		}
		b, err := v.b.eval(e, item)
		if err != nil {
			return nil, err
		}
		if v.kind != "listappend" {
			return arith(a, b, v.kind == "minus")
		}
		la, ok1 := a.(*types.AttributeValueMemberL)
		lb, ok2 := b.(*types.AttributeValueMemberL)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("incorrect operand type for operator or function; operator or function: list_append")
		}
		return &types.AttributeValueMemberL{Value: append(append([]types.AttributeValue{}, la.Value...), lb.Value...)}, nil
	}
	return nil, fmt.Errorf("invalid update expression")
}
