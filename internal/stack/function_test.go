package stack_test

import (
	"slices"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// TestFunctionOurTemplate: the settings each function gets, Globals merged in.
func TestFunctionOurTemplate(t *testing.T) {
	tpl, err := stack.Load(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	info := exampletest.ReadTemplateFile(t, templatePath)
	if len(info.Env("ConsumerFunction")) == 0 || len(info.Env("ReaperFunction")) == 0 {
		t.Fatal("the template gives the functions no variables")
	}
	for _, tc := range []struct {
		id   string
		vars []string
	}{
		{"ConsumerFunction", varNames(info.Env("ConsumerFunction"))},
		{"ReaperFunction", varNames(info.Env("ReaperFunction"))},
	} {
		fn, err := tpl.Function(tc.id)
		if err != nil {
			t.Fatal(err)
		}
		if fn.Timeout != 30*time.Second || fn.MemoryMB != 256 {
			t.Errorf("%s: timeout %s, memory %d MB: want the Globals' 30s and 256", tc.id, fn.Timeout, fn.MemoryMB)
		}
		for _, v := range tc.vars {
			if !slices.Contains(fn.VarNames, v) {
				t.Errorf("%s: variables %v lack %s", tc.id, fn.VarNames, v)
			}
		}
	}
	// The example's variables (those referring to its block's resources) are the
	// consumer's only.
	block := exampletest.Block(t, wiring.Default())
	reaper, err := tpl.Function("ReaperFunction")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range info.Env("ConsumerFunction") {
		if _, ofBlock := block.Resource(v.Value.Value); v.Value.Tag == "!Ref" && ofBlock && slices.Contains(reaper.VarNames, v.Name) {
			t.Errorf("the reaper got the consumer's %s: %v", v.Name, reaper.VarNames)
		}
	}
	if _, err := tpl.Function("InputQueue"); err == nil {
		t.Error("Function(InputQueue): want an error, it is a queue")
	}
	fn, ev, err := tpl.ScheduledFunction()
	if err != nil || fn != "ReaperFunction" || ev != "Sweep" {
		t.Errorf("ScheduledFunction() = %q, %q, %v; want ReaperFunction, Sweep", fn, ev, err)
	}
}

// TestFunctionDefaults: without Timeout or MemorySize, Lambda's defaults; a parameter
// reference is resolved.
func TestFunctionDefaults(t *testing.T) {
	tpl, err := stack.Parse([]byte(`
Parameters:
  Mem: {Type: Number, Default: 512}
Resources:
  Plain:
    Type: AWS::Lambda::Function
    Properties: {Handler: bootstrap}
  Sized:
    Type: AWS::Serverless::Function
    Properties: {MemorySize: !Ref Mem, Timeout: 9}
`))
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]stack.Function{
		"Plain": {LogicalID: "Plain", Timeout: 3 * time.Second, MemoryMB: 128},
		"Sized": {LogicalID: "Sized", Timeout: 9 * time.Second, MemoryMB: 512},
	} {
		got, err := tpl.Function(id)
		if err != nil || got.Timeout != want.Timeout || got.MemoryMB != want.MemoryMB {
			t.Errorf("%s: %+v, %v; want %+v", id, got, err, want)
		}
	}
}

// TestProperty: a property is resolved where it is, with the parameters as set: lists by
// index or by an element's key=value, conditions and Fn::If, Fn::Sub and Ref of
// parameters; a Ref of a resource is refused (nothing is created), and so is a path that
// leads nowhere.
func TestProperty(t *testing.T) {
	tpl, err := stack.Parse([]byte(`
Parameters:
  Scope: {Type: String, Default: pay}
  Sort: {Type: String, Default: "-"}
Conditions:
  HasSort: !Not [!Equals [!Ref Sort, "-"]]
Resources:
  Table: {Type: AWS::DynamoDB::Table}
  Role:
    Type: AWS::IAM::Role
    Properties:
      Policies:
        - PolicyDocument:
            Statement:
              - Sid: Other
                Resource: !GetAtt Table.Arn
              - Sid: Read
                Resource: !GetAtt Table.Arn
                Keys: [!If [HasSort, static, !Sub "${Scope}#*"]]
`))
	if err != nil {
		t.Fatal(err)
	}
	keys := func() any {
		t.Helper()
		v, err := tpl.Property("Role", "Policies", "0", "PolicyDocument", "Statement", "Sid=Read", "Keys")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := keys(); !slices.Equal(got.([]any), []any{"pay#*"}) {
		t.Errorf("defaults: %v, want [pay#*]", got)
	}
	if err := tpl.SetParameters(map[string]string{"Sort": "SK"}); err != nil {
		t.Fatal(err)
	}
	if got := keys(); !slices.Equal(got.([]any), []any{"static"}) {
		t.Errorf("with a sort key: %v, want [static]", got)
	}
	for _, path := range [][]string{
		{"Policies", "0", "PolicyDocument", "Statement", "Sid=Read", "Resource"}, // a resource: nothing was created
		{"Policies", "1"},
		{"Policies", "0", "PolicyDocument", "Statement", "Sid=None"},
		{"Nothing"},
	} {
		if v, err := tpl.Property("Role", path...); err == nil {
			t.Errorf("Property(Role, %v) = %v, want an error", path, v)
		}
	}
	if _, err := tpl.Property("Nobody"); err == nil {
		t.Error("a resource that is not there: no error")
	}
}
