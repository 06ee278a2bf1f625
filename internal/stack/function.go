package stack

import (
	"fmt"
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
