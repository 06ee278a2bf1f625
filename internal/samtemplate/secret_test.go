package samtemplate_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
)

// TestOnlyTheFunctionsAndTheOperatorReadTheSecret (issue 38, finding 4): whoever reads
// the stack's secret can sign as the ingress and take any caller's key. Its resource
// policy denies secretsmanager:GetSecretValue to every principal but the three functions'
// roles, the only roles whose own policies allow it, and OperatorRoleArn when it is set.
// IAM and resource policies are not enforced by moto: this evaluates the policy as
// CloudFormation receives it, with each branch of its HasOperatorRole condition.
func TestOnlyTheFunctionsAndTheOperatorReadTheSecret(t *testing.T) {
	eachExample(t, func(t *testing.T, _ example.Example, tpl *samtemplate.Template) {
		var policies []string
		var doc []queuePolicyStatement
		for _, id := range tpl.OfType("AWS::SecretsManager::ResourcePolicy") {
			var p struct {
				SecretId       json.RawMessage `json:"SecretId"`
				ResourcePolicy struct {
					Statement []queuePolicyStatement `json:"Statement"`
				} `json:"ResourcePolicy"`
			}
			if err := tpl.Props(id, &p); err != nil {
				t.Fatal(err)
			}
			if refName(t, p.SecretId) == "StackSecret" {
				policies, doc = append(policies, id), p.ResourcePolicy.Statement
			}
		}
		if len(policies) != 1 {
			t.Fatalf("resource policies of the stack's secret: %v, want one", policies)
		}
		readers := rolesAllowed(t, tpl, "secretsmanager:GetSecretValue", "StackSecret")
		var functions []string
		for _, fn := range []string{"ConsumerFunction", "ReaperFunction", "IngressFunction"} {
			role, err := tpl.FunctionRole(fn)
			if err != nil {
				t.Fatal(err)
			}
			functions = append(functions, role)
		}
		if !slices.Equal(readers, slices.Sorted(slices.Values(functions))) {
			t.Errorf("roles allowed to read the secret: %v, want the functions' %v", readers, functions)
		}
		const operator = "arn:aws:iam::111122223333:role/ops-idemctl"
		arnOf := func(id string) string {
			if id == "OperatorRoleArn" {
				return operator
			}
			return "arn:aws:iam::111122223333:role/" + id
		}
		for branch, operatorSet := range []bool{true, false} {
			sts := withBranch(t, doc, "HasOperatorRole", branch)
			cases := []struct {
				who, principal string
				denied         bool
			}{
				{"an IAM user", "arn:aws:iam::111122223333:user/ops", true},
				{"the account's root", "arn:aws:iam::111122223333:root", true},
				{"a producer's role", arnOf("OrdersProducer"), true},
				{"the operator's role", operator, !operatorSet},
			}
			for _, role := range functions {
				cases = append(cases, struct {
					who, principal string
					denied         bool
				}{role, arnOf(role), false})
			}
			for _, c := range cases {
				if denied := denies(t, sts, "secretsmanager:GetSecretValue", "StackSecret", c.principal, arnOf); denied != c.denied {
					t.Errorf("OperatorRoleArn set %v: %s (%s): GetSecretValue denied %v, want %v", operatorSet, c.who, c.principal, denied, c.denied)
				}
			}
		}
		for _, st := range doc {
			if st.Effect != "Deny" {
				t.Errorf("statement %s of the secret's policy is %s: it may only deny", st.Sid, st.Effect)
			}
		}
	})
}

// withBranch returns sts with each condition value that is a Fn::If on cond replaced by
// its branch (0: the condition true, 1: false).
func withBranch(t *testing.T, sts []queuePolicyStatement, cond string, branch int) []queuePolicyStatement {
	t.Helper()
	out := slices.Clone(sts)
	for i, st := range out {
		c := map[string]map[string]json.RawMessage{}
		for op, keys := range st.Condition {
			c[op] = map[string]json.RawMessage{}
			for key, raw := range keys {
				var fn struct {
					If []json.RawMessage `json:"Fn::If"`
				}
				if json.Unmarshal(raw, &fn) == nil && len(fn.If) == 3 {
					var name string
					if err := json.Unmarshal(fn.If[0], &name); err != nil || name != cond {
						t.Fatalf("statement %s: Fn::If on %s, want %s", st.Sid, fn.If[0], cond)
					}
					raw = fn.If[1+branch]
				}
				c[op][key] = raw
			}
		}
		out[i].Condition = c
	}
	return out
}
