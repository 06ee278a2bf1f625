package idem_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// TestLayouts: a layout is checked when the store is made, and every problem is named.
func TestLayouts(t *testing.T) {
	api := struct{ persistence.DynamoDBAPI }{}
	for _, tc := range []struct {
		name   string
		layout persistence.Layout
		errs   []string // each must be in the error; none: valid
	}{
		{"default", persistence.Layout{Table: "t"}, nil},
		{"powertools", persistence.PowertoolsLayout("t"), nil},
		{"single table", persistence.Layout{Table: "t", PartitionKey: "PK", SortKey: "SK", StaticPartitionKey: "IDEM", KeyPrefix: "record#"}, nil},
		{"no index", persistence.Layout{Table: "t", InflightIndex: persistence.NoIndex}, nil},
		{"no table", persistence.Layout{}, []string{"Table is empty"}},
		{"static key without a sort key", persistence.Layout{Table: "t", StaticPartitionKey: "IDEM"}, []string{`StaticPartitionKey "IDEM" needs a SortKey`}},
		{"a name twice", persistence.Layout{Table: "t", Attributes: persistence.Attributes{Status: "state", Error: "state"}}, []string{`Attributes.Status and Attributes.Error are both "state"`}},
		{"a NUL in the key prefix", persistence.Layout{Table: "t", KeyPrefix: "a\x00"}, []string{"KeyPrefix holds a NUL byte"}},
		{"a bad index name", persistence.Layout{Table: "t", InflightIndex: "in flight"}, []string{`InflightIndex "in flight" is not an index name`}},
		{"an attribute named as the sort key", persistence.Layout{Table: "t", PartitionKey: "PK", SortKey: "SK", Attributes: persistence.Attributes{Status: "SK"}}, []string{`SortKey and Attributes.Status are both "SK"`}},
		{"an attribute named as the key", persistence.Layout{Table: "t", PartitionKey: "id", Attributes: persistence.Attributes{Owner: "id"}}, []string{`PartitionKey and Attributes.Owner are both "id"`}},
		{"two problems at once", persistence.Layout{PartitionKey: "a b"}, []string{"Table is empty", `PartitionKey "a b" is not an attribute name`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := persistence.NewDynamoStoreLayout(api, tc.layout)
			if len(tc.errs) == 0 {
				if err != nil {
					t.Fatalf("valid layout refused: %v", err)
				}
				if _, err := persistence.TableInputFor(tc.layout); err != nil {
					t.Fatalf("TableInputFor: %v", err)
				}
				return
			}
			if !errors.Is(err, persistence.ErrLayout) {
				t.Fatalf("error %v, want ErrLayout", err)
			}
			// The table's definition and its creation are refused for the same reasons.
			if in, terr := persistence.TableInputFor(tc.layout); !errors.Is(terr, persistence.ErrLayout) || in != nil {
				t.Errorf("TableInputFor: %v, %v; want ErrLayout and no input", in, terr)
			}
			if cerr := persistence.CreateTableFor(context.Background(), nil, tc.layout); !errors.Is(cerr, persistence.ErrLayout) {
				t.Errorf("CreateTableFor: %v, want ErrLayout before any request", cerr)
			}
			if tc.layout.Table == "" {
				if _, err := persistence.NewDynamoStore(api, ""); !errors.Is(err, persistence.ErrLayout) || !strings.Contains(err.Error(), "Table is empty") {
					t.Errorf("NewDynamoStore with no table: %v, want the layout's ErrLayout", err)
				}
			}
			for _, want := range tc.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
	if _, err := persistence.NewDynamoStoreLayout(nil, persistence.Layout{Table: "t"}); err == nil {
		t.Error("a store without a DynamoDB client was made")
	}
	in := persistence.TableInput("t")
	if len(in.GlobalSecondaryIndexes) != 1 || *in.KeySchema[0].AttributeName != "pk" {
		t.Fatalf("TableInput: %+v", in)
	}
	if in, _ := persistence.TableInputFor(persistence.Layout{Table: "t", InflightIndex: persistence.NoIndex}); len(in.GlobalSecondaryIndexes) != 0 {
		t.Fatalf("a layout without the index got one: %+v", in.GlobalSecondaryIndexes)
	}
}

// TestSetAttribute: a record attribute is renamed by its Attributes field name; a name
// that is no field is refused with the list of those that are.
func TestSetAttribute(t *testing.T) {
	var a persistence.Attributes
	if err := a.SetAttribute("ExpiresAt", "ttl"); err != nil || a.ExpiresAt != "ttl" {
		t.Fatalf("SetAttribute(ExpiresAt): %v, ExpiresAt = %q", err, a.ExpiresAt)
	}
	if err := a.SetAttribute("Status", "state"); err != nil || a.Status != "state" || a.ExpiresAt != "ttl" {
		t.Fatalf("SetAttribute(Status): %v, %+v", err, a)
	}
	err := a.SetAttribute("Expiry", "x")
	if !errors.Is(err, persistence.ErrLayout) || !strings.Contains(err.Error(), `"Expiry"`) || !strings.Contains(err.Error(), "ExpiresAt") {
		t.Fatalf("SetAttribute(Expiry): %v, want ErrLayout naming it and the fields", err)
	}
}
