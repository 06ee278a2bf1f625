package envconf_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/envconf"
)

func reader(env map[string]string) *envconf.Reader {
	return envconf.New(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
}

func TestLayout(t *testing.T) {
	powertools := persistence.PowertoolsLayout("t")
	renamed := persistence.Layout{Table: "t"}
	renamed.Attributes.Status, renamed.Attributes.ExpiresAt = "state", "ttl"
	cases := []struct {
		name string
		env  map[string]string
		want persistence.Layout
	}{
		{"default", map[string]string{"IDEMPOTENCY_TABLE": "t"}, persistence.Layout{Table: "t"}},
		{"template defaults", map[string]string{
			"IDEMPOTENCY_TABLE": "t", "IDEMPOTENCY_ATTRIBUTE_NAMES": "default", "IDEMPOTENCY_PARTITION_KEY": "pk",
			"IDEMPOTENCY_SORT_KEY": "-", "IDEMPOTENCY_STATIC_PARTITION_KEY": "idempotency",
		}, persistence.Layout{Table: "t", PartitionKey: "pk"}},
		{"single table", map[string]string{
			"IDEMPOTENCY_TABLE": "t", "IDEMPOTENCY_PARTITION_KEY": "PK", "IDEMPOTENCY_SORT_KEY": "SK",
			"IDEMPOTENCY_STATIC_PARTITION_KEY": "IDEM", "IDEMPOTENCY_KEY_PREFIX": "idem#", "IDEMPOTENCY_INDEX": "GSI1",
		}, persistence.Layout{Table: "t", PartitionKey: "PK", SortKey: "SK", StaticPartitionKey: "IDEM", KeyPrefix: "idem#", InflightIndex: "GSI1"}},
		{"powertools", map[string]string{"IDEMPOTENCY_TABLE": "t", "IDEMPOTENCY_ATTRIBUTE_NAMES": "powertools"}, powertools},
		{"field names", map[string]string{"IDEMPOTENCY_TABLE": "t", "IDEMPOTENCY_ATTRIBUTE_NAMES": " Status=state , ExpiresAt=ttl"}, renamed},
		{"no index", map[string]string{"IDEMPOTENCY_TABLE": "t", "IDEMPOTENCY_INDEX": "-"}, persistence.Layout{Table: "t", InflightIndex: persistence.NoIndex}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := reader(c.env)
			got := r.Layout()
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestLayoutErrors(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"no table", map[string]string{}, []string{"IDEMPOTENCY_TABLE is not set"}},
		{"unknown preset", map[string]string{"IDEMPOTENCY_TABLE": "t", "IDEMPOTENCY_ATTRIBUTE_NAMES": "dynamo"}, []string{`"dynamo" is neither powertools nor Field=name`}},
		{"unknown field", map[string]string{"IDEMPOTENCY_TABLE": "t", "IDEMPOTENCY_ATTRIBUTE_NAMES": "Colour=red"}, []string{`no record attribute "Colour"`, "ExpiresAt"}},
		{"two attributes one name", map[string]string{"IDEMPOTENCY_TABLE": "t", "IDEMPOTENCY_ATTRIBUTE_NAMES": "Status=x,ExpiresAt=x"}, []string{"x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := reader(c.env)
			r.Layout()
			err := r.Err()
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestKeyRule: KEY_SOURCE names where the key comes from, and field needs KEY_FIELD.
func TestKeyRule(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		want    idem.KeyRule
		wantErr string
	}{
		{map[string]string{}, idem.KeyRule{}, ""},
		{map[string]string{"KEY_FIELD": "id"}, idem.KeyRule{Field: "id"}, ""},
		{map[string]string{"KEY_SOURCE": "message", "KEY_FIELD": "id"}, idem.KeyRule{Field: "id"}, ""},
		{map[string]string{"KEY_SOURCE": "field", "KEY_FIELD": "id"}, idem.KeyRule{Source: idem.KeyFromField, Field: "id"}, ""},
		{map[string]string{"KEY_SOURCE": "field"}, idem.KeyRule{Source: idem.KeyFromField}, "KEY_SOURCE=field needs KEY_FIELD"},
		{map[string]string{"KEY_SOURCE": "body"}, idem.KeyRule{}, `KEY_SOURCE="body" is not one of message, field`},
	} {
		e := envconf.New(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
		got := e.KeyRule()
		err := e.Err()
		if got != tc.want || (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%v: %+v, %v; want %+v and an error with %q", tc.env, got, err, tc.want, tc.wantErr)
		}
	}
}
