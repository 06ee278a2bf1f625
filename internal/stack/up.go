package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
)

// DefaultStack is the stack name Up uses when none is given.
const DefaultStack = "idem-local"

// DefaultRegion is the region for ${AWS::Region} when Clients.Region is empty.
const DefaultRegion = "us-east-1"

// SQSAPI is the part of the SQS client Up uses; *sqs.Client satisfies it.
type SQSAPI interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	CreateQueue(ctx context.Context, in *sqs.CreateQueueInput, optFns ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	SetQueueAttributes(ctx context.Context, in *sqs.SetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.SetQueueAttributesOutput, error)
}

// DynamoDBAPI is the part of the DynamoDB client Up uses; *dynamodb.Client satisfies it.
type DynamoDBAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
	UpdateContinuousBackups(ctx context.Context, in *dynamodb.UpdateContinuousBackupsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateContinuousBackupsOutput, error)
}

// Clients are the AWS clients Up creates resources with, on a local endpoint.
type Clients struct {
	SQS      SQSAPI
	DynamoDB DynamoDBAPI
	// SecretsManager creates the template's secrets (required when it has one).
	SecretsManager SecretsAPI
	// Region is the clients' region, for ${AWS::Region} (default DefaultRegion).
	Region string
}

// stackName: what CloudFormation accepts, plus underscores (SQS and DynamoDB take them).
var stackName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)

// Up creates the template's queues and tables for stack (default DefaultStack) through
// api, in dependency order, and returns the functions' environment resolved to them.
// It writes one line per resource to progress ("created", "exists", "updated" or
// "skipped" for the resource types it does not create). Resources that exist already
// are kept: queue attributes are converged to the template, a table whose keys or
// indexes differ from the template is an error (delete it, or use another stack).
func Up(ctx context.Context, t *Template, api Clients, stack string, progress io.Writer) (*Env, error) {
	if t == nil {
		return nil, errors.New("stack: template is nil")
	}
	if api.SQS == nil || api.DynamoDB == nil {
		return nil, errors.New("stack: Clients.SQS and Clients.DynamoDB are required")
	}
	if stack == "" {
		stack = DefaultStack
	}
	if !stackName.MatchString(stack) || len(stack) > 64 {
		return nil, fmt.Errorf("stack: stack name %q: want a letter, then letters, digits, '-' or '_' (at most 64)", stack)
	}
	if progress == nil {
		progress = io.Discard
	}
	region := api.Region
	if region == "" {
		region = DefaultRegion
	}
	r, err := t.newResolver(stack, region)
	if err != nil {
		return nil, err
	}
	order, skipped, err := t.plan(r)
	if err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	u := &upper{api: api, r: r, stack: stack, progress: progress}
	idWidth, typeWidth := 0, 0
	for _, res := range t.resources {
		idWidth, typeWidth = max(idWidth, len(res.id)), max(typeWidth, len(res.typ))
	}
	line := func(status, typ, id, detail string) {
		fmt.Fprintf(progress, "%-8s %-*s %-*s %s\n", status, typeWidth, typ, idWidth, id, detail)
	}
	var created []Resource
	var secrets []string // the values of the template's secrets
	for _, res := range order {
		var got *Resource
		switch res.typ {
		case TypeQueue:
			got, err = u.queue(ctx, res)
		case TypeSecret:
			var value string
			got, value, err = u.secret(ctx, res)
			secrets = append(secrets, value)
		default:
			got, err = u.table(ctx, res)
		}
		if err != nil {
			return nil, Unreachable(fmt.Errorf("stack: %w", err))
		}
		r.res[res.id] = got
		r.learnAccount(got.ARN)
		created = append(created, *got)
		detail := got.Name
		if got.URL != "" {
			detail = got.URL
		}
		line(got.Status, got.Type, got.LogicalID, detail)
		for _, n := range u.notes {
			fmt.Fprintf(progress, "         note: %s\n", n)
		}
		u.notes = nil
	}
	for _, s := range skipped {
		line("skipped", s.res.typ, s.res.id, s.why)
	}
	env, err := t.env(r)
	if err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	env.Resources = created
	if len(secrets) == 1 {
		env.Vars = append(env.Vars, Var{SecretValueVar, secrets[0]})
	}
	return env, nil
}

type skip struct {
	res *resource
	why string
}

// plan returns the queues and tables to create, dependencies first (template order
// otherwise), and the resources Up leaves alone.
func (t *Template) plan(r *resolver) ([]*resource, []skip, error) {
	var todo []*resource
	var skipped []skip
	for _, res := range t.resources {
		on, err := r.enabled(res)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case !on:
			skipped = append(skipped, skip{res, "condition " + res.condition + " is false"})
		case res.typ == TypeQueue || res.typ == TypeTable || res.typ == TypeSecret:
			todo = append(todo, res)
		default:
			skipped = append(skipped, skip{res, "not created locally"})
		}
	}
	deps := map[string][]string{}
	for _, res := range todo {
		refs := map[string]bool{}
		if res.props != nil {
			references(res.props, refs)
		}
		for _, d := range res.dependsOn {
			refs[d] = true
		}
		for _, other := range todo {
			if refs[other.id] && other.id != res.id {
				deps[res.id] = append(deps[res.id], other.id)
			}
		}
		if refs[res.id] {
			return nil, nil, fmt.Errorf("%s: refers to itself", res.where(""))
		}
	}
	var order []*resource
	done := map[string]bool{}
	for len(order) < len(todo) {
		progressed := false
		for _, res := range todo {
			if done[res.id] {
				continue
			}
			ready := true
			for _, d := range deps[res.id] {
				ready = ready && done[d]
			}
			if ready {
				order = append(order, res)
				done[res.id] = true
				progressed = true
			}
		}
		if !progressed {
			var cycle []string
			for _, res := range todo {
				if !done[res.id] {
					cycle = append(cycle, res.id)
				}
			}
			return nil, nil, fmt.Errorf("circular dependency between %s", strings.Join(cycle, ", "))
		}
	}
	return order, skipped, nil
}

// upper creates resources for one Up call.
type upper struct {
	api      Clients
	r        *resolver
	stack    string
	progress io.Writer
	notes    []string // for the resource being created, printed after its line
}

func (u *upper) note(n string) {
	if n != "" {
		u.notes = append(u.notes, n)
	}
}

// apiCode returns the error code of an AWS API error, or "".
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func hasCode(err error, codes ...string) bool {
	return err != nil && slices.Contains(codes, apiCode(err))
}
