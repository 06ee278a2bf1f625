package stack

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Function is what Lambda gives one function of the template, Globals merged in: its
// timeout, its memory and the names of its environment variables (their values come
// from Up, as Env.Vars).
type Function struct {
	LogicalID string
	Timeout   time.Duration // Timeout (Lambda's default: 3 s)
	MemoryMB  int           // MemorySize (Lambda's default: 128 MB)
	VarNames  []string      // Environment.Variables, in template order
}

// Function returns the settings of the function with the logical id.
func (t *Template) Function(logicalID string) (Function, error) {
	res := t.byID[logicalID]
	if res == nil || (res.typ != typeServerlessFunction && res.typ != typeLambdaFunction) {
		return Function{}, fmt.Errorf("stack: %s is not a function of the template", logicalID)
	}
	r, err := t.newResolver("", "")
	if err != nil {
		return Function{}, err
	}
	var globals *object
	if res.typ == typeServerlessFunction {
		globals = t.globals.getObject("Function")
	}
	prop := func(name string) (any, bool) {
		if v, ok := res.props.get(name); ok {
			return v, true
		}
		if globals != nil {
			return globals.get(name)
		}
		return nil, false
	}
	fn := Function{LogicalID: logicalID, Timeout: 3 * time.Second, MemoryMB: 128}
	if v, ok := prop("Timeout"); ok {
		n, err := r.resolveInt(v, res.where("Timeout"))
		if err != nil {
			return Function{}, err
		}
		fn.Timeout = time.Duration(n) * time.Second
	}
	if v, ok := prop("MemorySize"); ok {
		n, err := r.resolveInt(v, res.where("MemorySize"))
		if err != nil {
			return Function{}, err
		}
		fn.MemoryMB = int(n)
	}
	seen := map[string]bool{}
	for _, vars := range []*object{globals.getObject("Environment").getObject("Variables"), res.props.getObject("Environment").getObject("Variables")} {
		if vars == nil {
			continue
		}
		for _, k := range vars.keys {
			if !seen[k] {
				seen[k] = true
				fn.VarNames = append(fn.VarNames, k)
			}
		}
	}
	return fn, nil
}

// ScheduledFunction returns the logical ids of the function with the template's one
// scheduled event (Type Schedule or ScheduleV2) and of that event.
func (t *Template) ScheduledFunction() (function, event string, err error) {
	r, err := t.newResolver("", "")
	if err != nil {
		return "", "", err
	}
	ev, err := t.scheduleEvent(r)
	if err != nil {
		return "", "", err
	}
	return ev.fn.id, ev.name, nil
}

// Property returns the property of the resource logicalID at path, its intrinsic
// functions resolved against the parameters (their defaults, or SetParameters') and the
// conditions. A step of path is a mapping's key, or, in a list, the index of an element
// or key=value for the first element whose key is value (Sid=ReadConsumerRecords). It
// resolves only what is at path: a reference there to another resource is an error,
// since nothing is created.
func (t *Template) Property(logicalID string, path ...string) (any, error) {
	res, ok := t.byID[logicalID]
	if !ok {
		return nil, fmt.Errorf("stack: no resource %s", logicalID)
	}
	var v any = res.props
	where := logicalID + ".Properties"
	for _, step := range path {
		where += "." + step
		switch x := v.(type) {
		case *object:
			if v, ok = x.get(step); !ok {
				return nil, fmt.Errorf("stack: %s: not set", where)
			}
		case []any:
			v = nil
			key, want, isMatch := strings.Cut(step, "=")
			for i, el := range x {
				if !isMatch {
					if strconv.Itoa(i) == step {
						v = el
					}
					continue
				}
				if obj, _ := el.(*object); obj != nil {
					if got, _ := obj.get(key); got == want {
						v = el
						break
					}
				}
			}
			if v == nil {
				return nil, fmt.Errorf("stack: %s: no such element", where)
			}
		default:
			return nil, fmt.Errorf("stack: %s: not a mapping or a list", where)
		}
	}
	r, err := t.newResolver("", "")
	if err != nil {
		return nil, err
	}
	return r.resolve(v, where)
}
