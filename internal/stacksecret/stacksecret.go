// Package stacksecret reads the stack's secret (the template's StackSecret, an
// AWS::SecretsManager::Secret CloudFormation generates) from Secrets Manager and derives
// the stack's keys from it (sqsmsg.Keys): the functions at init, `idemctl` for the
// operator.
package stacksecret

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/envconf"
)

// API is the Secrets Manager call Load makes; *secretsmanager.Client satisfies it.
type API interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// Load reads the current value of the secret arn (one GetSecretValue: the role needs
// secretsmanager:GetSecretValue on it) and derives the stack's keys from it.
func Load(ctx context.Context, api API, arn string) (*sqsmsg.Keys, error) {
	out, err := api.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
	if err != nil {
		return nil, fmt.Errorf("stack secret %s: %w", arn, err)
	}
	if out.SecretString == nil {
		return nil, fmt.Errorf("stack secret %s: %w", arn, errors.New("it holds no SecretString"))
	}
	keys, err := sqsmsg.NewKeys([]byte(*out.SecretString))
	if err != nil {
		return nil, fmt.Errorf("stack secret %s: %w", arn, err)
	}
	return keys, nil
}

// Keys returns the stack's keys for a process whose environment is lookup: STACK_SECRET's
// value when it is set (local runs), else the secret STACK_SECRET_ARN names, read with
// awsCfg; nil when neither is set.
func Keys(ctx context.Context, lookup func(string) (string, bool), awsCfg aws.Config) (*sqsmsg.Keys, error) {
	e := envconf.New(lookup)
	keys, arn := e.StackSecret()
	if err := e.Err(); err != nil {
		return nil, err
	}
	return Resolve(ctx, keys, arn, awsCfg)
}

// Resolve returns keys when they are set (a configuration's, from STACK_SECRET), else
// the keys of the secret arn read with awsCfg; nil when arn is "" too.
func Resolve(ctx context.Context, keys *sqsmsg.Keys, arn string, awsCfg aws.Config) (*sqsmsg.Keys, error) {
	if keys != nil || arn == "" {
		return keys, nil
	}
	return Load(ctx, secretsmanager.NewFromConfig(awsCfg), arn)
}
