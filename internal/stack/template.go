package stack

import (
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Resource types Up creates.
const (
	TypeQueue = "AWS::SQS::Queue"
	TypeTable = "AWS::DynamoDB::Table"
)

// Function types whose environment goes into Env.
const (
	typeServerlessFunction = "AWS::Serverless::Function"
	typeLambdaFunction     = "AWS::Lambda::Function"
)

// Template is a parsed SAM/CloudFormation template. Intrinsic functions are kept in
// their long form ({"Ref": ...}, {"Fn::GetAtt": [...]}) and resolved by Up, Env,
// EventSource and ReaperPeriod. Not safe for concurrent use with SetParameters.
type Template struct {
	// Path is the file the template was loaded from ("" for Parse).
	Path string

	params     []*parameter
	conditions *object
	mappings   *object
	globals    *object
	resources  []*resource
	byID       map[string]*resource
	overrides  map[string]string
}

type parameter struct {
	name string
	def  *object // the parameter's declaration
}

type resource struct {
	id        string
	typ       string
	props     *object // nil when the resource has no Properties
	condition string
	dependsOn []string
	line      int
}

// object is a YAML mapping that keeps its key order (environment variables are listed
// in template order).
type object struct {
	keys []string
	vals map[string]any
}

func newObject() *object { return &object{vals: map[string]any{}} }

func (o *object) get(key string) (any, bool) {
	if o == nil {
		return nil, false
	}
	v, ok := o.vals[key]
	return v, ok
}

func (o *object) set(key string, v any) {
	if _, ok := o.vals[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.vals[key] = v
}

// getObject returns o[key] when it is a mapping.
func (o *object) getObject(key string) *object {
	v, _ := o.get(key)
	obj, _ := v.(*object)
	return obj
}

// Load reads and parses the template at path.
func Load(path string) (*Template, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("stack: read template: %w", err)
	}
	t, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("stack: %s: %w", path, err)
	}
	t.Path = path
	return t, nil
}

// Parse parses a template from YAML (JSON is YAML too).
func Parse(data []byte) (*Template, error) {
	t, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	return t, nil
}

func parse(data []byte) (*Template, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Kind == 0 {
		return nil, errors.New("empty template")
	}
	v, err := convert(&doc, 0)
	if err != nil {
		return nil, err
	}
	root, ok := v.(*object)
	if !ok {
		return nil, errors.New("template is not a mapping")
	}
	return fromRoot(root, resourceLines(&doc))
}

func fromRoot(root *object, lines map[string]int) (*Template, error) {
	t := &Template{
		conditions: root.getObject("Conditions"),
		mappings:   root.getObject("Mappings"),
		globals:    root.getObject("Globals"),
		byID:       map[string]*resource{},
		overrides:  map[string]string{},
	}
	if ps := root.getObject("Parameters"); ps != nil {
		for _, name := range ps.keys {
			def := ps.getObject(name)
			if def == nil {
				return nil, fmt.Errorf("parameter %s is not a mapping", name)
			}
			t.params = append(t.params, &parameter{name: name, def: def})
		}
	}
	rs := root.getObject("Resources")
	if rs == nil || len(rs.keys) == 0 {
		return nil, errors.New("no Resources")
	}
	for _, id := range rs.keys {
		obj := rs.getObject(id)
		if obj == nil {
			return nil, fmt.Errorf("resource %s is not a mapping", id)
		}
		r := &resource{id: id, line: lines[id]}
		typ, _ := obj.get("Type")
		if r.typ, _ = typ.(string); r.typ == "" {
			return nil, fmt.Errorf("resource %s has no Type", id)
		}
		if p, ok := obj.get("Properties"); ok && p != nil {
			if r.props, ok = p.(*object); !ok {
				return nil, fmt.Errorf("resource %s: Properties is not a mapping", id)
			}
		}
		if c, ok := obj.get("Condition"); ok {
			if r.condition, ok = c.(string); !ok {
				return nil, fmt.Errorf("resource %s: Condition is not a name", id)
			}
		}
		switch d := obj.vals["DependsOn"].(type) {
		case nil:
		case string:
			r.dependsOn = []string{d}
		case []any:
			for _, x := range d {
				s, ok := x.(string)
				if !ok {
					return nil, fmt.Errorf("resource %s: DependsOn lists a non-name", id)
				}
				r.dependsOn = append(r.dependsOn, s)
			}
		default:
			return nil, fmt.Errorf("resource %s: DependsOn is neither a name nor a list", id)
		}
		t.resources = append(t.resources, r)
		t.byID[id] = r
	}
	for _, r := range t.resources {
		for _, d := range r.dependsOn {
			if t.byID[d] == nil {
				return nil, fmt.Errorf("resource %s: DependsOn names unknown resource %s", r.id, d)
			}
		}
	}
	return t, nil
}

// resourceLines maps logical ids to their line in the file, for messages.
func resourceLines(doc *yaml.Node) map[string]int {
	lines := map[string]int{}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return lines
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "Resources" || root.Content[i+1].Kind != yaml.MappingNode {
			continue
		}
		rs := root.Content[i+1]
		for j := 0; j+1 < len(rs.Content); j += 2 {
			lines[rs.Content[j].Value] = rs.Content[j].Line
		}
	}
	return lines
}

// shortForms maps the short-form tags to the long-form keys.
var shortForms = map[string]string{
	"!Ref":          "Ref",
	"!Condition":    "Condition",
	"!GetAtt":       "Fn::GetAtt",
	"!Sub":          "Fn::Sub",
	"!If":           "Fn::If",
	"!Equals":       "Fn::Equals",
	"!Not":          "Fn::Not",
	"!And":          "Fn::And",
	"!Or":           "Fn::Or",
	"!Join":         "Fn::Join",
	"!Select":       "Fn::Select",
	"!Split":        "Fn::Split",
	"!FindInMap":    "Fn::FindInMap",
	"!Base64":       "Fn::Base64",
	"!Cidr":         "Fn::Cidr",
	"!GetAZs":       "Fn::GetAZs",
	"!ImportValue":  "Fn::ImportValue",
	"!Transform":    "Fn::Transform",
	"!ToJsonString": "Fn::ToJsonString",
	"!Length":       "Fn::Length",
}

// maxDepth bounds nesting (and alias expansion) of the template.
const maxDepth = 200

// convert turns a YAML node into *object, []any, string, bool, int64, float64 or nil,
// with short-form intrinsics rewritten to their long form.
func convert(n *yaml.Node, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("line %d: nested too deeply", n.Line)
	}
	if long, ok := shortForms[n.Tag]; ok {
		return intrinsic(n, long, depth)
	}
	if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		return nil, fmt.Errorf("line %d: unknown tag %s", n.Line, n.Tag)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return convert(n.Content[0], depth+1)
	case yaml.AliasNode:
		return convert(n.Alias, depth+1)
	case yaml.MappingNode:
		obj := newObject()
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: mapping key is not a scalar", k.Line)
			}
			if _, dup := obj.vals[k.Value]; dup {
				return nil, fmt.Errorf("line %d: duplicate key %s", k.Line, k.Value)
			}
			v, err := convert(n.Content[i+1], depth+1)
			if err != nil {
				return nil, err
			}
			obj.set(k.Value, v)
		}
		return obj, nil
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := convert(c, depth+1)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		return list, nil
	case yaml.ScalarNode:
		return scalar(n)
	}
	return nil, fmt.Errorf("line %d: unexpected YAML node", n.Line)
}

func scalar(n *yaml.Node) (any, error) {
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		return decodeScalar[bool](n)
	case "!!int":
		return decodeScalar[int64](n)
	case "!!float":
		return decodeScalar[float64](n)
	default: // !!str, !!timestamp, !!binary: CloudFormation reads them as text
		return n.Value, nil
	}
}

func decodeScalar[T any](n *yaml.Node) (any, error) {
	var v T
	if err := n.Decode(&v); err != nil {
		return nil, fmt.Errorf("line %d: %w", n.Line, err)
	}
	return v, nil
}

// intrinsic converts a short-form tagged node, e.g. `!GetAtt Queue.Arn`, to its long
// form, {"Fn::GetAtt": ["Queue", "Arn"]}.
func intrinsic(n *yaml.Node, long string, depth int) (any, error) {
	var arg any
	if n.Kind == yaml.ScalarNode {
		arg = n.Value
	} else {
		c := *n
		c.Tag = ""
		var err error
		if arg, err = convert(&c, depth+1); err != nil {
			return nil, err
		}
	}
	switch long {
	case "Ref", "Condition":
		if n.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: %s takes a name", n.Line, n.Tag)
		}
	case "Fn::GetAtt":
		if s, ok := arg.(string); ok {
			id, attr, found := strings.Cut(s, ".")
			if !found || id == "" || attr == "" {
				return nil, fmt.Errorf("line %d: !GetAtt %s: want LogicalId.Attribute", n.Line, s)
			}
			arg = []any{id, attr}
		}
	}
	obj := newObject()
	obj.set(long, arg)
	return obj, nil
}

// SetParameters overrides parameter values (by default each parameter's Default). It
// refuses unknown names and values the parameter's constraints reject.
func (t *Template) SetParameters(values map[string]string) error {
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := t.param(name)
		if p == nil {
			return fmt.Errorf("stack: no parameter %s in the template (parameters: %s)", name, strings.Join(t.ParameterNames(), ", "))
		}
		if err := p.check(values[name]); err != nil {
			return fmt.Errorf("stack: parameter %s: %w", name, err)
		}
	}
	for _, name := range names {
		t.overrides[name] = values[name]
	}
	return nil
}

// ParameterNames lists the template's parameters in template order.
func (t *Template) ParameterNames() []string {
	names := make([]string, len(t.params))
	for i, p := range t.params {
		names[i] = p.name
	}
	return names
}

func (t *Template) param(name string) *parameter {
	for _, p := range t.params {
		if p.name == name {
			return p
		}
	}
	return nil
}

// paramValues returns every parameter's value: the override, else the Default. List
// parameters hold []any of strings, the others a string.
func (t *Template) paramValues() (map[string]any, error) {
	vals := make(map[string]any, len(t.params))
	for _, p := range t.params {
		v, ok := t.overrides[p.name]
		if !ok {
			d, has := p.def.get("Default")
			if !has {
				return nil, fmt.Errorf("stack: parameter %s has no Default: give it a value (idemctl up --param %s=...)", p.name, p.name)
			}
			s, err := text(d)
			if err != nil {
				return nil, fmt.Errorf("stack: parameter %s: Default: %w", p.name, err)
			}
			if err := p.check(s); err != nil {
				return nil, fmt.Errorf("stack: parameter %s: Default: %w", p.name, err)
			}
			v = s
		}
		if p.isList() {
			var list []any
			if v != "" {
				for _, item := range strings.Split(v, ",") {
					list = append(list, strings.TrimSpace(item))
				}
			}
			vals[p.name] = list
		} else {
			vals[p.name] = v
		}
	}
	return vals, nil
}

func (p *parameter) typ() string {
	s, _ := p.def.vals["Type"].(string)
	return s
}

func (p *parameter) isList() bool {
	typ := p.typ()
	return typ == "CommaDelimitedList" || strings.HasPrefix(typ, "List<")
}

// check applies the constraints CloudFormation applies to a parameter value.
func (p *parameter) check(v string) error {
	values := []string{v}
	if p.isList() {
		values = strings.Split(v, ",")
	}
	for _, v := range values {
		if err := p.checkOne(strings.TrimSpace(v)); err != nil {
			return err
		}
	}
	return nil
}

func (p *parameter) checkOne(v string) error {
	if allowed, ok := p.def.vals["AllowedValues"].([]any); ok {
		found := false
		for _, a := range allowed {
			if s, err := text(a); err == nil && s == v {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("%q is not one of the AllowedValues", v)
		}
	}
	if pat, ok := p.def.vals["AllowedPattern"].(string); ok {
		// CloudFormation matches the whole value. A pattern RE2 cannot compile (Java
		// regex features) is left to CloudFormation.
		if re, err := regexp.Compile("^(?:" + pat + ")$"); err == nil && !re.MatchString(v) {
			return fmt.Errorf("%q does not match AllowedPattern %s", v, pat)
		}
	}
	if strings.Contains(p.typ(), "Number") {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		if lo, ok := number(p.def.vals["MinValue"]); ok && f < lo {
			return fmt.Errorf("%s is below MinValue %v", v, lo)
		}
		if hi, ok := number(p.def.vals["MaxValue"]); ok && f > hi {
			return fmt.Errorf("%s is above MaxValue %v", v, hi)
		}
	}
	if lo, ok := number(p.def.vals["MinLength"]); ok && float64(len(v)) < lo {
		return fmt.Errorf("%q is shorter than MinLength %v", v, lo)
	}
	if hi, ok := number(p.def.vals["MaxLength"]); ok && float64(len(v)) > hi {
		return fmt.Errorf("%q is longer than MaxLength %v", v, hi)
	}
	return nil
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	case string:
		f, err := strconv.ParseFloat(n, 64)
		return f, err == nil
	}
	return 0, false
}

// text renders a resolved scalar as CloudFormation does when it needs a string.
func text(v any) (string, error) {
	switch s := v.(type) {
	case string:
		return s, nil
	case bool:
		return strconv.FormatBool(s), nil
	case int64:
		return strconv.FormatInt(s, 10), nil
	case float64:
		if s == math.Trunc(s) && math.Abs(s) < 1e15 {
			return strconv.FormatInt(int64(s), 10), nil
		}
		return strconv.FormatFloat(s, 'f', -1, 64), nil
	case nil:
		return "", errors.New("is null, want a value")
	case []any:
		return "", errors.New("is a list, want a single value")
	default:
		return "", errors.New("is a mapping, want a single value")
	}
}
