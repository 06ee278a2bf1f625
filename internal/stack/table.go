package stack

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

var tableNameChars = regexp.MustCompile(`^[A-Za-z0-9_.-]{3,255}$`)

// tableActiveTimeout bounds the wait for a new table to become ACTIVE.
const tableActiveTimeout = 2 * time.Minute

type tableSpec struct {
	in   *dynamodb.CreateTableInput
	ttl  *types.TimeToLiveSpecification
	pitr bool
}

func (u *upper) tableSpec(res *resource) (*tableSpec, error) {
	p, err := u.r.resolveProps(res)
	if err != nil {
		return nil, err
	}
	in := &dynamodb.CreateTableInput{}
	name, explicit, err := p.str("TableName")
	if err != nil {
		return nil, err
	}
	if !explicit {
		name = u.stack + "-" + res.id
	}
	if !tableNameChars.MatchString(name) {
		return nil, p.errorf("TableName", "table name %s: DynamoDB allows 3 to 255 letters, digits, '_', '-' and '.'", name)
	}
	in.TableName = aws.String(name)
	if in.KeySchema, err = keySchema(p, "KeySchema"); err != nil {
		return nil, err
	}
	if len(in.KeySchema) == 0 {
		return nil, p.errorf("KeySchema", "is required")
	}
	defs, _, err := p.objects("AttributeDefinitions")
	if err != nil {
		return nil, err
	}
	for _, d := range defs {
		n, _, err := d.str("AttributeName")
		if err != nil {
			return nil, err
		}
		typ, _, err := d.str("AttributeType")
		if err != nil {
			return nil, err
		}
		if err := d.rest(); err != nil {
			return nil, err
		}
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{
			AttributeName: aws.String(n), AttributeType: types.ScalarAttributeType(typ),
		})
	}
	billing, _, err := p.str("BillingMode")
	if err != nil {
		return nil, err
	}
	in.BillingMode = types.BillingMode(billing)
	if in.ProvisionedThroughput, err = throughput(p, "ProvisionedThroughput"); err != nil {
		return nil, err
	}
	gsis, _, err := p.objects("GlobalSecondaryIndexes")
	if err != nil {
		return nil, err
	}
	for _, g := range gsis {
		idx := types.GlobalSecondaryIndex{}
		n, _, err := g.str("IndexName")
		if err != nil {
			return nil, err
		}
		idx.IndexName = aws.String(n)
		if idx.KeySchema, err = keySchema(g, "KeySchema"); err != nil {
			return nil, err
		}
		if idx.Projection, err = projection(g); err != nil {
			return nil, err
		}
		if idx.ProvisionedThroughput, err = throughput(g, "ProvisionedThroughput"); err != nil {
			return nil, err
		}
		u.note(g.ignore("ContributorInsightsSpecification", "not emulated"))
		u.note(g.ignore("OnDemandThroughput", "throughput limits are not emulated"))
		u.note(g.ignore("WarmThroughput", "throughput is not emulated"))
		if err := g.rest(); err != nil {
			return nil, err
		}
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, idx)
	}
	lsis, _, err := p.objects("LocalSecondaryIndexes")
	if err != nil {
		return nil, err
	}
	for _, l := range lsis {
		idx := types.LocalSecondaryIndex{}
		n, _, err := l.str("IndexName")
		if err != nil {
			return nil, err
		}
		idx.IndexName = aws.String(n)
		if idx.KeySchema, err = keySchema(l, "KeySchema"); err != nil {
			return nil, err
		}
		if idx.Projection, err = projection(l); err != nil {
			return nil, err
		}
		if err := l.rest(); err != nil {
			return nil, err
		}
		in.LocalSecondaryIndexes = append(in.LocalSecondaryIndexes, idx)
	}
	if sse, ok, err := p.object("SSESpecification"); err != nil {
		return nil, err
	} else if ok {
		enabled, _, err := sse.boolean("SSEEnabled")
		if err != nil {
			return nil, err
		}
		typ, _, err := sse.str("SSEType")
		if err != nil {
			return nil, err
		}
		u.note(sse.ignore("KMSMasterKeyId", "KMS keys are not emulated"))
		if err := sse.rest(); err != nil {
			return nil, err
		}
		in.SSESpecification = &types.SSESpecification{Enabled: aws.Bool(enabled), SSEType: types.SSEType(typ)}
	}
	if st, ok, err := p.object("StreamSpecification"); err != nil {
		return nil, err
	} else if ok {
		view, _, err := st.str("StreamViewType")
		if err != nil {
			return nil, err
		}
		u.note(st.ignore("ResourcePolicy", "resource policies are not emulated"))
		if err := st.rest(); err != nil {
			return nil, err
		}
		in.StreamSpecification = &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewType(view)}
	}
	class, _, err := p.str("TableClass")
	if err != nil {
		return nil, err
	}
	in.TableClass = types.TableClass(class)
	tags, err := p.tags("Tags")
	if err != nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		in.Tags = append(in.Tags, types.Tag{Key: aws.String(k), Value: aws.String(tags[k])})
	}
	spec := &tableSpec{in: in}
	if ttl, ok, err := p.object("TimeToLiveSpecification"); err != nil {
		return nil, err
	} else if ok {
		attr, _, err := ttl.str("AttributeName")
		if err != nil {
			return nil, err
		}
		enabled, _, err := ttl.boolean("Enabled")
		if err != nil {
			return nil, err
		}
		if err := ttl.rest(); err != nil {
			return nil, err
		}
		spec.ttl = &types.TimeToLiveSpecification{AttributeName: aws.String(attr), Enabled: aws.Bool(enabled)}
	}
	if pitr, ok, err := p.object("PointInTimeRecoverySpecification"); err != nil {
		return nil, err
	} else if ok {
		if spec.pitr, _, err = pitr.boolean("PointInTimeRecoveryEnabled"); err != nil {
			return nil, err
		}
		u.note(pitr.ignore("RecoveryPeriodInDays", "backups are not emulated"))
		if err := pitr.rest(); err != nil {
			return nil, err
		}
	}
	// Deletion protection only gets in the way of throwaway local stacks.
	u.note(p.ignore("DeletionProtectionEnabled", "local stacks stay deletable"))
	u.note(p.ignore("ContributorInsightsSpecification", "not emulated"))
	u.note(p.ignore("KinesisStreamSpecification", "Kinesis is not created locally"))
	u.note(p.ignore("ResourcePolicy", "resource policies are not emulated"))
	u.note(p.ignore("OnDemandThroughput", "throughput limits are not emulated"))
	u.note(p.ignore("WarmThroughput", "throughput is not emulated"))
	return spec, p.rest()
}

func keySchema(p *props, key string) ([]types.KeySchemaElement, error) {
	elems, _, err := p.objects(key)
	if err != nil {
		return nil, err
	}
	var out []types.KeySchemaElement
	for _, e := range elems {
		n, _, err := e.str("AttributeName")
		if err != nil {
			return nil, err
		}
		kt, _, err := e.str("KeyType")
		if err != nil {
			return nil, err
		}
		if err := e.rest(); err != nil {
			return nil, err
		}
		out = append(out, types.KeySchemaElement{AttributeName: aws.String(n), KeyType: types.KeyType(kt)})
	}
	return out, nil
}

func projection(p *props) (*types.Projection, error) {
	pr, ok, err := p.object("Projection")
	if err != nil || !ok {
		return nil, err
	}
	typ, _, err := pr.str("ProjectionType")
	if err != nil {
		return nil, err
	}
	attrs, _, err := pr.strings("NonKeyAttributes")
	if err != nil {
		return nil, err
	}
	if err := pr.rest(); err != nil {
		return nil, err
	}
	return &types.Projection{ProjectionType: types.ProjectionType(typ), NonKeyAttributes: attrs}, nil
}

func throughput(p *props, key string) (*types.ProvisionedThroughput, error) {
	t, ok, err := p.object(key)
	if err != nil || !ok {
		return nil, err
	}
	rcu, _, err := t.integer("ReadCapacityUnits")
	if err != nil {
		return nil, err
	}
	wcu, _, err := t.integer("WriteCapacityUnits")
	if err != nil {
		return nil, err
	}
	if err := t.rest(); err != nil {
		return nil, err
	}
	return &types.ProvisionedThroughput{ReadCapacityUnits: aws.Int64(rcu), WriteCapacityUnits: aws.Int64(wcu)}, nil
}

// table creates the table of res, or finds it and checks it has the template's keys
// and indexes; then it converges TTL and, where the endpoint supports it, point-in-time
// recovery.
func (u *upper) table(ctx context.Context, res *resource) (*Resource, error) {
	spec, err := u.tableSpec(res)
	if err != nil {
		return nil, err
	}
	name := aws.ToString(spec.in.TableName)
	out := &Resource{LogicalID: res.id, Type: TypeTable, Name: name, Status: "created"}
	_, err = u.api.DynamoDB.CreateTable(ctx, spec.in)
	var inUse *types.ResourceInUseException
	switch {
	case errors.As(err, &inUse):
		out.Status = "exists"
	case err != nil:
		return nil, fmt.Errorf("create table %s: %w", name, err)
	}
	desc, err := u.waitActive(ctx, name)
	if err != nil {
		return nil, err
	}
	if out.Status == "exists" {
		if err := sameShape(spec.in, desc); err != nil {
			return nil, fmt.Errorf("%s: table %s exists but %w: delete it or use another stack name", res.where(""), name, err)
		}
	}
	out.ARN = aws.ToString(desc.TableArn)
	if out.ARN == "" {
		return nil, fmt.Errorf("table %s: the endpoint returned no TableArn", name)
	}
	if spec.ttl != nil {
		if err := u.timeToLive(ctx, name, spec.ttl); err != nil {
			return nil, err
		}
	}
	if spec.pitr {
		_, err := u.api.DynamoDB.UpdateContinuousBackups(ctx, &dynamodb.UpdateContinuousBackupsInput{
			TableName: aws.String(name),
			PointInTimeRecoverySpecification: &types.PointInTimeRecoverySpecification{
				PointInTimeRecoveryEnabled: aws.Bool(true),
			},
		})
		if err != nil {
			u.note(fmt.Sprintf("%s: point-in-time recovery not enabled, ignored locally: %v", res.id, err))
		}
	}
	return out, nil
}

func (u *upper) waitActive(ctx context.Context, name string) (*types.TableDescription, error) {
	ctx, cancel := context.WithTimeout(ctx, tableActiveTimeout)
	defer cancel()
	for {
		out, err := u.api.DynamoDB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return nil, fmt.Errorf("describe table %s: %w", name, err)
		}
		if out.Table != nil && out.Table.TableStatus == types.TableStatusActive {
			return out.Table, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("table %s did not become ACTIVE: %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// timeToLive sets the table's TTL as specified unless it is already so.
func (u *upper) timeToLive(ctx context.Context, name string, want *types.TimeToLiveSpecification) error {
	cur, err := u.api.DynamoDB.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
	if err != nil {
		return fmt.Errorf("table %s: describe TTL: %w", name, err)
	}
	on := false
	attr := ""
	if d := cur.TimeToLiveDescription; d != nil {
		on = d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling
		attr = aws.ToString(d.AttributeName)
	}
	switch wantOn := aws.ToBool(want.Enabled); {
	case wantOn && on && attr == aws.ToString(want.AttributeName), !wantOn && !on:
		return nil
	case !wantOn: // disabling names the attribute that is on
		want = &types.TimeToLiveSpecification{AttributeName: aws.String(attr), Enabled: aws.Bool(false)}
	}
	if _, err := u.api.DynamoDB.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{TableName: aws.String(name), TimeToLiveSpecification: want}); err != nil {
		return fmt.Errorf("table %s: set TTL on %s: %w", name, aws.ToString(want.AttributeName), err)
	}
	return nil
}

// sameShape reports how an existing table differs from the template in what cannot be
// changed in place without losing data or breaking queries: its keys and indexes.
func sameShape(in *dynamodb.CreateTableInput, desc *types.TableDescription) error {
	if !sameKeys(in.KeySchema, desc.KeySchema) {
		return fmt.Errorf("its key schema is %s, the template's %s", keysText(desc.KeySchema), keysText(in.KeySchema))
	}
	for _, want := range in.GlobalSecondaryIndexes {
		i := slices.IndexFunc(desc.GlobalSecondaryIndexes, func(g types.GlobalSecondaryIndexDescription) bool {
			return aws.ToString(g.IndexName) == aws.ToString(want.IndexName)
		})
		if i < 0 {
			return fmt.Errorf("it has no index %s", aws.ToString(want.IndexName))
		}
		if got := desc.GlobalSecondaryIndexes[i].KeySchema; !sameKeys(want.KeySchema, got) {
			return fmt.Errorf("its index %s has keys %s, the template's %s", aws.ToString(want.IndexName), keysText(got), keysText(want.KeySchema))
		}
	}
	return nil
}

func sameKeys(a, b []types.KeySchemaElement) bool {
	return slices.EqualFunc(a, b, func(x, y types.KeySchemaElement) bool {
		return aws.ToString(x.AttributeName) == aws.ToString(y.AttributeName) && x.KeyType == y.KeyType
	})
}

func keysText(ks []types.KeySchemaElement) string {
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = aws.ToString(k.AttributeName) + " " + string(k.KeyType)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
