package samtemplate_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
)

// TestStackSecret: the stack's secret is made by CloudFormation long enough for
// idem.NewKeys; every function is told its ARN (STACK_SECRET_ARN), never its value, and
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
		if secret.GenerateSecretString.PasswordLength < idem.MinSecretBytes || secret.SecretString != nil {
			t.Errorf("StackSecret: generated %d characters (want at least %d), SecretString %s (want none: CloudFormation makes it)",
				secret.GenerateSecretString.PasswordLength, idem.MinSecretBytes, secret.SecretString)
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
