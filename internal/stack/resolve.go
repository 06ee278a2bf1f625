package stack

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// noValue is what Ref AWS::NoValue resolves to: the property (or list item) is dropped.
type noValue struct{}

// Resource is a queue, table or secret Up created or found.
type Resource struct {
	LogicalID string
	Type      string // TypeQueue, TypeTable or TypeSecret
	Name      string // physical name
	URL       string // queue URL (queues only)
	ARN       string
	Status    string // "created", "exists" or "updated" (queue attributes converged)
}

// ref is what Ref of the resource returns: a queue's URL, a table's name, a secret's ARN.
func (r *Resource) ref() string {
	switch r.Type {
	case TypeQueue:
		return r.URL
	case TypeSecret:
		return r.ARN
	}
	return r.Name
}

// attr is what Fn::GetAtt of the resource returns.
func (r *Resource) attr(name string) (string, error) {
	switch {
	case name == "Arn":
		return r.ARN, nil
	case r.Type == TypeQueue && name == "QueueName":
		return r.Name, nil
	case r.Type == TypeQueue && name == "QueueUrl":
		return r.URL, nil
	case r.Type == TypeQueue:
		return "", fmt.Errorf("attribute %s of queue %s is not supported locally (Arn, QueueName, QueueUrl are)", name, r.LogicalID)
	case r.Type == TypeSecret:
		return "", fmt.Errorf("attribute %s of secret %s is not supported locally (Ref is)", name, r.LogicalID)
	default:
		return "", fmt.Errorf("attribute %s of table %s is not supported locally (Arn is)", name, r.LogicalID)
	}
}

// resolver evaluates intrinsic functions for one stack.
type resolver struct {
	t      *Template
	params map[string]any
	pseudo map[string]string
	res    map[string]*Resource // created so far, by logical id
	conds  map[string]bool
	active map[string]bool // conditions being evaluated, for cycles
}

// newResolver returns a resolver with the template's parameter values. region and
// stack may be empty for static resolution (EventSource, ReaperPeriod).
func (t *Template) newResolver(stack, region string) (*resolver, error) {
	params, err := t.paramValues()
	if err != nil {
		return nil, err
	}
	r := &resolver{
		t:      t,
		params: params,
		pseudo: map[string]string{
			"AWS::Partition": "aws",
			"AWS::URLSuffix": "amazonaws.com",
		},
		res:    map[string]*Resource{},
		conds:  map[string]bool{},
		active: map[string]bool{},
	}
	if stack != "" {
		r.pseudo["AWS::StackName"] = stack
	}
	if region != "" {
		r.pseudo["AWS::Region"] = region
	}
	return r, nil
}

// learnAccount takes the account id (for AWS::AccountId) from the first ARN the
// endpoint returns: moto uses 123456789012, LocalStack 000000000000.
func (r *resolver) learnAccount(arn string) {
	if _, ok := r.pseudo["AWS::AccountId"]; ok {
		return
	}
	// arn:partition:service:region:account:resource
	if parts := strings.SplitN(arn, ":", 6); len(parts) == 6 && parts[4] != "" {
		r.pseudo["AWS::AccountId"] = parts[4]
		if stack, ok := r.pseudo["AWS::StackName"]; ok {
			r.pseudo["AWS::StackId"] = fmt.Sprintf("arn:aws:cloudformation:%s:%s:stack/%s/local", parts[3], parts[4], stack)
		}
	}
}

// resolveErr is an error located in the template: resource and property path.
func resolveErr(where, format string, args ...any) error {
	return fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...))
}

// resolve evaluates every intrinsic function in v. Mappings come back as
// map[string]any; properties set to AWS::NoValue are dropped.
func (r *resolver) resolve(v any, where string) (any, error) {
	switch x := v.(type) {
	case *object:
		if len(x.keys) == 1 && (x.keys[0] == "Ref" || strings.HasPrefix(x.keys[0], "Fn::")) {
			return r.intrinsic(x.keys[0], x.vals[x.keys[0]], where)
		}
		out := make(map[string]any, len(x.keys))
		for _, k := range x.keys {
			rv, err := r.resolve(x.vals[k], where+"."+k)
			if err != nil {
				return nil, err
			}
			if _, drop := rv.(noValue); !drop {
				out[k] = rv
			}
		}
		return out, nil
	case []any:
		out := make([]any, 0, len(x))
		for i, item := range x {
			rv, err := r.resolve(item, fmt.Sprintf("%s[%d]", where, i))
			if err != nil {
				return nil, err
			}
			if _, drop := rv.(noValue); !drop {
				out = append(out, rv)
			}
		}
		return out, nil
	default:
		return v, nil
	}
}

// resolveText resolves v to a single value rendered as text.
func (r *resolver) resolveText(v any, where string) (string, error) {
	rv, err := r.resolve(v, where)
	if err != nil {
		return "", err
	}
	if _, ok := rv.(noValue); ok {
		return "", resolveErr(where, "is AWS::NoValue, want a value")
	}
	s, err := text(rv)
	if err != nil {
		return "", resolveErr(where, "%v", err)
	}
	return s, nil
}

func (r *resolver) intrinsic(fn string, arg any, where string) (any, error) {
	where += "." + fn
	switch fn {
	case "Ref":
		name, ok := arg.(string)
		if !ok {
			return nil, resolveErr(where, "takes a name")
		}
		return r.ref(name, where)
	case "Fn::GetAtt":
		return r.getAtt(arg, where)
	case "Fn::Sub":
		return r.sub(arg, where)
	case "Fn::If":
		args, ok := arg.([]any)
		if !ok || len(args) != 3 {
			return nil, resolveErr(where, "takes [condition, value if true, value if false]")
		}
		name, ok := args[0].(string)
		if !ok {
			return nil, resolveErr(where, "the condition must be a condition name")
		}
		c, err := r.condition(name, where)
		if err != nil {
			return nil, err
		}
		if c {
			return r.resolve(args[1], where+"[1]")
		}
		return r.resolve(args[2], where+"[2]")
	case "Fn::Join":
		args, ok := arg.([]any)
		if !ok || len(args) != 2 {
			return nil, resolveErr(where, "takes [delimiter, list]")
		}
		delim, ok := args[0].(string)
		if !ok {
			return nil, resolveErr(where, "the delimiter must be a string")
		}
		list, err := r.resolveList(args[1], where+"[1]")
		if err != nil {
			return nil, err
		}
		parts := make([]string, len(list))
		for i, item := range list {
			if parts[i], err = text(item); err != nil {
				return nil, resolveErr(fmt.Sprintf("%s[1][%d]", where, i), "%v", err)
			}
		}
		return strings.Join(parts, delim), nil
	case "Fn::Select":
		args, ok := arg.([]any)
		if !ok || len(args) != 2 {
			return nil, resolveErr(where, "takes [index, list]")
		}
		is, err := r.resolveText(args[0], where+"[0]")
		if err != nil {
			return nil, err
		}
		list, err := r.resolveList(args[1], where+"[1]")
		if err != nil {
			return nil, err
		}
		i, err := strconv.Atoi(is)
		if err != nil || i < 0 || i >= len(list) {
			return nil, resolveErr(where, "index %s out of range for a list of %d", is, len(list))
		}
		return list[i], nil
	case "Fn::Split":
		args, ok := arg.([]any)
		if !ok || len(args) != 2 {
			return nil, resolveErr(where, "takes [delimiter, string]")
		}
		delim, ok := args[0].(string)
		if !ok || delim == "" {
			return nil, resolveErr(where, "the delimiter must be a non-empty string")
		}
		s, err := r.resolveText(args[1], where+"[1]")
		if err != nil {
			return nil, err
		}
		var out []any
		for _, p := range strings.Split(s, delim) {
			out = append(out, p)
		}
		return out, nil
	case "Fn::FindInMap":
		return r.findInMap(arg, where)
	case "Fn::Equals", "Fn::Not", "Fn::And", "Fn::Or":
		return nil, resolveErr(where, "is a condition function: use it under Conditions and refer to it with Fn::If")
	default:
		return nil, resolveErr(where, "%s is not supported locally", fn)
	}
}

// resolveList resolves v to a list (a list literal or a list-valued intrinsic).
func (r *resolver) resolveList(v any, where string) ([]any, error) {
	rv, err := r.resolve(v, where)
	if err != nil {
		return nil, err
	}
	list, ok := rv.([]any)
	if !ok {
		return nil, resolveErr(where, "want a list")
	}
	return list, nil
}

func (r *resolver) ref(name, where string) (any, error) {
	if v, ok := r.params[name]; ok {
		return v, nil
	}
	if name == "AWS::NoValue" {
		return noValue{}, nil
	}
	if name == "AWS::NotificationARNs" {
		return []any{}, nil
	}
	if strings.HasPrefix(name, "AWS::") {
		v, ok := r.pseudo[name]
		if !ok {
			return nil, resolveErr(where, "pseudo parameter %s is not available here", name)
		}
		return v, nil
	}
	res, err := r.resource(name, where)
	if err != nil {
		return nil, err
	}
	return res.ref(), nil
}

// resource returns a created queue or table, or an error saying why name cannot be
// referenced locally.
func (r *resolver) resource(name, where string) (*Resource, error) {
	if res, ok := r.res[name]; ok {
		return res, nil
	}
	def, ok := r.t.byID[name]
	switch {
	case !ok:
		return nil, resolveErr(where, "%s is neither a parameter nor a resource of the template", name)
	case def.typ != TypeQueue && def.typ != TypeTable && def.typ != TypeSecret:
		return nil, resolveErr(where, "%s is a %s: only queues, tables, secrets and parameters can be referenced locally", name, def.typ)
	case def.condition != "":
		return nil, resolveErr(where, "%s is not created: its condition %s is false", name, def.condition)
	default:
		return nil, resolveErr(where, "%s is not created (yet)", name)
	}
}

func (r *resolver) getAtt(arg any, where string) (any, error) {
	args, ok := arg.([]any)
	if !ok || len(args) != 2 {
		return nil, resolveErr(where, "takes [LogicalId, Attribute]")
	}
	id, ok := args[0].(string)
	if !ok {
		return nil, resolveErr(where, "the logical id must be a name")
	}
	attr, err := r.resolveText(args[1], where+"[1]")
	if err != nil {
		return nil, err
	}
	res, err := r.resource(id, where)
	if err != nil {
		return nil, err
	}
	v, err := res.attr(attr)
	if err != nil {
		return nil, resolveErr(where, "%v", err)
	}
	return v, nil
}

func (r *resolver) sub(arg any, where string) (any, error) {
	var (
		tmpl string
		vars map[string]any
	)
	switch x := arg.(type) {
	case string:
		tmpl = x
	case []any:
		if len(x) != 2 {
			return nil, resolveErr(where, "takes a string or [string, {variables}]")
		}
		s, ok := x[0].(string)
		if !ok {
			return nil, resolveErr(where, "the template must be a string")
		}
		tmpl = s
		obj, ok := x[1].(*object)
		if !ok {
			return nil, resolveErr(where, "the variables must be a mapping")
		}
		vars = map[string]any{}
		for _, k := range obj.keys {
			v, err := r.resolve(obj.vals[k], where+"[1]."+k)
			if err != nil {
				return nil, err
			}
			vars[k] = v
		}
	default:
		return nil, resolveErr(where, "takes a string or [string, {variables}]")
	}
	var b strings.Builder
	for {
		i := strings.Index(tmpl, "${")
		if i < 0 {
			b.WriteString(tmpl)
			return b.String(), nil
		}
		b.WriteString(tmpl[:i])
		rest := tmpl[i+2:]
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return nil, resolveErr(where, "unterminated ${ in %q", tmpl)
		}
		name := strings.TrimSpace(rest[:end])
		tmpl = rest[end+1:]
		if strings.HasPrefix(name, "!") { // ${!Literal} renders as ${Literal}
			b.WriteString("${" + name[1:] + "}")
			continue
		}
		v, err := r.subVar(name, vars, where)
		if err != nil {
			return nil, err
		}
		s, err := text(v)
		if err != nil {
			return nil, resolveErr(where, "${%s} %v", name, err)
		}
		b.WriteString(s)
	}
}

func (r *resolver) subVar(name string, vars map[string]any, where string) (any, error) {
	if v, ok := vars[name]; ok {
		return v, nil
	}
	if id, attr, ok := strings.Cut(name, "."); ok && !strings.HasPrefix(name, "AWS::") {
		return r.getAtt([]any{id, attr}, where)
	}
	v, err := r.ref(name, where)
	if err != nil {
		return nil, err
	}
	if _, ok := v.(noValue); ok {
		return nil, resolveErr(where, "${%s}: AWS::NoValue cannot be substituted", name)
	}
	return v, nil
}

func (r *resolver) findInMap(arg any, where string) (any, error) {
	args, ok := arg.([]any)
	if !ok || len(args) != 3 {
		return nil, resolveErr(where, "takes [MapName, TopLevelKey, SecondLevelKey]")
	}
	var keys [3]string
	for i := range keys {
		s, err := r.resolveText(args[i], fmt.Sprintf("%s[%d]", where, i))
		if err != nil {
			return nil, err
		}
		keys[i] = s
	}
	m := r.t.mappings.getObject(keys[0])
	if m == nil {
		return nil, resolveErr(where, "no mapping %s", keys[0])
	}
	top := m.getObject(keys[1])
	if top == nil {
		return nil, resolveErr(where, "mapping %s has no key %s", keys[0], keys[1])
	}
	v, ok := top.get(keys[2])
	if !ok {
		return nil, resolveErr(where, "mapping %s.%s has no key %s", keys[0], keys[1], keys[2])
	}
	return r.resolve(v, where)
}

// condition evaluates the named condition of the Conditions section.
func (r *resolver) condition(name, where string) (bool, error) {
	if v, ok := r.conds[name]; ok {
		return v, nil
	}
	def, ok := r.t.conditions.get(name)
	if !ok {
		return false, resolveErr(where, "no condition %s in the template", name)
	}
	if r.active[name] {
		return false, resolveErr(where, "condition %s refers to itself", name)
	}
	r.active[name] = true
	defer delete(r.active, name)
	v, err := r.evalCondition(def, "Conditions."+name)
	if err != nil {
		return false, err
	}
	r.conds[name] = v
	return v, nil
}

// evalCondition evaluates a condition expression: Fn::Equals, Fn::Not, Fn::And, Fn::Or
// or a reference to another condition.
func (r *resolver) evalCondition(v any, where string) (bool, error) {
	obj, ok := v.(*object)
	if !ok || len(obj.keys) != 1 {
		if b, ok := v.(bool); ok {
			return b, nil
		}
		return false, resolveErr(where, "want Fn::Equals, Fn::Not, Fn::And, Fn::Or or Condition")
	}
	fn := obj.keys[0]
	arg := obj.vals[fn]
	where += "." + fn
	switch fn {
	case "Condition":
		name, ok := arg.(string)
		if !ok {
			return false, resolveErr(where, "takes a condition name")
		}
		return r.condition(name, where)
	case "Fn::Equals":
		args, ok := arg.([]any)
		if !ok || len(args) != 2 {
			return false, resolveErr(where, "takes two values")
		}
		a, err := r.resolveText(args[0], where+"[0]")
		if err != nil {
			return false, err
		}
		b, err := r.resolveText(args[1], where+"[1]")
		if err != nil {
			return false, err
		}
		return a == b, nil
	case "Fn::Not", "Fn::And", "Fn::Or":
		args, ok := arg.([]any)
		if !ok || len(args) == 0 || fn == "Fn::Not" && len(args) != 1 {
			return false, resolveErr(where, "takes a list of conditions (Fn::Not exactly one)")
		}
		vals := make([]bool, len(args))
		for i, a := range args {
			b, err := r.evalCondition(a, fmt.Sprintf("%s[%d]", where, i))
			if err != nil {
				return false, err
			}
			vals[i] = b
		}
		switch fn {
		case "Fn::Not":
			return !vals[0], nil
		case "Fn::And":
			return !slices.Contains(vals, false), nil
		default:
			return slices.Contains(vals, true), nil
		}
	default:
		return false, resolveErr(where, "%s is not a condition function", fn)
	}
}

// enabled reports whether the resource's Condition (if any) holds.
func (r *resolver) enabled(res *resource) (bool, error) {
	if res.condition == "" {
		return true, nil
	}
	return r.condition(res.condition, res.where("Condition"))
}

// where names a property of a resource in messages.
func (res *resource) where(property string) string {
	loc := "resource " + res.id
	if res.line > 0 {
		loc += fmt.Sprintf(" (line %d)", res.line)
	}
	if property == "" {
		return loc
	}
	return loc + ", property " + property
}

// references lists the logical ids v refers to (Ref, Fn::GetAtt, Fn::Sub), for ordering.
func references(v any, out map[string]bool) {
	switch x := v.(type) {
	case *object:
		for _, k := range x.keys {
			arg := x.vals[k]
			switch k {
			case "Ref":
				if s, ok := arg.(string); ok {
					out[s] = true
				}
			case "Fn::GetAtt":
				if a, ok := arg.([]any); ok && len(a) > 0 {
					if s, ok := a[0].(string); ok {
						out[s] = true
					}
				}
			case "Fn::Sub":
				s, _ := arg.(string)
				if a, ok := arg.([]any); ok && len(a) > 0 {
					s, _ = a[0].(string)
				}
				for _, name := range subNames(s) {
					id, _, _ := strings.Cut(name, ".")
					out[id] = true
				}
			}
			references(arg, out)
		}
	case []any:
		for _, item := range x {
			references(item, out)
		}
	}
}

// subNames returns the ${...} names of a Fn::Sub template.
func subNames(s string) []string {
	var names []string
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			return names
		}
		s = s[i+2:]
		end := strings.IndexByte(s, '}')
		if end < 0 {
			return names
		}
		if name := strings.TrimSpace(s[:end]); !strings.HasPrefix(name, "!") {
			names = append(names, name)
		}
		s = s[end+1:]
	}
}
