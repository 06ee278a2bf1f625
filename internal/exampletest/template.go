package exampletest

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
)

// Resource types tests look for in a template.
const (
	TypeQueue    = "AWS::SQS::Queue"
	TypeTable    = "AWS::DynamoDB::Table"
	TypeFunction = "AWS::Serverless::Function"
)

// Template is what tests read of a template's YAML, so that they expect what it says
// instead of naming its resources: its resources (in template order) and its
// parameters' defaults. It reads the YAML on its own, not through internal/stack, so that
// the stack's tests check the stack against an independent reading.
type Template struct {
	Resources []Resource
	Defaults  map[string]string // parameter -> its Default, as text
	// globalVars is Globals.Function.Environment.Variables: SAM merges them into every
	// AWS::Serverless::Function's own.
	globalVars *yaml.Node
}

// Resource is one resource of a template.
type Resource struct {
	ID, Type string
	Node     *yaml.Node // the resource's mapping
}

// Var is one environment variable of a function: its name and its YAML value (Tag
// "!Ref", "!Sub"... for an intrinsic function).
type Var struct {
	Name  string
	Value *yaml.Node
}

// ReadTemplate parses a template, or an example's block (its Resources mapping and
// Parameters are read the same way).
func ReadTemplate(t testing.TB, data []byte) *Template {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		t.Fatalf("parse template: %v", err)
	}
	root := doc.Content[0]
	out := &Template{Defaults: map[string]string{}}
	if ps := mapValue(root, "Parameters"); ps != nil {
		for i := 0; i+1 < len(ps.Content); i += 2 {
			if d := mapValue(ps.Content[i+1], "Default"); d != nil && d.Kind == yaml.ScalarNode {
				out.Defaults[ps.Content[i].Value] = d.Value
			}
		}
	}
	out.globalVars = mapValue(mapValue(mapValue(mapValue(root, "Globals"), "Function"), "Environment"), "Variables")
	if rs := mapValue(root, "Resources"); rs != nil {
		for i := 0; i+1 < len(rs.Content); i += 2 {
			r := Resource{ID: rs.Content[i].Value, Node: rs.Content[i+1]}
			if typ := mapValue(r.Node, "Type"); typ != nil {
				r.Type = typ.Value
			}
			out.Resources = append(out.Resources, r)
		}
	}
	return out
}

// ReadTemplateFile is ReadTemplate of the file at path.
func ReadTemplateFile(t testing.TB, path string) *Template {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return ReadTemplate(t, data)
}

// Block returns what ex's template block declares.
func Block(t testing.TB, ex example.Example) *Template {
	t.Helper()
	return ReadTemplate(t, ex.Template())
}

// OfType returns the logical ids of the resources of the types, in template order.
func (tp *Template) OfType(types ...string) []string {
	var ids []string
	for _, r := range tp.Resources {
		if slices.Contains(types, r.Type) {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// Resource returns the resource with the logical id.
func (tp *Template) Resource(id string) (Resource, bool) {
	for _, r := range tp.Resources {
		if r.ID == id {
			return r, true
		}
	}
	return Resource{}, false
}

// Prop returns the node at the path of keys under the resource's Properties, or nil.
func (tp *Template) Prop(id string, path ...string) *yaml.Node {
	r, ok := tp.Resource(id)
	if !ok {
		return nil
	}
	n := mapValue(r.Node, "Properties")
	for _, k := range path {
		n = mapValue(n, k)
	}
	return n
}

// Env returns the function's Environment.Variables with the Globals' merged in, as SAM
// merges them: the Globals' first, in template order, each replaced by the function's
// own value of the same name, then the function's others.
func (tp *Template) Env(function string) []Var {
	var out []Var
	sources := []*yaml.Node{tp.Prop(function, "Environment", "Variables")}
	if r, ok := tp.Resource(function); ok && r.Type == TypeFunction {
		sources = append([]*yaml.Node{tp.globalVars}, sources...)
	}
	for _, vars := range sources {
		if vars == nil {
			continue
		}
		for i := 0; i+1 < len(vars.Content); i += 2 {
			v := Var{Name: vars.Content[i].Value, Value: vars.Content[i+1]}
			if at := slices.IndexFunc(out, func(o Var) bool { return o.Name == v.Name }); at >= 0 {
				out[at] = v
				continue
			}
			out = append(out, v)
		}
	}
	return out
}

// VarNames returns the names of the variables of every function of the template, in
// template order, each once: the variables Up gives the functions (without QUEUE_URL,
// which it adds).
func (tp *Template) VarNames() []string {
	var names []string
	for _, fn := range tp.OfType(TypeFunction) {
		for _, v := range tp.Env(fn) {
			if !slices.Contains(names, v.Name) {
				names = append(names, v.Name)
			}
		}
	}
	return names
}

var subVar = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)\}`)

// Static returns the value a variable has with the parameters' defaults, when it does
// not depend on a resource: a plain scalar, a !Ref of a parameter, or a !Sub of
// parameters. ok is false otherwise.
func (tp *Template) Static(v *yaml.Node) (string, bool) {
	if v == nil || v.Kind != yaml.ScalarNode {
		return "", false
	}
	switch v.Tag {
	case "!Ref":
		d, ok := tp.Defaults[v.Value]
		return d, ok
	case "!Sub":
		ok := true
		s := subVar.ReplaceAllStringFunc(v.Value, func(m string) string {
			d, found := tp.Defaults[m[2:len(m)-1]]
			ok = ok && found
			return d
		})
		return s, ok
	case "", "!!str", "!!int", "!!bool", "!!float":
		return v.Value, true
	}
	return "", false
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
