package stacksecret_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/stacksecret"
)

func TestMain(m *testing.M) { os.Exit(awstest.Main(m)) }

// TestKeys: a function reads the secret STACK_SECRET_ARN names (GetSecretValue on the
// local endpoint) and derives the keys its value gives; STACK_SECRET, the value itself
// (local runs), is taken without a call; neither set gives no keys.
func TestKeys(t *testing.T) {
	ctx := context.Background()
	value := strings.Repeat("Ab1", 22)
	created, err := awstest.SecretsManager(t).CreateSecret(ctx, &secretsmanager.CreateSecretInput{
		Name: aws.String(awstest.Name(t, "secret")), SecretString: aws.String(value),
	})
	if err != nil {
		t.Fatal(err)
	}
	arn := aws.ToString(created.ARN)
	t.Cleanup(func() {
		_, _ = awstest.SecretsManager(t).DeleteSecret(ctx, &secretsmanager.DeleteSecretInput{SecretId: aws.String(arn), ForceDeleteWithoutRecovery: aws.Bool(true)})
	})
	want, err := sqsmsg.NewKeys([]byte(value))
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	for what, vars := range map[string]map[string]string{
		"the ARN":         {"STACK_SECRET_ARN": arn},
		"the value":       {"STACK_SECRET": value, "STACK_SECRET_ARN": "arn:aws:secretsmanager:us-east-1:000000000000:secret:nowhere"},
		"the value alone": {"STACK_SECRET": value},
	} {
		keys, err := stacksecret.Keys(ctx, lookup(vars), awstest.Config(t))
		if err != nil || keys.LogHash("k") != want.LogHash("k") {
			t.Errorf("%s: keys %v, %v; want the secret's", what, keys, err)
		}
	}
	if keys, err := stacksecret.Keys(ctx, lookup(nil), awstest.Config(t)); keys != nil || err != nil {
		t.Errorf("no secret: %v, %v; want none", keys, err)
	}
	if _, err := stacksecret.Keys(ctx, lookup(map[string]string{"STACK_SECRET_ARN": arn + "-missing"}), awstest.Config(t)); err == nil || !strings.Contains(err.Error(), "stack secret") {
		t.Errorf("a missing secret: %v, want an error naming it", err)
	}
	if _, err := stacksecret.Keys(ctx, lookup(map[string]string{"STACK_SECRET": "short"}), awstest.Config(t)); err == nil {
		t.Error("a 5-byte STACK_SECRET was taken")
	}
}
