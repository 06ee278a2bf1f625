package samtemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Metric is one CloudWatch metric that an alarm or a dashboard of the template watches.
type Metric struct {
	// Where names what watches it: "alarm InputQueueAgeAlarm", "dashboard Dashboard,
	// widget 3".
	Where      string
	Alarm      string // the alarm's logical id; "" for a dashboard
	Namespace  string
	Name       string
	Dimensions map[string]Value // by dimension name
}

// Value is a dimension's value: a literal, or what a Ref or Fn::GetAtt of the template
// gives (in a dashboard body, "${X}" or "${X.Attr}" of its Fn::Sub).
type Value struct {
	Literal string
	Ref     string // logical id of the resource (or parameter) referred to; "" for a literal
	Attr    string // the attribute of a GetAtt; "" for a Ref
}

func (v Value) String() string {
	switch {
	case v.Ref == "":
		return fmt.Sprintf("%q", v.Literal)
	case v.Attr == "":
		return "Ref " + v.Ref
	default:
		return "GetAtt " + v.Ref + "." + v.Attr
	}
}

func (m Metric) String() string {
	names := make([]string, 0, len(m.Dimensions))
	for n := range m.Dimensions {
		names = append(names, n)
	}
	slices.Sort(names)
	dims := make([]string, len(names))
	for i, n := range names {
		dims[i] = n + "=" + m.Dimensions[n].String()
	}
	return fmt.Sprintf("%s %s{%s} (%s)", m.Namespace, m.Name, strings.Join(dims, ", "), m.Where)
}

// Watched returns every metric the template's alarms and dashboards watch, alarms first,
// each in logical id order.
func (t *Template) Watched() ([]Metric, error) {
	var out []Metric
	alarms, dashboards := t.OfType("AWS::CloudWatch::Alarm"), t.OfType("AWS::CloudWatch::Dashboard")
	slices.Sort(alarms)
	slices.Sort(dashboards)
	for _, id := range alarms {
		ms, err := t.AlarmMetrics(id)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	for _, id := range dashboards {
		ms, err := t.DashboardMetrics(id)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	return out, nil
}

type metricSpec struct {
	Namespace  string `json:"Namespace"`
	MetricName string `json:"MetricName"`
	Dimensions []struct {
		Name  string          `json:"Name"`
		Value json.RawMessage `json:"Value"`
	} `json:"Dimensions"`
}

// AlarmMetrics returns the metrics the alarm id watches: its one metric, or each metric
// its metric math (Metrics) retrieves.
func (t *Template) AlarmMetrics(id string) ([]Metric, error) {
	var p struct {
		metricSpec
		Metrics []struct {
			ID         string `json:"Id"`
			Expression string `json:"Expression"`
			MetricStat *struct {
				Metric metricSpec `json:"Metric"`
			} `json:"MetricStat"`
		} `json:"Metrics"`
	}
	if err := t.Props(id, &p); err != nil {
		return nil, err
	}
	specs := []metricSpec{p.metricSpec}
	if len(p.Metrics) > 0 {
		if p.MetricName != "" {
			return nil, fmt.Errorf("samtemplate: alarm %s has both MetricName and Metrics", id)
		}
		specs = specs[:0]
		for _, q := range p.Metrics {
			switch {
			case q.MetricStat != nil:
				specs = append(specs, q.MetricStat.Metric)
			case q.Expression == "":
				return nil, fmt.Errorf("samtemplate: alarm %s: query %q has neither MetricStat nor Expression", id, q.ID)
			}
		}
	}
	out := make([]Metric, 0, len(specs))
	for _, s := range specs {
		if s.Namespace == "" || s.MetricName == "" {
			return nil, fmt.Errorf("samtemplate: alarm %s watches a metric without Namespace or MetricName", id)
		}
		m := Metric{Where: "alarm " + id, Alarm: id, Namespace: s.Namespace, Name: s.MetricName, Dimensions: map[string]Value{}}
		for _, d := range s.Dimensions {
			v, err := value(d.Value)
			if err != nil {
				return nil, fmt.Errorf("samtemplate: alarm %s: dimension %s: %w", id, d.Name, err)
			}
			if _, dup := m.Dimensions[d.Name]; dup {
				return nil, fmt.Errorf("samtemplate: alarm %s: dimension %s given twice", id, d.Name)
			}
			m.Dimensions[d.Name] = v
		}
		out = append(out, m)
	}
	return out, nil
}

// value reads a dimension value: a string, {"Ref": X} or {"Fn::GetAtt": [X, Attr]}.
func value(raw json.RawMessage) (Value, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return Value{Literal: s}, nil
	}
	var fn struct {
		Ref    string   `json:"Ref"`
		GetAtt []string `json:"Fn::GetAtt"`
	}
	if err := json.Unmarshal(raw, &fn); err != nil {
		return Value{}, fmt.Errorf("%s: %w", raw, err)
	}
	switch {
	case fn.Ref != "":
		return Value{Ref: fn.Ref}, nil
	case len(fn.GetAtt) == 2:
		return Value{Ref: fn.GetAtt[0], Attr: fn.GetAtt[1]}, nil
	}
	return Value{}, fmt.Errorf("%s is neither a string, a Ref nor a GetAtt", raw)
}

// subVar is a ${...} of Fn::Sub; ${!...} is a literal "${...}" and is left alone.
var subVar = regexp.MustCompile(`\$\{([^!}][^}]*)\}`)

// DashboardMetrics returns the metrics of the dashboard id's metric widgets. Its
// DashboardBody is a JSON string, or an Fn::Sub of one; a "${X}" or "${X.Attr}" standing
// for a whole string of the body becomes a Ref or GetAtt Value. Every metric must be
// written in full: the "." and "..." shorthands of the dashboard body are refused.
func (t *Template) DashboardMetrics(id string) ([]Metric, error) {
	var p struct {
		DashboardBody json.RawMessage `json:"DashboardBody"`
	}
	if err := t.Props(id, &p); err != nil {
		return nil, err
	}
	body, err := subBody(p.DashboardBody)
	if err != nil {
		return nil, fmt.Errorf("samtemplate: dashboard %s: %w", id, err)
	}
	var doc struct {
		Widgets []struct {
			Type       string `json:"type"`
			Properties struct {
				Metrics [][]json.RawMessage `json:"metrics"`
			} `json:"properties"`
		} `json:"widgets"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		return nil, fmt.Errorf("samtemplate: dashboard %s: body: %w", id, err)
	}
	var out []Metric
	for w, widget := range doc.Widgets {
		for n, row := range widget.Properties.Metrics {
			where := fmt.Sprintf("dashboard %s, widget %d, metric %d", id, w+1, n+1)
			m, err := dashboardMetric(row)
			if err != nil {
				return nil, fmt.Errorf("samtemplate: %s: %w", where, err)
			}
			if m == nil {
				continue // a math expression: its metrics are rows of their own
			}
			m.Where = where
			out = append(out, *m)
		}
	}
	return out, nil
}

// subBody is the body with each ${...} replaced by a marker that placeholder reads back.
func subBody(raw json.RawMessage) (string, error) {
	var body string
	if json.Unmarshal(raw, &body) != nil {
		var sub struct {
			Sub json.RawMessage `json:"Fn::Sub"`
		}
		if err := json.Unmarshal(raw, &sub); err != nil || sub.Sub == nil {
			return "", errors.New("DashboardBody is neither a string nor an Fn::Sub")
		}
		if err := json.Unmarshal(sub.Sub, &body); err != nil {
			return "", errors.New("DashboardBody's Fn::Sub has a variable map: write ${X} and ${X.Attr} in the string instead")
		}
	}
	return subVar.ReplaceAllString(body, marker+"$1"+marker), nil
}

// marker cannot occur in a CloudFormation name or in JSON text a template writes.
const marker = "\u00a7\u00a7"

// placeholder reads a string of the body: a whole ${X} or ${X.Attr} is a reference; any
// other string is a literal, with the ${...} it has written back.
func placeholder(s string) Value {
	if strings.HasPrefix(s, marker) && strings.HasSuffix(s, marker) && strings.Count(s, marker) == 2 {
		name := strings.TrimSuffix(strings.TrimPrefix(s, marker), marker)
		id, attr, _ := strings.Cut(name, ".")
		return Value{Ref: id, Attr: attr}
	}
	return Value{Literal: restore(s)}
}

// restore writes the ${...} of a literal back.
func restore(s string) string {
	parts := strings.Split(s, marker)
	var b strings.Builder
	for i, p := range parts {
		if i%2 == 1 {
			b.WriteString("${" + p + "}")
		} else {
			b.WriteString(p)
		}
	}
	return b.String()
}

// dashboardMetric reads one row of a widget's "metrics": [Namespace, MetricName,
// (DimensionName, DimensionValue)..., {options}]. A row that is only an options object
// with an "expression" is metric math: nil.
func dashboardMetric(row []json.RawMessage) (*Metric, error) {
	var texts []string
	for i, item := range row {
		var s string
		if json.Unmarshal(item, &s) == nil {
			texts = append(texts, s)
			continue
		}
		var opts map[string]json.RawMessage
		if err := json.Unmarshal(item, &opts); err != nil || i != len(row)-1 {
			return nil, fmt.Errorf("item %d: %s: want strings, then one options object last", i+1, item)
		}
		if _, ok := opts["expression"]; ok && len(texts) == 0 {
			return nil, nil
		}
	}
	if len(texts) < 2 || len(texts)%2 != 0 {
		return nil, fmt.Errorf("%d strings: want the namespace, the metric name and name/value pairs", len(texts))
	}
	for _, s := range texts {
		if s == "." || s == "..." {
			return nil, errors.New(`the "." and "..." shorthands are not read: write the metric in full`)
		}
	}
	ns, name := placeholder(texts[0]), placeholder(texts[1])
	if ns.Ref != "" || name.Ref != "" {
		return nil, errors.New("the namespace and the metric name must be literals")
	}
	m := &Metric{Namespace: ns.Literal, Name: name.Literal, Dimensions: map[string]Value{}}
	for i := 2; i < len(texts); i += 2 {
		dim := placeholder(texts[i])
		if dim.Ref != "" {
			return nil, fmt.Errorf("dimension name %s must be a literal", texts[i])
		}
		if _, dup := m.Dimensions[dim.Literal]; dup {
			return nil, fmt.Errorf("dimension %s given twice", dim.Literal)
		}
		m.Dimensions[dim.Literal] = placeholder(texts[i+1])
	}
	return m, nil
}
