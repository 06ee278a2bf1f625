package stack

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Var is one environment variable.
type Var struct {
	Name, Value string
}

// Env is what Up returns: the environment of the template's functions, resolved to the
// local resources, and the resources themselves.
type Env struct {
	// Vars are every environment variable of every function (Globals merged in), in
	// template order, then QUEUE_URL: the queue of the consumer's SQS event.
	Vars []Var
	// Resources are the queues and tables, in the order Up created them.
	Resources []Resource
}

// Lookup returns the value of the variable name.
func (e *Env) Lookup(name string) (string, bool) {
	for _, v := range e.Vars {
		if v.Name == name {
			return v.Value, true
		}
	}
	return "", false
}

// Set gives the variable name the value, adding it when no function has it: a value the
// template leaves to the local run (an outside service's URL, example.Caller).
func (e *Env) Set(name, value string) {
	for i := range e.Vars {
		if e.Vars[i].Name == name {
			e.Vars[i].Value = value
			return
		}
	}
	e.Vars = append(e.Vars, Var{name, value})
}

// Resource returns the queue or table with the logical id.
func (e *Env) Resource(logicalID string) (Resource, bool) {
	for _, r := range e.Resources {
		if r.LogicalID == logicalID {
			return r, true
		}
	}
	return Resource{}, false
}

// Environ returns the variables as NAME=value, the form of os.Environ.
func (e *Env) Environ() []string {
	out := make([]string, len(e.Vars))
	for i, v := range e.Vars {
		out[i] = v.Name + "=" + v.Value
	}
	return out
}

// WriteExports writes one `export NAME='value'` line per variable, quoted for POSIX
// shells, so that eval "$(idemctl up)" sets them.
func (e *Env) WriteExports(w io.Writer) error {
	for _, v := range e.Vars {
		if _, err := fmt.Fprintf(w, "export %s=%s\n", v.Name, ShellQuote(v.Value)); err != nil {
			return err
		}
	}
	return nil
}

// ShellQuote quotes s for a POSIX shell: in single quotes, each single quote in s
// ending the quoted part, escaped with a backslash, and starting a new one.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// QueueURLVar is the variable Env adds for the consumer's input queue.
const QueueURLVar = "QUEUE_URL"

// envName: what a shell accepts as a variable name (Lambda accepts fewer).
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// env collects the functions' variables. One process runs every function locally, so
// two functions giving one variable different values is an error.
func (t *Template) env(r *resolver) (*Env, error) {
	env := &Env{}
	from := map[string]string{} // variable -> the function that set it
	add := func(name, value, fn string) error {
		if !envName.MatchString(name) {
			return fmt.Errorf("%s: environment variable name %q is not valid in a shell", fn, name)
		}
		if prev, ok := env.Lookup(name); ok {
			if prev != value {
				return fmt.Errorf("environment variable %s is %q in %s but %q in %s: one local process cannot have both", name, prev, from[name], value, fn)
			}
			return nil
		}
		env.Vars = append(env.Vars, Var{name, value})
		from[name] = fn
		return nil
	}
	globalVars := t.globals.getObject("Function").getObject("Environment").getObject("Variables")
	for _, res := range t.resources {
		if res.typ != typeServerlessFunction && res.typ != typeLambdaFunction {
			continue
		}
		if on, err := r.enabled(res); err != nil || !on {
			if err != nil {
				return nil, err
			}
			continue
		}
		vars := newObject()
		if res.typ == typeServerlessFunction && globalVars != nil {
			for _, k := range globalVars.keys {
				vars.set(k, globalVars.vals[k])
			}
		}
		if own := res.props.getObject("Environment").getObject("Variables"); own != nil {
			for _, k := range own.keys {
				vars.set(k, own.vals[k])
			}
		}
		for _, k := range vars.keys {
			v, err := r.resolve(vars.vals[k], res.where("Environment.Variables."+k))
			if err != nil {
				return nil, err
			}
			if _, drop := v.(noValue); drop {
				continue
			}
			s, err := text(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", res.where("Environment.Variables."+k), err)
			}
			if err := add(k, s, res.id); err != nil {
				return nil, err
			}
		}
	}
	es, err := t.eventSource(r)
	if errors.Is(err, errNoSQSEvent) {
		return env, nil
	}
	if err != nil {
		return nil, err
	}
	q, err := r.resource(es.QueueLogicalID, t.byID[es.FunctionLogicalID].where("Events."+es.EventName+".Properties.Queue"))
	if err != nil {
		return nil, err
	}
	if err := add(QueueURLVar, q.URL, es.FunctionLogicalID+" (SQS event "+es.EventName+")"); err != nil {
		return nil, err
	}
	return env, nil
}

// EventSource is the SQS event source mapping of the template's consumer: what `idemctl
// run` needs to play Lambda's poller.
type EventSource struct {
	FunctionLogicalID string
	EventName         string
	// QueueLogicalID is the queue in Properties.Queue (!GetAtt <Queue>.Arn).
	QueueLogicalID string
	// BatchSize is the event's BatchSize (default 10).
	BatchSize int
	// MaximumBatchingWindow is MaximumBatchingWindowInSeconds (default 0).
	MaximumBatchingWindow time.Duration
	// ReportBatchItemFailures is set when FunctionResponseTypes lists it.
	ReportBatchItemFailures bool
	// VisibilityTimeout is the queue's VisibilityTimeout (SQS default 30s).
	VisibilityTimeout time.Duration
}

var errNoSQSEvent = errors.New("no function has an event of Type SQS")

// EventSource returns the template's SQS event source: the one event of Type SQS of a
// function. None, or more than one, is an error.
func (t *Template) EventSource() (EventSource, error) {
	r, err := t.newResolver("", "")
	if err != nil {
		return EventSource{}, err
	}
	es, err := t.eventSource(r)
	if err != nil {
		return EventSource{}, fmt.Errorf("stack: %w", err)
	}
	return es, nil
}

// event is an event of a function, found by type.
type event struct {
	fn    *resource
	name  string
	typ   string
	props *object
}

// events lists the events of the given types across the (enabled) functions.
func (t *Template) events(r *resolver, types ...string) ([]event, error) {
	var out []event
	for _, res := range t.resources {
		if res.typ != typeServerlessFunction {
			continue
		}
		if on, err := r.enabled(res); err != nil {
			return nil, err
		} else if !on {
			continue
		}
		evs := res.props.getObject("Events")
		if evs == nil {
			continue
		}
		for _, name := range evs.keys {
			ev := evs.getObject(name)
			typ, _ := ev.get("Type")
			if s, ok := typ.(string); ok && slices.Contains(types, s) {
				out = append(out, event{fn: res, name: name, typ: s, props: ev.getObject("Properties")})
			}
		}
	}
	return out, nil
}

func (t *Template) eventSource(r *resolver) (EventSource, error) {
	evs, err := t.events(r, "SQS")
	if err != nil {
		return EventSource{}, err
	}
	switch len(evs) {
	case 0:
		return EventSource{}, errNoSQSEvent
	case 1:
	default:
		names := make([]string, len(evs))
		for i, e := range evs {
			names[i] = e.fn.id + "." + e.name
		}
		return EventSource{}, fmt.Errorf("more than one SQS event (%s): local running plays one", strings.Join(names, ", "))
	}
	ev := evs[0]
	es := EventSource{FunctionLogicalID: ev.fn.id, EventName: ev.name, BatchSize: 10, VisibilityTimeout: 30 * time.Second}
	where := func(p string) string { return ev.fn.where("Events." + ev.name + ".Properties." + p) }
	q, _ := ev.props.get("Queue")
	id, ok := getAttArn(q)
	if !ok {
		return EventSource{}, fmt.Errorf("%s: want !GetAtt <Queue>.Arn of a queue in this template", where("Queue"))
	}
	if def := t.byID[id]; def == nil || def.typ != TypeQueue {
		return EventSource{}, fmt.Errorf("%s: %s is not an AWS::SQS::Queue of this template", where("Queue"), id)
	}
	es.QueueLogicalID = id
	if v, ok := ev.props.get("BatchSize"); ok {
		n, err := r.resolveInt(v, where("BatchSize"))
		if err != nil {
			return EventSource{}, err
		}
		if n < 1 || n > 10000 {
			return EventSource{}, fmt.Errorf("%s: %d is not from 1 to 10000", where("BatchSize"), n)
		}
		es.BatchSize = int(n)
	}
	if v, ok := ev.props.get("MaximumBatchingWindowInSeconds"); ok {
		n, err := r.resolveInt(v, where("MaximumBatchingWindowInSeconds"))
		if err != nil {
			return EventSource{}, err
		}
		es.MaximumBatchingWindow = time.Duration(n) * time.Second
	}
	if v, ok := ev.props.get("FunctionResponseTypes"); ok {
		rv, err := r.resolve(v, where("FunctionResponseTypes"))
		if err != nil {
			return EventSource{}, err
		}
		list, _ := rv.([]any)
		for _, item := range list {
			es.ReportBatchItemFailures = es.ReportBatchItemFailures || item == "ReportBatchItemFailures"
		}
	}
	if v, ok := t.byID[id].props.get("VisibilityTimeout"); ok {
		n, err := r.resolveInt(v, t.byID[id].where("VisibilityTimeout"))
		if err != nil {
			return EventSource{}, err
		}
		es.VisibilityTimeout = time.Duration(n) * time.Second
	}
	return es, nil
}

// getAttArn returns X of {"Fn::GetAtt": [X, "Arn"]}.
func getAttArn(v any) (string, bool) {
	obj, ok := v.(*object)
	if !ok || len(obj.keys) != 1 || obj.keys[0] != "Fn::GetAtt" {
		return "", false
	}
	args, ok := obj.vals["Fn::GetAtt"].([]any)
	if !ok || len(args) != 2 || args[1] != "Arn" {
		return "", false
	}
	id, ok := args[0].(string)
	return id, ok
}

func (r *resolver) resolveInt(v any, where string) (int64, error) {
	s, err := r.resolveText(v, where)
	if err != nil {
		return 0, err
	}
	n, err := toInt(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", where, err)
	}
	return n, nil
}

// ReaperPeriod returns the period of the template's one scheduled event (SAM Type
// Schedule or ScheduleV2), e.g. 1m for rate(1 minute). See ParseRate.
func (t *Template) ReaperPeriod() (time.Duration, error) {
	r, err := t.newResolver("", "")
	if err != nil {
		return 0, err
	}
	ev, err := t.scheduleEvent(r)
	if err != nil {
		return 0, err
	}
	key := "Schedule"
	if ev.typ == "ScheduleV2" {
		key = "ScheduleExpression"
	}
	where := ev.fn.where("Events." + ev.name + ".Properties." + key)
	v, _ := ev.props.get(key)
	expr, err := r.resolveText(v, where)
	if err != nil {
		return 0, fmt.Errorf("stack: %w", err)
	}
	d, err := ParseRate(expr)
	if err != nil {
		return 0, fmt.Errorf("stack: %s: %w", where, err)
	}
	return d, nil
}

// scheduleEvent is the template's one event of Type Schedule or ScheduleV2.
func (t *Template) scheduleEvent(r *resolver) (event, error) {
	evs, err := t.events(r, "Schedule", "ScheduleV2")
	if err != nil {
		return event{}, fmt.Errorf("stack: %w", err)
	}
	if len(evs) != 1 {
		return event{}, fmt.Errorf("stack: want one function event of Type Schedule or ScheduleV2, found %d", len(evs))
	}
	return evs[0], nil
}

var rateExpr = regexp.MustCompile(`^rate\(\s*(\d+)\s+([a-z]+)\s*\)$`)

// ParseRate returns the period of an EventBridge rate expression: rate(1 minute),
// rate(5 minutes), rate(2 hours), rate(1 day). Like EventBridge, it wants the singular
// unit for 1 and the plural otherwise. It also takes seconds (rate(10 seconds)), which
// EventBridge does not, for fast local runs. A cron expression is an error: local
// running plays rates only.
func ParseRate(expr string) (time.Duration, error) {
	expr = strings.TrimSpace(expr)
	if strings.HasPrefix(expr, "cron(") {
		return 0, fmt.Errorf("schedule %q: cron expressions are not supported locally; use a rate expression such as rate(1 minute) (--param ReaperSchedule='rate(1 minute)')", expr)
	}
	m := rateExpr.FindStringSubmatch(expr)
	if m == nil {
		return 0, fmt.Errorf("schedule %q: want rate(N unit), e.g. rate(1 minute) or rate(5 minutes)", expr)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n < 1 {
		return 0, fmt.Errorf("schedule %q: the value must be a positive whole number", expr)
	}
	units := map[string]time.Duration{"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour}
	unit := strings.TrimSuffix(m[2], "s")
	per, ok := units[unit]
	if !ok {
		return 0, fmt.Errorf("schedule %q: unknown unit %s (minute, hour, day; second locally)", expr, m[2])
	}
	if plural := m[2] != unit; plural != (n != 1) {
		want := unit
		if n != 1 {
			want += "s"
		}
		return 0, fmt.Errorf("schedule %q: write rate(%d %s)", expr, n, want)
	}
	return time.Duration(n) * per, nil
}

// QueueVariables returns the names of the variables the template gives its functions
// (Globals merged in) whose value is one of its queues' URLs (!Ref of an
// AWS::SQS::Queue), in template order, each once: where the functions send messages.
func (t *Template) QueueVariables() []string {
	var names []string
	seen := map[string]bool{}
	add := func(vars *object) {
		if vars == nil {
			return
		}
		for _, k := range vars.keys {
			obj, ok := vars.vals[k].(*object)
			if !ok || len(obj.keys) != 1 || obj.keys[0] != "Ref" || seen[k] {
				continue
			}
			if id, ok := obj.vals["Ref"].(string); ok && t.byID[id] != nil && t.byID[id].typ == TypeQueue {
				names = append(names, k)
				seen[k] = true
			}
		}
	}
	add(t.globals.getObject("Function").getObject("Environment").getObject("Variables"))
	for _, res := range t.resources {
		if res.typ == typeServerlessFunction || res.typ == typeLambdaFunction {
			add(res.props.getObject("Environment").getObject("Variables"))
		}
	}
	return names
}
