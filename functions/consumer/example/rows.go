package example

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ScanAPI is the part of the DynamoDB client Table uses; *dynamodb.Client and DynamoDB
// satisfy it.
type ScanAPI interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// Table reads a whole table of rows R (a strongly consistent scan of every page) by
// their id, the string attribute keyAttr, leaving out the journal entries: the items
// whose id begins with entryPrefix. Each row's numbers are read as fields names them (an
// absent one reads as 0; one that is not an int64 is an error naming it), then, when
// more is not nil, the rest of the row. what names a row in errors ("sku s-1: reserved
// is not a number"). It is for the tools and the tests (Checker.Read), not for
// production traffic.
func Table[R any](ctx context.Context, api ScanAPI, table, keyAttr, entryPrefix, what string,
	fields func(*R) map[string]*int64, more func(*R, map[string]types.AttributeValue) error,
) (map[string]R, error) {
	rows := map[string]R{}
	pages := dynamodb.NewScanPaginator(api, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", table, err)
		}
		for _, item := range out.Items {
			id, ok := item[keyAttr].(*types.AttributeValueMemberS)
			if !ok {
				return nil, fmt.Errorf("scan %s: item without a string %s", table, keyAttr)
			}
			if strings.HasPrefix(id.Value, entryPrefix) {
				continue // a journal entry
			}
			var r R
			err := numbers(item, fields(&r))
			if err == nil && more != nil {
				err = more(&r, item)
			}
			if err != nil {
				return nil, fmt.Errorf("scan %s: %s %s: %w", table, what, id.Value, err)
			}
			rows[id.Value] = r
		}
	}
	return rows, nil
}

// numbers reads the numeric attributes of item named in fields into their destinations.
// An absent attribute leaves its destination as it is; one that is not a number, or
// not an int64, is an error naming it.
func numbers(item map[string]types.AttributeValue, fields map[string]*int64) error {
	for name, dst := range fields {
		if item[name] == nil {
			continue
		}
		v, ok := item[name].(*types.AttributeValueMemberN)
		if !ok {
			return fmt.Errorf("%s is not a number", name)
		}
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		*dst = n
	}
	return nil
}

// ReadTable is Checker.Read of a table of rows: the table in the variable tableVar,
// read by scan (every row by its id); each row's numbers (fields names them by
// attribute, as Table reads them) as "<id> <name>", and as the applied messages the
// sum of the numbers named count.
func ReadTable[R any](ctx context.Context, db DynamoDB, env Lookup, tableVar string,
	scan func(context.Context, ScanAPI, string) (map[string]R, error), fields func(*R) map[string]*int64, count string,
) (Outcome, error) {
	table, err := env.Need(tableVar)
	if err != nil {
		return Outcome{}, err
	}
	rows, err := scan(ctx, db, table)
	if err != nil {
		return Outcome{}, err
	}
	out := Outcome{State: State{}}
	for id, r := range rows {
		numbers := fields(&r)
		for name, n := range numbers {
			out.State[id+" "+name] = *n
		}
		out.Applied += int(*numbers[count])
	}
	return out, nil
}
