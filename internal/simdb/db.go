// Package simdb is an in-memory DynamoDB for the deterministic simulator
// (internal/sim): tables with a hash and an optional range key, global secondary
// indexes (sparse, projected as declared), conditional writes, all-or-nothing
// transactions with per-item cancellation reasons, and the expression subset this
// repository writes. It implements the SDK client's methods with their signatures, so
// persistence.DynamoStore runs on it unchanged.
//
// A DB serializes every request (one at a time, as DynamoDB does per item), and holds
// no clock of its own: TTL is the caller's (the simulator deletes expired items when it
// chooses, as DynamoDB does within days of expiry). idem's contract tests run
// DynamoStore on a DB beside moto, so the two must agree on everything idem relies on.
//
// It lives beside internal/sim, not under it, because idem's tests need it: it stays
// when a team deletes the simulator with the rest of the development tooling
// (docs/tooling.md).
package simdb

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/idemgo/sqs-lambda-consumer/internal/itemsize"
)

// Item is a DynamoDB item.
type Item = map[string]types.AttributeValue

// Write is one item changed by an applied request, in the order DynamoDB applied them.
type Write struct {
	Seq      int64 // increases by one per applied request (a transaction's items share it)
	Table    string
	Old, New Item // nil when the item did not exist, or was deleted
}

// DB is the in-memory DynamoDB. The zero value is not usable; call New.
type DB struct {
	mu     sync.Mutex
	tables map[string]*table
	seq    int64
	// OnWrite, when set, is called for every item an applied request changes, while
	// the DB is locked (it must not call the DB).
	OnWrite func(Write)
}

type table struct {
	name        string
	hash, rng   string
	attrTypes   map[string]types.ScalarAttributeType
	gsis        []gsi
	ttlAttr     string
	items       map[string]Item
	ttlEnabled  bool
	description *types.TableDescription
}

type gsi struct {
	name      string
	hash, rng string
	proj      types.ProjectionType
	include   []string
}

// New returns an empty DB.
func New() *DB { return &DB{tables: map[string]*table{}} }

func validation(format string, args ...any) error {
	return &smithy.GenericAPIError{Code: "ValidationException", Message: fmt.Sprintf(format, args...), Fault: smithy.FaultClient}
}

func notFound(name string) error {
	return &types.ResourceNotFoundException{Message: aws.String("Requested resource not found: Table: " + name + " not found")}
}

// CreateTable creates a table from the SDK's input: key schema, attribute types and
// global secondary indexes.
func (db *DB) CreateTable(_ context.Context, in *dynamodb.CreateTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	name := aws.ToString(in.TableName)
	if name == "" {
		return nil, validation("TableName is required")
	}
	if _, ok := db.tables[name]; ok {
		return nil, &types.ResourceInUseException{Message: aws.String("Table already exists: " + name)}
	}
	t := &table{name: name, attrTypes: map[string]types.ScalarAttributeType{}, items: map[string]Item{}}
	for _, d := range in.AttributeDefinitions {
		t.attrTypes[aws.ToString(d.AttributeName)] = d.AttributeType
	}
	var err error
	if t.hash, t.rng, err = keySchema(in.KeySchema, t.attrTypes); err != nil {
		return nil, err
	}
	for _, g := range in.GlobalSecondaryIndexes {
		h, r, err := keySchema(g.KeySchema, t.attrTypes)
		if err != nil {
			return nil, err
		}
		x := gsi{name: aws.ToString(g.IndexName), hash: h, rng: r, proj: types.ProjectionTypeAll}
		if g.Projection != nil {
			x.proj, x.include = g.Projection.ProjectionType, g.Projection.NonKeyAttributes
		}
		t.gsis = append(t.gsis, x)
	}
	t.description = &types.TableDescription{
		TableName: aws.String(name), TableStatus: types.TableStatusActive, KeySchema: in.KeySchema,
		AttributeDefinitions: in.AttributeDefinitions,
	}
	db.tables[name] = t
	return &dynamodb.CreateTableOutput{TableDescription: t.description}, nil
}

func keySchema(ks []types.KeySchemaElement, defs map[string]types.ScalarAttributeType) (hash, rng string, err error) {
	for _, k := range ks {
		n := aws.ToString(k.AttributeName)
		if _, ok := defs[n]; !ok {
			return "", "", validation("key attribute %s has no attribute definition", n)
		}
		switch k.KeyType {
		case types.KeyTypeHash:
			hash = n
		case types.KeyTypeRange:
			rng = n
		}
	}
	if hash == "" {
		return "", "", validation("a key schema needs a HASH key")
	}
	return hash, rng, nil
}

// DescribeTable reports a table as ACTIVE (tables are created at once).
func (db *DB) DescribeTable(_ context.Context, in *dynamodb.DescribeTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	t, ok := db.tables[aws.ToString(in.TableName)]
	if !ok {
		return nil, notFound(aws.ToString(in.TableName))
	}
	return &dynamodb.DescribeTableOutput{Table: t.description}, nil
}

// UpdateTimeToLive records the TTL attribute (the DB never deletes by itself); enabling
// it twice is a ValidationException, as DynamoDB answers.
func (db *DB) UpdateTimeToLive(_ context.Context, in *dynamodb.UpdateTimeToLiveInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	t, ok := db.tables[aws.ToString(in.TableName)]
	if !ok {
		return nil, notFound(aws.ToString(in.TableName))
	}
	spec := in.TimeToLiveSpecification
	if spec == nil {
		return nil, validation("TimeToLiveSpecification is required")
	}
	if aws.ToBool(spec.Enabled) && t.ttlEnabled {
		return nil, validation("TimeToLive is already enabled")
	}
	t.ttlEnabled, t.ttlAttr = aws.ToBool(spec.Enabled), aws.ToString(spec.AttributeName)
	return &dynamodb.UpdateTimeToLiveOutput{TimeToLiveSpecification: spec}, nil
}

// TTLAttribute returns the table's TTL attribute ("" when TTL is off).
func (db *DB) TTLAttribute(name string) string {
	db.mu.Lock()
	defer db.mu.Unlock()
	if t, ok := db.tables[name]; ok && t.ttlEnabled {
		return t.ttlAttr
	}
	return ""
}

func (db *DB) table(name string) (*table, error) {
	t, ok := db.tables[name]
	if !ok {
		return nil, notFound(name)
	}
	return t, nil
}

// keyAttrs names the table's key attributes: the hash key, then the range key if any.
func (t *table) keyAttrs() []string {
	if t.rng == "" {
		return []string{t.hash}
	}
	return []string{t.hash, t.rng}
}

// keyOf returns the primary key string of an item or key map, checking its types.
func (t *table) keyOf(item Item, exact bool) (string, error) {
	attrs := t.keyAttrs()
	var k string
	for i, a := range attrs {
		v, ok := item[a]
		if !ok {
			return "", validation("One of the required keys was not given a value: %s", a)
		}
		if err := t.checkType(a, v); err != nil {
			return "", err
		}
		s, err := keyString(v)
		if err != nil {
			return "", validation("%s: %v", a, err)
		}
		if i > 0 {
			k += "\x00"
		}
		k += s
	}
	if exact && len(item) != len(attrs) {
		return "", validation("The provided key element does not match the schema")
	}
	return k, nil
}

func (t *table) checkType(attr string, v types.AttributeValue) error {
	want, ok := t.attrTypes[attr]
	if !ok {
		return nil
	}
	if typeOf(v) != string(want) {
		return validation("One or more parameter values were invalid: Type mismatch for key %s expected: %s actual: %s", attr, want, typeOf(v))
	}
	if s, ok := v.(*types.AttributeValueMemberS); ok && s.Value == "" {
		return validation("One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain an empty string value. Key: %s", attr)
	}
	return nil
}

// checkItem validates an item about to be stored: key types (index keys included) and
// the 400 KB item size limit.
func (t *table) checkItem(item Item) error {
	for _, g := range t.gsis {
		for _, a := range []string{g.hash, g.rng} {
			if v, ok := item[a]; a != "" && ok {
				if err := t.checkType(a, v); err != nil {
					return err
				}
			}
		}
	}
	if itemsize.Of(item) > itemsize.Max {
		return validation("Item size has exceeded the maximum allowed size")
	}
	return nil
}

// request is one item action, of a single request or of a transaction, resolved.
type request struct {
	t        *table
	key      string
	kind     string // put, update, delete, check
	put      Item
	upd      *update
	cond     *cond
	env      *exprEnv
	allOld   bool
	keyItem  Item
	newItem  Item
	oldItem  Item
	condFail bool
}

// itemAction is one item action as the SDK's inputs of every kind spell it.
type itemAction struct {
	kind              string // put, update, delete, check
	table             *string
	key, put          Item
	update, condition *string
	names             map[string]string
	values            map[string]types.AttributeValue
	onFail            types.ReturnValuesOnConditionCheckFailure
}

func (db *DB) prepare(a itemAction) (*request, error) {
	t, err := db.table(aws.ToString(a.table))
	if err != nil {
		return nil, err
	}
	r := &request{t: t, kind: a.kind, env: &exprEnv{names: a.names, values: a.values}}
	r.allOld = a.onFail == types.ReturnValuesOnConditionCheckFailureAllOld
	r.env.markRefs(a.update, a.condition)
	if a.kind == "put" {
		if err := t.checkItem(a.put); err != nil {
			return nil, err
		}
		r.put = a.put
		if r.key, err = t.keyOf(a.put, false); err != nil {
			return nil, err
		}
	} else {
		if r.key, err = t.keyOf(a.key, true); err != nil {
			return nil, err
		}
		r.keyItem = a.key
	}
	if a.update != nil {
		if r.upd, err = parseUpdateCached(*a.update); err != nil {
			return nil, validation("Invalid UpdateExpression: %v", err)
		}
	} else if a.kind == "update" {
		return nil, validation("UpdateExpression is required")
	}
	if a.condition != nil {
		if r.cond, err = parseCond(*a.condition); err != nil {
			return nil, validation("Invalid ConditionExpression: %v", err)
		}
	}
	return r, nil
}

// evaluate checks the condition and computes the new item, without applying.
func (r *request) evaluate() error {
	old := r.t.items[r.key]
	r.oldItem = old
	if r.cond != nil {
		ok, err := r.cond.eval(r.env, old)
		if err != nil {
			return validation("Invalid ConditionExpression: %v", err)
		}
		r.condFail = !ok
	}
	switch r.kind {
	case "put":
		r.newItem = r.put
	case "update":
		base := old
		if base == nil {
			base = Item{}
			for k, v := range r.keyItem {
				base[k] = v
			}
		}
		n, err := r.upd.apply(r.env, base)
		if err != nil {
			return validation("Invalid UpdateExpression: %v", err)
		}
		for _, k := range r.t.keyAttrs() {
			if !equal(n[k], base[k]) {
				return validation("One or more parameter values were invalid: Cannot update attribute %s. This attribute is part of the key", k)
			}
		}
		if err := r.t.checkItem(n); err != nil {
			return err
		}
		r.newItem = n
	case "delete":
		r.newItem = nil
	case "check":
		r.newItem = old
	}
	if err := r.env.unused(); err != nil {
		return validation("%v", err)
	}
	return nil
}

func (db *DB) apply(reqs []*request) {
	db.seq++
	for _, r := range reqs {
		if r.kind == "check" {
			continue
		}
		if r.newItem == nil {
			delete(r.t.items, r.key)
		} else {
			r.t.items[r.key] = r.newItem
		}
		if db.OnWrite != nil {
			db.OnWrite(Write{Seq: db.seq, Table: r.t.name, Old: r.oldItem, New: r.newItem})
		}
	}
}

func ccf(r *request) error {
	e := &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed")}
	if r.allOld && r.oldItem != nil {
		e.Item = r.oldItem
	}
	return e
}

// write applies one item action alone (PutItem, UpdateItem, DeleteItem) and returns
// the item as rv asks: ALL_OLD (as it was), ALL_NEW (as it is), or nothing. PutItem and
// DeleteItem recognize NONE and ALL_OLD only
// (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_PutItem.html#DDB-PutItem-request-ReturnValues);
// a value outside the subset is refused before anything is written.
func (db *DB) write(a itemAction, rv types.ReturnValue) (Item, error) {
	switch rv {
	case types.ReturnValueAllOld, types.ReturnValueNone, "":
	case types.ReturnValueAllNew:
		if a.kind != "update" {
			return nil, validation("ReturnValues %s is only for UpdateItem", rv)
		}
	default:
		return nil, validation("ReturnValues %s is outside the simulator's subset", rv)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	r, err := db.prepare(a)
	if err != nil {
		return nil, err
	}
	if err := r.evaluate(); err != nil {
		return nil, err
	}
	if r.condFail {
		return nil, ccf(r)
	}
	if r.kind != "delete" || r.oldItem != nil {
		db.apply([]*request{r})
	}
	switch rv {
	case types.ReturnValueAllNew:
		return r.newItem, nil
	case types.ReturnValueAllOld:
		return r.oldItem, nil
	}
	return nil, nil
}

// PutItem is a conditional put.
func (db *DB) PutItem(_ context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	old, err := db.write(itemAction{kind: "put", table: in.TableName, put: in.Item, condition: in.ConditionExpression,
		names: in.ExpressionAttributeNames, values: in.ExpressionAttributeValues, onFail: in.ReturnValuesOnConditionCheckFailure}, in.ReturnValues)
	if err != nil {
		return nil, err
	}
	return &dynamodb.PutItemOutput{Attributes: old}, nil
}

// UpdateItem is a conditional update (an upsert, as DynamoDB's).
func (db *DB) UpdateItem(_ context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	item, err := db.write(itemAction{kind: "update", table: in.TableName, key: in.Key, update: in.UpdateExpression, condition: in.ConditionExpression,
		names: in.ExpressionAttributeNames, values: in.ExpressionAttributeValues, onFail: in.ReturnValuesOnConditionCheckFailure}, in.ReturnValues)
	if err != nil {
		return nil, err
	}
	return &dynamodb.UpdateItemOutput{Attributes: item}, nil
}

// DeleteItem is a conditional delete.
func (db *DB) DeleteItem(_ context.Context, in *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	old, err := db.write(itemAction{kind: "delete", table: in.TableName, key: in.Key, condition: in.ConditionExpression,
		names: in.ExpressionAttributeNames, values: in.ExpressionAttributeValues, onFail: in.ReturnValuesOnConditionCheckFailure}, in.ReturnValues)
	if err != nil {
		return nil, err
	}
	return &dynamodb.DeleteItemOutput{Attributes: old}, nil
}

// GetItem reads one item (every read is consistent here).
func (db *DB) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	t, err := db.table(aws.ToString(in.TableName))
	if err != nil {
		return nil, err
	}
	k, err := t.keyOf(in.Key, true)
	if err != nil {
		return nil, err
	}
	return &dynamodb.GetItemOutput{Item: t.items[k]}, nil
}

// TransactWriteItems applies its items all together or not at all. When a condition
// fails, the cancellation reasons name it (ConditionalCheckFailed, with the old item when
// asked) and give "None" for the others, as DynamoDB does.
func (db *DB) TransactWriteItems(_ context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if len(in.TransactItems) == 0 || len(in.TransactItems) > 100 {
		return nil, validation("Member must have length less than or equal to 100 and at least 1")
	}
	reqs := make([]*request, len(in.TransactItems))
	seen := map[string]bool{}
	for i, ti := range in.TransactItems {
		var a itemAction
		switch {
		case ti.Put != nil:
			p := ti.Put
			a = itemAction{kind: "put", table: p.TableName, put: p.Item, condition: p.ConditionExpression,
				names: p.ExpressionAttributeNames, values: p.ExpressionAttributeValues, onFail: p.ReturnValuesOnConditionCheckFailure}
		case ti.Update != nil:
			u := ti.Update
			a = itemAction{kind: "update", table: u.TableName, key: u.Key, update: u.UpdateExpression, condition: u.ConditionExpression,
				names: u.ExpressionAttributeNames, values: u.ExpressionAttributeValues, onFail: u.ReturnValuesOnConditionCheckFailure}
		case ti.Delete != nil:
			d := ti.Delete
			a = itemAction{kind: "delete", table: d.TableName, key: d.Key, condition: d.ConditionExpression,
				names: d.ExpressionAttributeNames, values: d.ExpressionAttributeValues, onFail: d.ReturnValuesOnConditionCheckFailure}
		case ti.ConditionCheck != nil:
			c := ti.ConditionCheck
			if c.ConditionExpression == nil {
				return nil, validation("ConditionCheck needs a ConditionExpression")
			}
			a = itemAction{kind: "check", table: c.TableName, key: c.Key, condition: c.ConditionExpression,
				names: c.ExpressionAttributeNames, values: c.ExpressionAttributeValues, onFail: c.ReturnValuesOnConditionCheckFailure}
		default:
			return nil, validation("a TransactWriteItem needs one action")
		}
		r, err := db.prepare(a)
		if err != nil {
			return nil, err
		}
		id := r.t.name + "\x00" + r.key
		if seen[id] {
			return nil, validation("Transaction request cannot include multiple operations on one item")
		}
		seen[id] = true
		reqs[i] = r
	}
	failed := false
	for _, r := range reqs {
		if err := r.evaluate(); err != nil {
			return nil, err
		}
		failed = failed || r.condFail
	}
	if failed {
		reasons := make([]types.CancellationReason, len(reqs))
		var codes []string
		for i, r := range reqs {
			if r.condFail {
				reasons[i] = types.CancellationReason{Code: aws.String("ConditionalCheckFailed"), Message: aws.String("The conditional request failed")}
				if r.allOld && r.oldItem != nil {
					reasons[i].Item = r.oldItem
				}
				codes = append(codes, "ConditionalCheckFailed")
			} else {
				reasons[i] = types.CancellationReason{Code: aws.String("None")}
				codes = append(codes, "None")
			}
		}
		return nil, &types.TransactionCanceledException{
			Message:             aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons [" + strings.Join(codes, ", ") + "]"),
			CancellationReasons: reasons,
		}
	}
	db.apply(reqs)
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

// Query reads a table or an index by key condition, in range key order, a page at a time.
func (db *DB) Query(_ context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	t, err := db.table(aws.ToString(in.TableName))
	if err != nil {
		return nil, err
	}
	hash, rng := t.hash, t.rng
	var idx *gsi
	if n := aws.ToString(in.IndexName); n != "" {
		for i := range t.gsis {
			if t.gsis[i].name == n {
				idx = &t.gsis[i]
			}
		}
		if idx == nil {
			return nil, validation("The table does not have the specified index: %s", n)
		}
		if aws.ToBool(in.ConsistentRead) {
			return nil, validation("Consistent reads are not supported on global secondary indexes")
		}
		hash, rng = idx.hash, idx.rng
	}
	if in.KeyConditionExpression == nil {
		return nil, validation("KeyConditionExpression is required")
	}
	kc, err := parseCond(*in.KeyConditionExpression)
	if err != nil {
		return nil, validation("Invalid KeyConditionExpression: %v", err)
	}
	env := &exprEnv{names: in.ExpressionAttributeNames, values: in.ExpressionAttributeValues}
	env.markRefs(in.KeyConditionExpression, in.FilterExpression)
	var filter *cond
	if in.FilterExpression != nil {
		if filter, err = parseCond(*in.FilterExpression); err != nil {
			return nil, validation("Invalid FilterExpression: %v", err)
		}
	}
	var matches []Item
	for _, item := range t.items {
		if _, ok := item[hash]; !ok {
			continue // sparse index
		}
		if rng != "" {
			if _, ok := item[rng]; !ok {
				continue
			}
		}
		ok, err := kc.eval(env, item)
		if err != nil {
			return nil, validation("Invalid KeyConditionExpression: %v", err)
		}
		if ok {
			matches = append(matches, item)
		}
	}
	// Range key order; items with equal index keys in table key order (DynamoDB does not
	// say, but some order must hold for pages to continue).
	sort.Slice(matches, func(i, j int) bool {
		if rng != "" {
			if c := cmpAttr(matches[i][rng], matches[j][rng]); c != 0 {
				return c < 0
			}
		}
		ki, _ := t.keyOf(matches[i], false)
		kj, _ := t.keyOf(matches[j], false)
		return ki < kj
	})
	if in.ScanIndexForward != nil && !*in.ScanIndexForward {
		for i, j := 0, len(matches)-1; i < j; i, j = i+1, j-1 {
			matches[i], matches[j] = matches[j], matches[i]
		}
	}
	if len(in.ExclusiveStartKey) > 0 {
		start, err := t.keyOf(in.ExclusiveStartKey, false)
		if err != nil {
			return nil, err
		}
		for i, m := range matches {
			if k, _ := t.keyOf(m, false); k == start {
				matches = matches[i+1:]
				break
			}
		}
	}
	out := &dynamodb.QueryOutput{}
	limit := int(aws.ToInt32(in.Limit))
	for i, m := range matches {
		if limit > 0 && i == limit {
			out.LastEvaluatedKey = t.keys(idx, matches[i-1])
			break
		}
		out.ScannedCount++
		if filter != nil {
			ok, err := filter.eval(env, m)
			if err != nil {
				return nil, validation("Invalid FilterExpression: %v", err)
			}
			if !ok {
				continue
			}
		}
		out.Items = append(out.Items, t.project(idx, m))
		out.Count++
	}
	if err := env.unused(); err != nil {
		return nil, validation("%v", err)
	}
	return out, nil
}

// keys returns an item's table keys and, with idx, the index's keys.
func (t *table) keys(idx *gsi, item Item) Item {
	names := t.keyAttrs()
	if idx != nil {
		names = append(names, idx.hash, idx.rng)
	}
	out := Item{}
	for _, k := range names {
		if v, ok := item[k]; k != "" && ok {
			out[k] = v
		}
	}
	return out
}

// project returns what an index holds of an item.
func (t *table) project(idx *gsi, item Item) Item {
	if idx == nil || idx.proj == types.ProjectionTypeAll {
		return item
	}
	out := t.keys(idx, item)
	if idx.proj == types.ProjectionTypeInclude {
		for _, k := range idx.include {
			if v, ok := item[k]; ok {
				out[k] = v
			}
		}
	}
	return out
}

func cmpAttr(a, b types.AttributeValue) int {
	switch {
	case compare(a, "<", b):
		return -1
	case compare(a, ">", b):
		return 1
	}
	return 0
}

// Scan returns every item of a table (one page: the simulator's tables are small).
func (db *DB) Scan(_ context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	t, err := db.table(aws.ToString(in.TableName))
	if err != nil {
		return nil, err
	}
	if in.FilterExpression != nil || in.IndexName != nil {
		return nil, validation("Scan filters and indexes are outside the simulator's subset")
	}
	keys := make([]string, 0, len(t.items))
	for k := range t.items {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := &dynamodb.ScanOutput{}
	for _, k := range keys {
		out.Items = append(out.Items, t.items[k])
	}
	out.Count = int32(len(out.Items))
	out.ScannedCount = out.Count
	return out, nil
}

// Items returns a table's items in primary key order, for the simulator's oracle.
func (db *DB) Items(name string) ([]Item, error) {
	out, err := db.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(name)})
	if err != nil {
		return nil, err
	}
	return out.Items, nil
}

// ErrNoTable is returned by Delete for a table that does not exist.
var ErrNoTable = errors.New("simdb: no such table")

// Delete removes the item with the primary key of key (TTL's deletion), reporting
// whether there was one.
func (db *DB) Delete(name string, key Item) (bool, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	t, ok := db.tables[name]
	if !ok {
		return false, ErrNoTable
	}
	k, err := t.keyOf(key, false)
	if err != nil {
		return false, err
	}
	old, ok := t.items[k]
	if !ok {
		return false, nil
	}
	db.apply([]*request{{t: t, key: k, kind: "delete", oldItem: old}})
	return true, nil
}

// Key returns the primary key attributes of an item of table name.
func (db *DB) Key(name string, item Item) Item {
	db.mu.Lock()
	defer db.mu.Unlock()
	t, ok := db.tables[name]
	if !ok {
		return nil
	}
	return t.keys(nil, item)
}
