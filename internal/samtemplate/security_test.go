package samtemplate_test

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
)

// queuePolicyStatement is a statement of an AWS::SQS::QueuePolicy, as the transformed
// template has it.
type queuePolicyStatement struct {
	Sid       string                                `json:"Sid"`
	Effect    string                                `json:"Effect"`
	Principal json.RawMessage                       `json:"Principal"`
	Action    json.RawMessage                       `json:"Action"`
	Resource  json.RawMessage                       `json:"Resource"`
	Condition map[string]map[string]json.RawMessage `json:"Condition"`
}

// TestOnlyTheConsumerAndTheReaperDeadLetter (issue 28, finding 2): the DLQ's queue
// policy denies sqs:SendMessage (which also authorises SendMessageBatch) to every
// principal but the consumer's and the reaper's roles, so nobody else can put a message
// there with a dlq-outbound-queue for `idemctl redrive` to follow; the roles whose
// identity policies allow sending to the DLQ are exactly those two. The policy is
// evaluated as IAM evaluates it (an explicit Deny wins over any Allow, in the account
// too: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html)
// for each kind of caller. moto does not enforce queue policies: this is checked on the
// template as CloudFormation receives it.
func TestOnlyTheConsumerAndTheReaperDeadLetter(t *testing.T) {
	eachExample(t, func(t *testing.T, _ example.Example, tpl *samtemplate.Template) {
		var policies []string
		for _, id := range tpl.OfType("AWS::SQS::QueuePolicy") {
			var p struct {
				Queues []json.RawMessage `json:"Queues"`
			}
			if err := tpl.Props(id, &p); err != nil {
				t.Fatal(err)
			}
			for _, q := range p.Queues {
				if refName(t, q) == "DeadLetterQueue" {
					policies = append(policies, id)
				}
			}
		}
		if len(policies) != 1 {
			t.Fatalf("queue policies of the DLQ: %v, want one", policies)
		}
		var p struct {
			PolicyDocument struct {
				Statement []queuePolicyStatement `json:"Statement"`
			} `json:"PolicyDocument"`
		}
		if err := tpl.Props(policies[0], &p); err != nil {
			t.Fatal(err)
		}
		consumer, err := tpl.FunctionRole("ConsumerFunction")
		if err != nil {
			t.Fatal(err)
		}
		reaper, err := tpl.FunctionRole("ReaperFunction")
		if err != nil {
			t.Fatal(err)
		}
		// Who may send, by the roles' own policies: exactly the consumer and the reaper.
		senders := rolesAllowed(t, tpl, "sqs:SendMessage", "DeadLetterQueue")
		if want := []string{consumer, reaper}; !slices.Equal(senders, slices.Sorted(slices.Values(want))) {
			t.Errorf("roles allowed to send to the DLQ: %v, want %v", senders, want)
		}
		roleARN := func(id string) string { return "arn:aws:iam::111122223333:role/" + id }
		for _, c := range []struct {
			who       string
			principal string // aws:PrincipalArn ("": none in the request)
			denied    bool
		}{
			{"the consumer's role", roleARN(consumer), false},
			{"the reaper's role", roleARN(reaper), false},
			{"the ingress's role", roleARN("IngressRole"), true},
			{"a producer's role", roleARN("OrdersProducer"), true},
			{"an IAM user", "arn:aws:iam::111122223333:user/ops", true},
			{"the account's root", "arn:aws:iam::111122223333:root", true},
			{"a request without a principal's ARN (SQS's own redrive)", "", false},
		} {
			if denied := denies(t, p.PolicyDocument.Statement, "sqs:SendMessage", "DeadLetterQueue", c.principal, roleARN); denied != c.denied {
				t.Errorf("%s (%q): SendMessage to the DLQ denied %v, want %v", c.who, c.principal, denied, c.denied)
			}
		}
		for _, st := range p.PolicyDocument.Statement {
			if st.Effect != "Deny" {
				t.Errorf("statement %s of the DLQ's policy is %s: it may only deny", st.Sid, st.Effect)
			}
		}
	})
}

// rolesAllowed returns the roles whose own policies allow action on resource, sorted.
func rolesAllowed(t *testing.T, tpl *samtemplate.Template, action, resource string) []string {
	t.Helper()
	var roles []string
	for _, role := range tpl.OfType("AWS::IAM::Role") {
		allowed, err := tpl.Allowed(role)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(allowed[resource], action) {
			roles = append(roles, role)
		}
	}
	slices.Sort(roles)
	return roles
}

// denies reports whether one of the Deny statements applies to action on resource by a
// principal whose aws:PrincipalArn is principal: Principal "*", the action and the
// resource named, and every condition true. It knows the conditions the template uses
// (ArnNotEquals and Null on aws:PrincipalArn) and fails the test on any other: IAM ANDs
// the conditions of a statement; ArnNotEquals is true when the key is absent, Null
// "false" only when it is present
// (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html).
func denies(t *testing.T, sts []queuePolicyStatement, action, resource, principal string, arnOf func(string) string) bool {
	t.Helper()
	for _, st := range sts {
		if st.Effect != "Deny" || strings.TrimSpace(string(st.Principal)) != `"*"` {
			continue
		}
		if !slices.Contains(strs(t, st.Action), action) || refName(t, st.Resource) != resource {
			continue
		}
		applies := true
		for op, keys := range st.Condition {
			for key, raw := range keys {
				if key != "aws:PrincipalArn" {
					t.Fatalf("statement %s: condition key %s not known to this test", st.Sid, key)
				}
				switch op {
				case "ArnNotEquals":
					var values []string
					for _, v := range list(raw) {
						values = append(values, arnOf(refName(t, v)))
					}
					applies = applies && (principal == "" || !slices.Contains(values, principal))
				case "Null":
					var v string
					if err := json.Unmarshal(raw, &v); err != nil {
						t.Fatal(err)
					}
					isNull, err := strconv.ParseBool(v)
					if err != nil {
						t.Fatal(err)
					}
					applies = applies && (principal == "") == isNull
				default:
					t.Fatalf("statement %s: condition operator %s not known to this test", st.Sid, op)
				}
			}
		}
		if applies {
			return true
		}
	}
	return false
}

func list(raw json.RawMessage) []json.RawMessage {
	var l []json.RawMessage
	if json.Unmarshal(raw, &l) == nil {
		return l
	}
	return []json.RawMessage{raw}
}

func strs(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	var out []string
	for _, r := range list(raw) {
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestStackSecret: the stack's secret is made by CloudFormation long enough for
// sqsmsg.NewKeys; every function is told its ARN (STACK_SECRET_ARN), never its value, and
// may read it (secretsmanager:GetSecretValue on it alone, no other action of Secrets
// Manager); no other role may.
func TestStackSecret(t *testing.T) {
	eachExample(t, func(t *testing.T, _ example.Example, tpl *samtemplate.Template) {
		var secret struct {
			GenerateSecretString struct {
				PasswordLength int `json:"PasswordLength"`
			} `json:"GenerateSecretString"`
			SecretString json.RawMessage `json:"SecretString"`
		}
		if err := tpl.Props("StackSecret", &secret); err != nil {
			t.Fatal(err)
		}
		if secret.GenerateSecretString.PasswordLength < sqsmsg.MinSecretBytes || secret.SecretString != nil {
			t.Errorf("StackSecret: generated %d characters (want at least %d), SecretString %s (want none: CloudFormation makes it)",
				secret.GenerateSecretString.PasswordLength, sqsmsg.MinSecretBytes, secret.SecretString)
		}
		readers := map[string]bool{}
		for fn, role := range functions(t, tpl) {
			var p struct {
				Environment struct {
					Variables map[string]json.RawMessage `json:"Variables"`
				} `json:"Environment"`
			}
			if err := tpl.Props(fn, &p); err != nil {
				t.Fatal(err)
			}
			if v, ok := p.Environment.Variables["STACK_SECRET_ARN"]; !ok || refName(t, v) != "StackSecret" {
				t.Errorf("%s: STACK_SECRET_ARN %s, want Ref StackSecret", fn, v)
			}
			for name := range p.Environment.Variables {
				if name == "STACK_SECRET" {
					t.Errorf("%s is given the secret's value in its environment", fn)
				}
			}
			readers[role] = true
		}
		for _, role := range tpl.OfType("AWS::IAM::Role") {
			sts, err := tpl.Statements(role)
			if err != nil {
				t.Fatal(err)
			}
			reads := false
			for _, st := range sts {
				for _, a := range st.Actions {
					if !strings.HasPrefix(a, "secretsmanager:") || st.Effect != "Allow" {
						continue
					}
					if a != "secretsmanager:GetSecretValue" || !slices.Equal(st.Resources, []string{"StackSecret"}) {
						t.Errorf("%s statement %s allows %s on %v: want GetSecretValue on StackSecret alone", role, st.Sid, a, st.Resources)
					}
					reads = true
				}
			}
			if reads != readers[role] {
				t.Errorf("%s reads the stack's secret: %v, want %v (the functions' roles, and no other)", role, reads, readers[role])
			}
		}
	})
}
