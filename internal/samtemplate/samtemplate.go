// Package samtemplate reads template.yaml as CloudFormation deploys it: after the
// AWS::Serverless-2016-10-31 transform, which adds roles, policies and event source
// mappings that the YAML does not show. It runs aws-sam-translator (installed with
// cfn-lint) offline through python3 and gives typed access to the roles and their
// statements, so tests can check what a deployed function is allowed to do.
package samtemplate

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

//go:embed transform.py
var transformScript []byte

// Template is a transformed template: plain CloudFormation JSON.
type Template struct {
	Parameters map[string]Parameter       `json:"Parameters"`
	Conditions map[string]json.RawMessage `json:"Conditions"`
	Rules      map[string]json.RawMessage `json:"Rules"`
	Resources  map[string]Resource        `json:"Resources"`
}

// Parameter is a template parameter with its bounds.
type Parameter struct {
	Type          string   `json:"Type"`
	Default       any      `json:"Default"`
	MinValue      *float64 `json:"MinValue"`
	MaxValue      *float64 `json:"MaxValue"`
	AllowedValues []string `json:"AllowedValues"`
}

// Resource is one resource; Properties stay raw for the caller to decode.
type Resource struct {
	Type       string          `json:"Type"`
	Properties json.RawMessage `json:"Properties"`
	DependsOn  json.RawMessage `json:"DependsOn"` // a logical id or a list of them
	Condition  string          `json:"Condition"` // the condition it is created on ("": always)
}

// DependsOn returns the logical ids resource id names in its DependsOn attribute.
func (t *Template) DependsOn(id string) []string {
	raw := t.Resources[id].DependsOn
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(raw, &many) // absent or malformed: none
	return many
}

// Statement is one Allow or Deny statement of an IAM policy, its resources given as
// Ref names: "InputQueue" for !GetAtt InputQueue.Arn, "IdempotencyTable/index/inflight"
// for !Sub "${IdempotencyTable.Arn}/index/inflight", "*" for "*". A resource in any
// other form is kept as its JSON.
type Statement struct {
	Sid       string
	Effect    string
	Actions   []string
	Resources []string
	Condition json.RawMessage // as the template has it; nil when the statement has none
}

// Transform runs the SAM transform on the template at path.
func Transform(ctx context.Context, path string) (*Template, error) {
	dir, err := os.MkdirTemp("", "samtemplate")
	if err != nil {
		return nil, fmt.Errorf("samtemplate: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	script := filepath.Join(dir, "transform.py")
	if err := os.WriteFile(script, transformScript, 0o600); err != nil {
		return nil, fmt.Errorf("samtemplate: %w", err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "python3", script, path)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("samtemplate: transform %s (needs python3 with aws-sam-translator, installed with cfn-lint): %w\n%s", path, err, stderr.String())
	}
	var t Template
	if err := json.Unmarshal(stdout.Bytes(), &t); err != nil {
		return nil, fmt.Errorf("samtemplate: transformed %s: %w", path, err)
	}
	return &t, nil
}

// Props decodes the properties of the resource id into v.
func (t *Template) Props(id string, v any) error {
	r, ok := t.Resources[id]
	if !ok {
		return fmt.Errorf("samtemplate: no resource %s", id)
	}
	if err := json.Unmarshal(r.Properties, v); err != nil {
		return fmt.Errorf("samtemplate: properties of %s: %w", id, err)
	}
	return nil
}

// OfType returns the logical ids of the resources of type typ.
func (t *Template) OfType(typ string) []string {
	var ids []string
	for id, r := range t.Resources {
		if r.Type == typ {
			ids = append(ids, id)
		}
	}
	return ids
}

// FunctionRole returns the logical id of the AWS::IAM::Role that the function fn runs
// as; an error when its Role is not a !GetAtt of a role in the template.
func (t *Template) FunctionRole(fn string) (string, error) {
	var p struct {
		Role json.RawMessage `json:"Role"`
	}
	if err := t.Props(fn, &p); err != nil {
		return "", err
	}
	id, ok := ref(p.Role)
	if !ok || t.Resources[id].Type != "AWS::IAM::Role" {
		return "", fmt.Errorf("samtemplate: %s's Role %s is not a role of the template", fn, p.Role)
	}
	return id, nil
}

// FunctionOf returns the logical id of the AWS::Lambda::Function that raw (a Ref, or a
// GetAtt .Arn) invokes: the function itself, or, when raw names an AWS::Lambda::Alias (as
// AutoPublishAlias makes SAM point event source mappings, schedules and function URLs),
// the function of that alias.
func (t *Template) FunctionOf(raw json.RawMessage) (string, error) {
	id, ok := ref(raw)
	if !ok {
		return "", fmt.Errorf("samtemplate: %s is neither a Ref nor a GetAtt .Arn", raw)
	}
	switch t.Resources[id].Type {
	case "AWS::Lambda::Function":
		return id, nil
	case "AWS::Lambda::Alias":
		var p struct {
			FunctionName json.RawMessage `json:"FunctionName"`
		}
		if err := t.Props(id, &p); err != nil {
			return "", err
		}
		fn, ok := ref(p.FunctionName)
		if !ok || t.Resources[fn].Type != "AWS::Lambda::Function" {
			return "", fmt.Errorf("samtemplate: alias %s's FunctionName %s is not a function of the template", id, p.FunctionName)
		}
		return fn, nil
	}
	return "", fmt.Errorf("samtemplate: %s is neither a function nor an alias of the template", id)
}

// AssumedBy returns the service principals that role's trust policy lets assume it.
func (t *Template) AssumedBy(role string) ([]string, error) {
	var p struct {
		AssumeRolePolicyDocument struct {
			Statement []struct {
				Effect    string `json:"Effect"`
				Principal struct {
					Service json.RawMessage `json:"Service"`
				} `json:"Principal"`
			} `json:"Statement"`
		} `json:"AssumeRolePolicyDocument"`
	}
	if err := t.Props(role, &p); err != nil {
		return nil, err
	}
	var out []string
	for _, st := range p.AssumeRolePolicyDocument.Statement {
		if st.Effect != "Allow" {
			continue
		}
		for _, raw := range list(st.Principal.Service) {
			var name string
			if err := json.Unmarshal(raw, &name); err != nil {
				return nil, fmt.Errorf("samtemplate: %s: trusted service %s: %w", role, raw, err)
			}
			out = append(out, name)
		}
	}
	return out, nil
}

type policyDoc struct {
	Statement []struct {
		Sid       string          `json:"Sid"`
		Effect    string          `json:"Effect"`
		Action    json.RawMessage `json:"Action"`
		Resource  json.RawMessage `json:"Resource"`
		Condition json.RawMessage `json:"Condition"`
	} `json:"Statement"`
}

// ManagedPolicies returns the ManagedPolicyArns of role, as JSON strings.
func (t *Template) ManagedPolicies(role string) ([]string, error) {
	var p struct {
		ManagedPolicyArns []json.RawMessage `json:"ManagedPolicyArns"`
	}
	if err := t.Props(role, &p); err != nil {
		return nil, err
	}
	out := make([]string, len(p.ManagedPolicyArns))
	for i, a := range p.ManagedPolicyArns {
		out[i] = string(a)
	}
	return out, nil
}

// Statements returns every statement that applies to role: its inline Policies and the
// AWS::IAM::Policy resources that name it in Roles.
func (t *Template) Statements(role string) ([]Statement, error) {
	var inline struct {
		Policies []struct {
			PolicyDocument policyDoc `json:"PolicyDocument"`
		} `json:"Policies"`
	}
	if err := t.Props(role, &inline); err != nil {
		return nil, err
	}
	docs := make([]policyDoc, 0, len(inline.Policies))
	for _, p := range inline.Policies {
		docs = append(docs, p.PolicyDocument)
	}
	for _, id := range t.OfType("AWS::IAM::Policy") {
		var p struct {
			PolicyDocument policyDoc         `json:"PolicyDocument"`
			Roles          []json.RawMessage `json:"Roles"`
		}
		if err := t.Props(id, &p); err != nil {
			return nil, err
		}
		for _, r := range p.Roles {
			if name, ok := ref(r); ok && name == role {
				docs = append(docs, p.PolicyDocument)
			}
		}
	}
	var out []Statement
	for _, d := range docs {
		for _, st := range d.Statement {
			s := Statement{Sid: st.Sid, Effect: st.Effect, Condition: st.Condition}
			for _, a := range list(st.Action) {
				var name string
				if err := json.Unmarshal(a, &name); err != nil {
					return nil, fmt.Errorf("samtemplate: %s: action %s: %w", role, a, err)
				}
				s.Actions = append(s.Actions, name)
			}
			for _, r := range list(st.Resource) {
				name, ok := ref(r)
				if !ok {
					name = string(r)
				}
				s.Resources = append(s.Resources, name)
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// FunctionAllowed is Allowed for the role of the function fn.
func (t *Template) FunctionAllowed(fn string) (map[string][]string, error) {
	role, err := t.FunctionRole(fn)
	if err != nil {
		return nil, err
	}
	return t.Allowed(role)
}

// Queue is what the tests read of an AWS::SQS::Queue.
type Queue struct {
	FifoQueue           bool    `json:"FifoQueue"`
	FifoThroughputLimit string  `json:"FifoThroughputLimit"`
	DeduplicationScope  string  `json:"DeduplicationScope"`
	VisibilityTimeout   float64 `json:"VisibilityTimeout"`
	RedrivePolicy       struct {
		MaxReceiveCount float64 `json:"maxReceiveCount"`
	} `json:"RedrivePolicy"`
}

// Queue returns the properties of the queue id.
func (t *Template) Queue(id string) (Queue, error) {
	var q Queue
	err := t.Props(id, &q)
	return q, err
}

// Allowed returns, for role, each resource (as Statement names it) with the actions
// its Allow statements grant on it.
func (t *Template) Allowed(role string) (map[string][]string, error) {
	sts, err := t.Statements(role)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, s := range sts {
		if s.Effect != "Allow" {
			continue
		}
		for _, r := range s.Resources {
			out[r] = append(out[r], s.Actions...)
		}
	}
	return out, nil
}

// list returns the elements of a JSON array, or the value itself when it is not one.
func list(raw json.RawMessage) []json.RawMessage {
	var l []json.RawMessage
	if err := json.Unmarshal(raw, &l); err == nil {
		return l
	}
	if len(raw) == 0 {
		return nil
	}
	return []json.RawMessage{raw}
}

// ref names what raw points at: "X" for {"Fn::GetAtt":["X","Arn"]} or {"Ref":"X"},
// "X/rest" for {"Fn::Sub":"${X.Arn}/rest"}, and "*" for "*".
func ref(raw json.RawMessage) (string, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, s == "*"
	}
	var fn struct {
		GetAtt []string `json:"Fn::GetAtt"`
		Ref    string   `json:"Ref"`
		Sub    string   `json:"Fn::Sub"`
	}
	if err := json.Unmarshal(raw, &fn); err != nil {
		return "", false
	}
	switch {
	case len(fn.GetAtt) == 2 && fn.GetAtt[1] == "Arn":
		return fn.GetAtt[0], true
	case fn.Ref != "":
		return fn.Ref, true
	case strings.HasPrefix(fn.Sub, "${") && strings.Contains(fn.Sub, ".Arn}"):
		id, rest, _ := strings.Cut(strings.TrimPrefix(fn.Sub, "${"), ".Arn}")
		return id + rest, true
	}
	return "", false
}
