// Package cost meters what requests cost under DynamoDB's, SQS's and Lambda's documented
// billing rules, from the requests themselves: an SDK middleware on a DynamoDB client
// reads each written item before and after the write (with a second, unmetered client)
// and charges write units by the larger size, rounded up to 1 KB, twice for an item
// written in a transaction, plus the writes of a global secondary index whose entry the
// write adds, removes or changes. It exists because moto's ReturnConsumedCapacity is not
// size-aware (PutItem reports 1 unit, GetItem 0.5, UpdateItem and TransactWriteItems
// nothing); the meter also sums what the emulator reported, for comparison.
package cost

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/idemgo/sqs-lambda-consumer/internal/itemsize"
)

// Index describes a global secondary index of a metered table.
type Index struct {
	Keys      []string // its key attributes (partition, sort)
	Projected []string // its non-key projected attributes
	All       bool     // every attribute is projected (ProjectionType ALL)
}

// Table describes a metered table.
type Table struct {
	Key     []string // the table's key attributes
	Indexes []Index
}

// Units are the units a set of requests consumed.
type Units struct {
	Write      float64 // write request units on tables
	IndexWrite float64 // write request units on global secondary indexes
	Read       float64 // read request units
	Reported   float64 // what the endpoint's ConsumedCapacity said, where it said anything
}

// Meter is the middleware's state; safe for concurrent use.
type Meter struct {
	peek   *dynamodb.Client
	tables map[string]Table
	mu     sync.Mutex
	units  Units
}

// Describe reads a table's key and global secondary indexes from DynamoDB
// (DescribeTable), for NewMeter.
func Describe(ctx context.Context, api *dynamodb.Client, name string) (Table, error) {
	out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err != nil {
		return Table{}, fmt.Errorf("cost: describe table %s: %w", name, err)
	}
	names := func(ks []types.KeySchemaElement) []string {
		out := make([]string, len(ks))
		for i, k := range ks {
			out[i] = aws.ToString(k.AttributeName)
		}
		return out
	}
	t := Table{Key: names(out.Table.KeySchema)}
	for _, g := range out.Table.GlobalSecondaryIndexes {
		ix := Index{Keys: names(g.KeySchema)}
		if g.Projection != nil {
			ix.All = g.Projection.ProjectionType == types.ProjectionTypeAll
			ix.Projected = g.Projection.NonKeyAttributes
		}
		t.Indexes = append(t.Indexes, ix)
	}
	return t, nil
}

// NewMeter meters requests to tables (by name); peek reads items before and after each
// write and must not carry the meter.
func NewMeter(peek *dynamodb.Client, tables map[string]Table) *Meter {
	return &Meter{peek: peek, tables: maps.Clone(tables)}
}

// Units returns the units metered so far.
func (m *Meter) Units() Units {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.units
}

// Reset sets the units to zero.
func (m *Meter) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.units = Units{}
}

// APIOption is the middleware to append to the metered client's Options.APIOptions.
func (m *Meter) APIOption(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("cost.Meter",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			writes, read := m.plan(in.Parameters)
			before := make([]map[string]types.AttributeValue, len(writes))
			for i, w := range writes {
				before[i] = m.get(ctx, w.table, w.key)
			}
			out, md, err := next.HandleInitialize(ctx, in)
			m.charge(ctx, writes, before, read, out.Result, err)
			return out, md, err
		}), middleware.After)
}

type write struct {
	table string
	key   map[string]types.AttributeValue
	txn   bool
}

type readReq struct {
	table      string
	key        map[string]types.AttributeValue
	consistent bool
}

// plan lists the items a request writes, or the item it reads, and asks for the
// consumed capacity.
func (m *Meter) plan(params any) ([]write, *readReq) {
	switch in := params.(type) {
	case *dynamodb.PutItemInput:
		in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
		return []write{{table: aws.ToString(in.TableName), key: m.keyOf(aws.ToString(in.TableName), in.Item)}}, nil
	case *dynamodb.UpdateItemInput:
		in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
		return []write{{table: aws.ToString(in.TableName), key: in.Key}}, nil
	case *dynamodb.DeleteItemInput:
		in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
		return []write{{table: aws.ToString(in.TableName), key: in.Key}}, nil
	case *dynamodb.TransactWriteItemsInput:
		in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
		var ws []write
		for _, it := range in.TransactItems {
			switch {
			case it.Put != nil:
				ws = append(ws, write{table: aws.ToString(it.Put.TableName), key: m.keyOf(aws.ToString(it.Put.TableName), it.Put.Item), txn: true})
			case it.Update != nil:
				ws = append(ws, write{table: aws.ToString(it.Update.TableName), key: it.Update.Key, txn: true})
			case it.Delete != nil:
				ws = append(ws, write{table: aws.ToString(it.Delete.TableName), key: it.Delete.Key, txn: true})
			case it.ConditionCheck != nil:
				// A condition check is charged as a transactional read of the item; not
				// used by the cases metered here.
			}
		}
		return ws, nil
	case *dynamodb.GetItemInput:
		in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
		return nil, &readReq{table: aws.ToString(in.TableName), key: in.Key, consistent: aws.ToBool(in.ConsistentRead)}
	}
	return nil, nil
}

func (m *Meter) keyOf(table string, item map[string]types.AttributeValue) map[string]types.AttributeValue {
	key := map[string]types.AttributeValue{}
	for _, k := range m.tables[table].Key {
		key[k] = item[k]
	}
	return key
}

func (m *Meter) get(ctx context.Context, table string, key map[string]types.AttributeValue) map[string]types.AttributeValue {
	out, err := m.peek.GetItem(context.WithoutCancel(ctx), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil
	}
	return out.Item
}

// charge adds the units of one request. A single write is charged whether or not its
// condition held (DynamoDB charges a failed conditional write). Writes cost a unit per
// KB, twice in a transaction: DynamoDB writes every item of a transaction twice, once to
// prepare it and once to commit it. A cancelled transaction is charged here as its
// prepare alone, one write per item, which is an assumption: AWS documents the two
// underlying writes but not the charge of a transaction it cancels. Eventually
// consistent reads cost half a unit per 4 KB.
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-capacity-handling
func (m *Meter) charge(ctx context.Context, writes []write, before []map[string]types.AttributeValue, read *readReq, result any, err error) {
	var u Units
	var cancelled *types.TransactionCanceledException
	isCancelled := errors.As(err, &cancelled)
	for i, w := range writes {
		after := m.get(ctx, w.table, w.key)
		size := max(itemsize.Of(before[i]), itemsize.Of(after))
		units := math.Ceil(float64(size) / 1024)
		if w.txn && !isCancelled {
			units *= 2
		}
		u.Write += max(units, 1)
		if isCancelled {
			continue // nothing written, no index changes
		}
		for _, ix := range m.tables[w.table].Indexes {
			u.IndexWrite += indexWrites(ix, before[i], after)
		}
	}
	if read != nil && err == nil {
		if out, ok := result.(*dynamodb.GetItemOutput); ok {
			units := math.Ceil(float64(max(itemsize.Of(out.Item), 1)) / 4096)
			if !read.consistent {
				units /= 2
			}
			u.Read += units
		}
	}
	u.Reported = reported(result)
	m.mu.Lock()
	m.units.Write += u.Write
	m.units.IndexWrite += u.IndexWrite
	m.units.Read += u.Read
	m.units.Reported += u.Reported
	m.mu.Unlock()
}

func reported(result any) float64 {
	var cc []types.ConsumedCapacity
	switch out := result.(type) {
	case *dynamodb.PutItemOutput:
		if out.ConsumedCapacity != nil {
			cc = append(cc, *out.ConsumedCapacity)
		}
	case *dynamodb.UpdateItemOutput:
		if out.ConsumedCapacity != nil {
			cc = append(cc, *out.ConsumedCapacity)
		}
	case *dynamodb.GetItemOutput:
		if out.ConsumedCapacity != nil {
			cc = append(cc, *out.ConsumedCapacity)
		}
	case *dynamodb.TransactWriteItemsOutput:
		cc = out.ConsumedCapacity
	}
	total := 0.0
	for _, c := range cc {
		total += aws.ToFloat64(c.CapacityUnits)
	}
	return total
}

// indexWrites is what a change of an item from before to after (nil: absent) costs the
// index: an entry added or removed is one write, an entry whose key changed is two (a
// delete and a put), an entry whose projected attributes changed is one. Index entries
// here are under 1 KB.
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html#GSI.Writes
func indexWrites(ix Index, before, after map[string]types.AttributeValue) float64 {
	in := func(item map[string]types.AttributeValue) bool {
		for _, k := range ix.Keys {
			if _, ok := item[k]; !ok {
				return false
			}
		}
		return item != nil
	}
	b, a := in(before), in(after)
	switch {
	case !b && !a:
		return 0
	case b != a:
		return 1
	case changed(ix.Keys, before, after):
		return 2
	case changed(ix.Projected, before, after), ix.All && changed(attrNames(before, after), before, after):
		return 1
	}
	return 0
}

// attrNames are the attribute names of the items, some more than once.
func attrNames(items ...map[string]types.AttributeValue) []string {
	var out []string
	for _, item := range items {
		for k := range item {
			out = append(out, k)
		}
	}
	return out
}

func changed(attrs []string, x, y map[string]types.AttributeValue) bool {
	for _, a := range attrs {
		if fmt.Sprint(x[a]) != fmt.Sprint(y[a]) {
			return true
		}
	}
	return false
}
