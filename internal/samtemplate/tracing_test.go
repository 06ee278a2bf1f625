package samtemplate_test

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
)

// traceActions are what each way of sending spans to X-Ray needs, by the condition of
// the policy that grants them: the collector layer's awsxray exporter, and X-Ray's
// OTLP endpoint.
var traceActions = map[string][]string{
	"TraceThroughLayer": {"xray:PutTraceSegments", "xray:PutTelemetryRecords"},
	"TraceToXRayOTLP":   {"xray:PutSpans", "xray:PutSpansForIndexing"},
}

// traceConditions are those conditions as the template must define them.
var traceConditions = map[string]string{
	"TraceThroughLayer": `{"Fn::Equals":[{"Ref":"Tracing"},"xray"]}`,
	"TraceToXRayOTLP":   `{"Fn::And":[{"Fn::Equals":[{"Ref":"Tracing"},"otlp"]},{"Fn::Equals":[{"Ref":"TracingEndpoint"},""]}]}`,
}

// traceExport reports whether st grants X-Ray's span export alone, on "*" (X-Ray's
// actions take no resource).
func traceExport(st samtemplate.Statement) bool {
	if !slices.Equal(st.Resources, []string{"*"}) || len(st.Actions) == 0 {
		return false
	}
	for _, a := range st.Actions {
		if !strings.HasPrefix(a, "xray:Put") {
			return false
		}
	}
	return true
}

func compactJSON(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// TestTracingGrants: X-Ray is granted only with the Tracing that needs it: one policy per
// way of sending, created on its condition, attached to the three functions' roles, with
// exactly the actions that way calls; no other statement names X-Ray. With Tracing xray
// each function has the collector layer, on the same condition, and a rule refuses the
// layer parameter's placeholder; every function is told TRACING, TRACING_ENDPOINT and
// TRACING_SAMPLE_RATIO from the parameters.
func TestTracingGrants(t *testing.T) {
	eachExample(t, func(t *testing.T, _ example.Example, tpl *samtemplate.Template) {
		for cond, want := range traceConditions {
			if got := compactJSON(t, tpl.Conditions[cond]); got != want {
				t.Errorf("condition %s is %s, want %s", cond, got, want)
			}
		}
		roles := functions(t, tpl)
		granted := map[string]bool{}
		for _, id := range tpl.OfType("AWS::IAM::Policy") {
			var p struct {
				Roles          []json.RawMessage `json:"Roles"`
				PolicyDocument struct {
					Statement []struct {
						Action   []string        `json:"Action"`
						Resource json.RawMessage `json:"Resource"`
					} `json:"Statement"`
				} `json:"PolicyDocument"`
			}
			if err := tpl.Props(id, &p); err != nil {
				t.Fatal(err)
			}
			cond := tpl.Resources[id].Condition
			want, tracing := traceActions[cond]
			for _, st := range p.PolicyDocument.Statement {
				names := strings.Join(st.Action, " ")
				switch {
				case !tracing && strings.Contains(names, "xray:"):
					t.Errorf("%s (condition %q) grants %v: X-Ray only in the tracing policies", id, cond, st.Action)
				case tracing && (!slices.Equal(st.Action, want) || string(st.Resource) != `"*"`):
					t.Errorf("%s grants %v on %s, want %v on *", id, st.Action, st.Resource, want)
				}
			}
			if !tracing {
				continue
			}
			granted[cond] = true
			var attached []string
			for _, r := range p.Roles {
				attached = append(attached, refName(t, r))
			}
			for fn, role := range roles {
				if !slices.Contains(attached, role) {
					t.Errorf("%s is not attached to %s, the role of %s", id, role, fn)
				}
			}
		}
		for cond := range traceActions {
			if !granted[cond] {
				t.Errorf("no policy on condition %s grants %v", cond, traceActions[cond])
			}
		}
		for fn := range roles {
			var p struct {
				Layers      json.RawMessage `json:"Layers"`
				Environment struct {
					Variables map[string]json.RawMessage `json:"Variables"`
				} `json:"Environment"`
			}
			if err := tpl.Props(fn, &p); err != nil {
				t.Fatal(err)
			}
			if got, want := compactJSON(t, p.Layers), `{"Fn::If":["TraceThroughLayer",[{"Ref":"TracingLayerArn"}],{"Ref":"AWS::NoValue"}]}`; got != want {
				t.Errorf("%s's Layers %s, want %s", fn, got, want)
			}
			for name, param := range map[string]string{"TRACING": "Tracing", "TRACING_ENDPOINT": "TracingEndpoint", "TRACING_SAMPLE_RATIO": "TracingSampleRatio"} {
				if got := compactJSON(t, p.Environment.Variables[name]); got != `{"Ref":"`+param+`"}` {
					t.Errorf("%s's %s is %s, want the parameter %s", fn, name, got, param)
				}
			}
		}
		rule := compactJSON(t, tpl.Rules["TracingLayerWithXRay"])
		def, _ := tpl.Parameters["TracingLayerArn"].Default.(string)
		if def == "" || !strings.Contains(rule, `"RuleCondition":`+traceConditions["TraceThroughLayer"]) || !strings.Contains(rule, `"`+def+`"`) {
			t.Errorf("rule TracingLayerWithXRay %s does not refuse the default %q with Tracing xray", rule, def)
		}
	})
}

// withoutTraceExport is allowed without the X-Ray span export on "*", which the tracing
// policies grant on their conditions (TestTracingGrants).
func withoutTraceExport(allowed map[string][]string) map[string][]string {
	out := maps.Clone(allowed)
	if all := out["*"]; len(all) > 0 && !slices.ContainsFunc(all, func(a string) bool { return !strings.HasPrefix(a, "xray:Put") }) {
		delete(out, "*")
	}
	return out
}
