package stack

import (
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// resolveTemplate has a parameter of each kind, conditions of each kind, a queue, a
// table and a function, for resolving expressions against.
const resolveTemplate = `
Parameters:
  Env:
    Type: String
    Default: dev
    AllowedValues: [dev, prod]
  Hours:
    Type: Number
    Default: 168
    MinValue: 1
  Names:
    Type: CommaDelimitedList
    Default: "a, b"
Mappings:
  Sizes:
    dev: {Batch: 5}
Conditions:
  IsProd: !Equals [!Ref Env, prod]
  NotProd: !Not [!Condition IsProd]
  Both: !And [!Condition NotProd, !Equals [!Ref Hours, 168]]
  Either: !Or [!Condition IsProd, !Equals ["1", "2"]]
  Loop: !Not [!Condition Loop]
Resources:
  Queue:
    Type: AWS::SQS::Queue
  Table:
    Type: AWS::DynamoDB::Table
  Fn:
    Type: AWS::Serverless::Function
`

// resolverFor returns a resolver of resolveTemplate as Up would have it after creating
// the queue and the table.
func resolverFor(t *testing.T, params map[string]string) *resolver {
	t.Helper()
	tm, err := Parse([]byte(resolveTemplate))
	if err != nil {
		t.Fatal(err)
	}
	if err := tm.SetParameters(params); err != nil {
		t.Fatal(err)
	}
	r, err := tm.newResolver("st", "eu-west-1")
	if err != nil {
		t.Fatal(err)
	}
	r.res["Queue"] = &Resource{LogicalID: "Queue", Type: TypeQueue, Name: "st-Queue", URL: "http://local/123/st-Queue", ARN: "arn:aws:sqs:eu-west-1:123:st-Queue"}
	r.res["Table"] = &Resource{LogicalID: "Table", Type: TypeTable, Name: "st-Table", ARN: "arn:aws:dynamodb:eu-west-1:123:table/st-Table"}
	r.learnAccount(r.res["Queue"].ARN)
	return r
}

// expr parses one YAML value, short-form tags included.
func expr(t *testing.T, src string) any {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	v, err := convert(&n, 0)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	return v
}

func TestResolve(t *testing.T) {
	tests := []struct {
		expr   string
		params map[string]string
		want   any
	}{
		{expr: `!Ref Env`, want: "dev"},
		{expr: `!Ref Env`, params: map[string]string{"Env": "prod"}, want: "prod"},
		{expr: `!Ref Hours`, want: "168"},
		{expr: `!Ref Names`, want: []any{"a", "b"}},
		{expr: `!Ref Queue`, want: "http://local/123/st-Queue"},
		{expr: `!Ref Table`, want: "st-Table"},
		{expr: `!GetAtt Queue.Arn`, want: "arn:aws:sqs:eu-west-1:123:st-Queue"},
		{expr: `!GetAtt [Table, Arn]`, want: "arn:aws:dynamodb:eu-west-1:123:table/st-Table"},
		{expr: `{"Fn::GetAtt": [Queue, QueueName]}`, want: "st-Queue"},
		{expr: `!Sub "${Hours}h"`, want: "168h"},
		{expr: `!Sub "${AWS::StackName}/${Env}/${Queue.QueueName}/${AWS::Region}/${AWS::AccountId}/${AWS::Partition}"`,
			want: "st/dev/st-Queue/eu-west-1/123/aws"},
		{expr: `!Sub "${Table.Arn}/index/inflight"`, want: "arn:aws:dynamodb:eu-west-1:123:table/st-Table/index/inflight"},
		{expr: `!Sub ["${T}-${Env}", {T: !Ref Table}]`, want: "st-Table-dev"},
		{expr: `!Sub "${!Literal} ${ Env }"`, want: "${Literal} dev"},
		{expr: `!If [IsProd, yes, no]`, want: "no"},
		{expr: `!If [IsProd, yes, no]`, params: map[string]string{"Env": "prod"}, want: "yes"},
		{expr: `!If [NotProd, !Ref Table, no]`, want: "st-Table"},
		{expr: `!If [Both, yes, no]`, want: "yes"},
		{expr: `!If [Both, yes, no]`, params: map[string]string{"Hours": "24"}, want: "no"},
		{expr: `!If [Either, yes, no]`, want: "no"},
		{expr: `!Join [":", [a, !Ref Env, 3]]`, want: "a:dev:3"},
		{expr: `!Select [1, !Ref Names]`, want: "b"},
		{expr: `!Split [",", "x,y"]`, want: []any{"x", "y"}},
		{expr: `!FindInMap [Sizes, !Ref Env, Batch]`, want: int64(5)},
		{expr: `{A: 1, B: !Ref AWS::NoValue, C: [x, !Ref AWS::NoValue]}`, want: map[string]any{"A": int64(1), "C": []any{"x"}}},
		{expr: `{deadLetterTargetArn: !GetAtt Queue.Arn, maxReceiveCount: 5}`,
			want: map[string]any{"deadLetterTargetArn": "arn:aws:sqs:eu-west-1:123:st-Queue", "maxReceiveCount": int64(5)}},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			r := resolverFor(t, tt.params)
			got, err := r.resolve(expr(t, tt.expr), "resource X, property P")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	tests := []struct {
		expr string
		want []string // all in the error
	}{
		{`!Ref Nope`, []string{"resource X, property P", "Nope", "neither a parameter nor a resource"}},
		{`!Sub "x-${Nope}"`, []string{"property P", "Nope"}},
		{`!Ref Fn`, []string{"Fn is a AWS::Serverless::Function", "only queues, tables, secrets and parameters"}},
		{`!GetAtt Queue.Bogus`, []string{"attribute Bogus of queue Queue", "Arn"}},
		{`!GetAtt Table.StreamArn`, []string{"attribute StreamArn of table Table"}},
		{`!ImportValue shared`, []string{"property P.Fn::ImportValue", "Fn::ImportValue is not supported locally"}},
		{`!If [Missing, a, b]`, []string{"no condition Missing"}},
		{`!If [Loop, a, b]`, []string{"condition Loop refers to itself"}},
		{`!Equals [a, b]`, []string{"condition function"}},
		{`!Ref AWS::StackId`, []string{}}, // known once an ARN was seen: no error
		{`!Select [5, [a]]`, []string{"index 5 out of range"}},
		{`!Sub "${Env"`, []string{"unterminated"}},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			_, err := resolverFor(t, nil).resolve(expr(t, tt.expr), "resource X, property P")
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestEnvErrorNamesResourceAndProperty(t *testing.T) {
	tm, err := Parse([]byte(`
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          SHARED: !ImportValue other-stack-output
`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := tm.newResolver("st", "us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tm.env(r)
	if err == nil || !strings.Contains(err.Error(), "resource Fn (line 3), property Environment.Variables.SHARED") ||
		!strings.Contains(err.Error(), "Fn::ImportValue is not supported locally") {
		t.Fatalf("error %v does not name the resource, the property and the function", err)
	}
}

func TestReferences(t *testing.T) {
	v := expr(t, `{A: !Ref Q1, B: [!GetAtt Q2.Arn], C: !Sub "${Q3.Arn}/${Q4}-${!Q5}", D: !If [C, !Ref Q6, x]}`)
	refs := map[string]bool{}
	references(v, refs)
	for _, id := range []string{"Q1", "Q2", "Q3", "Q4", "Q6"} {
		if !refs[id] {
			t.Errorf("%s not found in %v", id, refs)
		}
	}
	if refs["Q5"] {
		t.Errorf("${!Q5} is a literal, not a reference")
	}
}
