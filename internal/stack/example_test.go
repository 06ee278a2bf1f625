package stack_test

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// templateEnv is what Up must give the functions of the template info describes, stack
// name, the resources being env's: each variable once, in template order, a !Ref of a
// queue its URL, of a table its name <stack>-<LogicalId>, anything else its value with
// the parameters' defaults.
func templateEnv(t *testing.T, info *exampletest.Template, env *stack.Env, name string) []stack.Var {
	t.Helper()
	var want []stack.Var
	seen := map[string]bool{}
	for _, fn := range info.OfType(exampletest.TypeFunction) {
		for _, v := range info.Env(fn) {
			if seen[v.Name] {
				continue
			}
			seen[v.Name] = true
			value, ok := info.Static(v.Value)
			if r, isRes := info.Resource(v.Value.Value); v.Value.Tag == "!Ref" && isRes {
				got, created := env.Resource(r.ID)
				switch {
				case !created:
					t.Errorf("%s: %s refers to %s, which Up did not create", fn, v.Name, r.ID)
				case r.Type == stack.TypeQueue:
					value, ok = got.URL, true
				case r.Type == stack.TypeSecret:
					value, ok = got.ARN, true
				default:
					value, ok = name+"-"+r.ID, true
				}
			}
			if !ok {
				t.Fatalf("%s: cannot tell the value of %s (tag %s) from the template", fn, v.Name, v.Value.Tag)
			}
			want = append(want, stack.Var{Name: v.Name, Value: value})
		}
	}
	return want
}

// fakeExample is an example with a block of its own (a table, no outbound queue): what
// the template becomes when another message type is wired. LoadFor only reads its name
// and its block.
type fakeExample struct{ example.Example }

func (fakeExample) Name() string { return "fake" }

func (fakeExample) Template() []byte {
	return []byte(`Parameters:
  # example:begin parameters
  ScopeName:
    Type: String
    Default: fakes
  KeyField:
    Type: String
    Default: fake_id
  # example:end parameters
Resources:
  # example:begin resources
  FakeWidgets:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      KeySchema:
        - AttributeName: widget_id
          KeyType: HASH
      AttributeDefinitions:
        - AttributeName: widget_id
          AttributeType: S
  ExampleConsumerPolicy:
    Type: AWS::IAM::Policy
    Properties:
      PolicyName: example-fake
      Roles: [!Ref ConsumerRole]
      PolicyDocument:
        Version: "2012-10-17"
        Statement:
          - Effect: Allow
            Action: [dynamodb:UpdateItem]
            Resource: !GetAtt FakeWidgets.Arn
  ExampleReaperPolicy:
    Type: AWS::IAM::Policy
    Properties:
      PolicyName: example-fake
      Roles: [!Ref ReaperRole]
      PolicyDocument:
        Version: "2012-10-17"
        Statement:
          - Effect: Allow
            Action: [dynamodb:GetItem]
            Resource: !GetAtt FakeWidgets.Arn
  # example:end resources
Resources-ConsumerFunction-Properties-Environment-Variables:
          # example:begin environment
          EXAMPLE: fake
          WIDGETS_TABLE: !Ref FakeWidgets
          # example:end environment
Outputs:
  # example:begin outputs
  FakeWidgetsName:
    Value: !Ref FakeWidgets
  # example:end outputs
`)
}

// TestLoadFor: the template with each example's block swapped in has the machinery's
// queues and tables and that block's, none of another block's, and the consumer gets
// the block's variables, EXAMPLE its name.
func TestLoadFor(t *testing.T) {
	t.Parallel()
	wired := exampletest.ReadTemplateFile(t, templatePath)
	dflt := exampletest.Block(t, wiring.Default())
	isStore := func(r exampletest.Resource) bool {
		return r.Type == stack.TypeQueue || r.Type == stack.TypeTable || r.Type == stack.TypeSecret
	}
	// The machinery's queues and tables: the template's, less the wired block's (the
	// default's, which template.yaml carries).
	if name, err := example.BlockExample(mustRead(t, templatePath)); err != nil || name != wiring.Default().Name() {
		t.Fatalf("template.yaml carries the block of %q (%v), want the default %s", name, err, wiring.Default().Name())
	}
	var machinery []string
	for _, r := range wired.Resources {
		if _, inBlock := dflt.Resource(r.ID); isStore(r) && !inBlock {
			machinery = append(machinery, r.ID)
		}
	}
	all := append(slices.Clone(wiring.Examples), fakeExample{})
	for _, ex := range all {
		t.Run(ex.Name(), func(t *testing.T) {
			t.Parallel()
			tm, err := stack.LoadFor(templatePath, ex)
			if err != nil {
				t.Fatal(err)
			}
			block := exampletest.Block(t, ex)
			want := slices.Clone(machinery)
			for _, r := range block.Resources {
				if isStore(r) {
					want = append(want, r.ID)
				}
			}
			env, _ := up(t, tm, stackName(t))
			var got []string
			for _, r := range env.Resources {
				got = append(got, r.LogicalID)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("Up created %v, want the machinery's and the block's %v", got, want)
			}
			// Another example's resources are not there.
			for _, other := range all {
				if other.Name() == ex.Name() {
					continue
				}
				for _, r := range exampletest.Block(t, other).Resources {
					if _, mine := block.Resource(r.ID); !mine && slices.Contains(got, r.ID) {
						t.Errorf("%s's resource %s is in the template with %s's block", other.Name(), r.ID, ex.Name())
					}
				}
			}
			if v, _ := env.Lookup(example.Var); v != ex.Name() {
				t.Errorf("%s = %q, want %s", example.Var, v, ex.Name())
			}
			fn, err := tm.Function("ConsumerFunction")
			if err != nil {
				t.Fatal(err)
			}
			info := exampletest.ReadTemplate(t, mustWire(t, ex))
			if !slices.Equal(fn.VarNames, varNames(info.Env("ConsumerFunction"))) {
				t.Errorf("consumer variables %v, want those of the template with the block %v", fn.VarNames, varNames(info.Env("ConsumerFunction")))
			}
			if scope, _ := env.Lookup("IDEMPOTENCY_SCOPE"); scope != block.Defaults["ScopeName"] {
				t.Errorf("IDEMPOTENCY_SCOPE %q, want the block's ScopeName default %q", scope, block.Defaults["ScopeName"])
			}
		})
	}
}

func varNames(vars []exampletest.Var) []string {
	out := make([]string, len(vars))
	for i, v := range vars {
		out[i] = v.Name
	}
	return out
}

func mustWire(t *testing.T, ex example.Example) []byte {
	t.Helper()
	out, err := example.Wire(mustRead(t, templatePath), ex)
	if err != nil {
		t.Fatal(fmt.Errorf("wire %s: %w", ex.Name(), err))
	}
	return out
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
