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
	name, explicit := p.str("TableName")
	if !explicit {
		name = u.stack + "-" + res.id
	}
	if !tableNameChars.MatchString(name) {
		p.fail("TableName", "table name %s: DynamoDB allows 3 to 255 letters, digits, '_', '-' and '.'", name)
	}
	in.TableName = aws.String(name)
	if in.KeySchema = keySchema(p, "KeySchema"); len(in.KeySchema) == 0 {
		p.fail("KeySchema", "is required")
	}
	for _, d := range p.objects("AttributeDefinitions") {
		n, _ := d.str("AttributeName")
		typ, _ := d.str("AttributeType")
		d.rest()
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{
			AttributeName: aws.String(n), AttributeType: types.ScalarAttributeType(typ),
		})
	}
	billing, _ := p.str("BillingMode")
	in.BillingMode = types.BillingMode(billing)
	in.ProvisionedThroughput = throughput(p, "ProvisionedThroughput")
	for _, g := range p.objects("GlobalSecondaryIndexes") {
		n, _ := g.str("IndexName")
		idx := types.GlobalSecondaryIndex{IndexName: aws.String(n), KeySchema: keySchema(g, "KeySchema"), Projection: projection(g),
			ProvisionedThroughput: throughput(g, "ProvisionedThroughput")}
		u.note(g.ignore("ContributorInsightsSpecification", "not emulated"))
		u.note(g.ignore("OnDemandThroughput", "throughput limits are not emulated"))
		u.note(g.ignore("WarmThroughput", "throughput is not emulated"))
		g.rest()
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, idx)
	}
	for _, l := range p.objects("LocalSecondaryIndexes") {
		n, _ := l.str("IndexName")
		idx := types.LocalSecondaryIndex{IndexName: aws.String(n), KeySchema: keySchema(l, "KeySchema"), Projection: projection(l)}
		l.rest()
		in.LocalSecondaryIndexes = append(in.LocalSecondaryIndexes, idx)
	}
	if sse, ok := p.object("SSESpecification"); ok {
		enabled, _ := sse.boolean("SSEEnabled")
		typ, _ := sse.str("SSEType")
		u.note(sse.ignore("KMSMasterKeyId", "KMS keys are not emulated"))
		sse.rest()
		in.SSESpecification = &types.SSESpecification{Enabled: aws.Bool(enabled), SSEType: types.SSEType(typ)}
	}
	if st, ok := p.object("StreamSpecification"); ok {
		view, _ := st.str("StreamViewType")
		u.note(st.ignore("ResourcePolicy", "resource policies are not emulated"))
		st.rest()
		in.StreamSpecification = &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewType(view)}
	}
	class, _ := p.str("TableClass")
	in.TableClass = types.TableClass(class)
	tags := p.tags("Tags")
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		in.Tags = append(in.Tags, types.Tag{Key: aws.String(k), Value: aws.String(tags[k])})
	}
	spec := &tableSpec{in: in}
	if ttl, ok := p.object("TimeToLiveSpecification"); ok {
		attr, _ := ttl.str("AttributeName")
		enabled, _ := ttl.boolean("Enabled")
		ttl.rest()
		spec.ttl = &types.TimeToLiveSpecification{AttributeName: aws.String(attr), Enabled: aws.Bool(enabled)}
	}
	if pitr, ok := p.object("PointInTimeRecoverySpecification"); ok {
		spec.pitr, _ = pitr.boolean("PointInTimeRecoveryEnabled")
		u.note(pitr.ignore("RecoveryPeriodInDays", "backups are not emulated"))
		pitr.rest()
	}
	// Deletion protection only gets in the way of throwaway local stacks.
	u.note(p.ignore("DeletionProtectionEnabled", "local stacks stay deletable"))
	u.note(p.ignore("ContributorInsightsSpecification", "not emulated"))
	u.note(p.ignore("KinesisStreamSpecification", "Kinesis is not created locally"))
	u.note(p.ignore("ResourcePolicy", "resource policies are not emulated"))
	u.note(p.ignore("OnDemandThroughput", "throughput limits are not emulated"))
	u.note(p.ignore("WarmThroughput", "throughput is not emulated"))
	if err := p.done(); err != nil {
		return nil, err
	}
	return spec, nil
}

func keySchema(p *props, key string) []types.KeySchemaElement {
	var out []types.KeySchemaElement
	for _, e := range p.objects(key) {
		n, _ := e.str("AttributeName")
		kt, _ := e.str("KeyType")
		e.rest()
		out = append(out, types.KeySchemaElement{AttributeName: aws.String(n), KeyType: types.KeyType(kt)})
	}
	return out
}

func projection(p *props) *types.Projection {
	pr, ok := p.object("Projection")
	if !ok {
		return nil
	}
	typ, _ := pr.str("ProjectionType")
	attrs := pr.strings("NonKeyAttributes")
	pr.rest()
	return &types.Projection{ProjectionType: types.ProjectionType(typ), NonKeyAttributes: attrs}
}

func throughput(p *props, key string) *types.ProvisionedThroughput {
	t, ok := p.object(key)
	if !ok {
		return nil
	}
	rcu, _ := t.integer("ReadCapacityUnits")
	wcu, _ := t.integer("WriteCapacityUnits")
	t.rest()
	return &types.ProvisionedThroughput{ReadCapacityUnits: aws.Int64(rcu), WriteCapacityUnits: aws.Int64(wcu)}
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
