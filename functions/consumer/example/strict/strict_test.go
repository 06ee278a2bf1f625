package strict_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example/strict"
)

var errBad = errors.New("bad")

func TestDecoder(t *testing.T) {
	d := strict.Decoder{Fields: []string{"id", "n"}, Invalid: func(msg string) error { return errors.Join(errBad, errors.New(msg)) }}
	decode := func(body string) (string, int64, error) {
		var id string
		var n int64
		err := d.Object([]byte(body), func(name string, raw json.RawMessage) (err error) {
			switch name {
			case "id":
				id, err = d.ID(name, raw, 8)
			case "n":
				n, err = d.PositiveInt(name, raw, 100, "a count")
			}
			return err
		})
		return id, n, err
	}
	if id, n, err := decode(`{"n":7,"id":"a-1"}`); err != nil || id != "a-1" || n != 7 {
		t.Fatalf("valid body: %q %d %v", id, n, err)
	}
	for body, want := range map[string]string{
		"\xff":                                "body is not valid UTF-8",
		`[1]`:                                 "body is not a JSON object",
		`{"id":"a"`:                           "body is not valid JSON",
		`{"id":"a","id":"b","n":1}`:           "id: duplicate field",
		`{"id":"a","n":1,"x":2}`:              `"x": unknown field`,
		`{"n":1}`:                             "id: missing",
		`{"id":"a","n":1} {}`:                 "data after the JSON object",
		`{"id":"","n":1}`:                     "id: must not be empty",
		`{"id":"123456789","n":1}`:            "id: longer than 8 bytes",
		`{"id":"a\u0007","n":1}`:              "id: must be printable",
		`{"id":7,"n":1}`:                      "id: must be a string",
		`{"id":"a","n":1.5}`:                  "n: must be a count, without fraction or exponent",
		`{"id":"a","n":"1"}`:                  "n: must be a JSON integer",
		`{"id":"a","n":-1}`:                   "n: must be positive",
		`{"id":"a","n":0}`:                    "n: must be positive",
		`{"id":"a","n":101}`:                  "n: too large (limit 100)",
		`{"id":"a","n":99999999999999999999}`: "n: too large (limit 100)",
	} {
		_, _, err := decode(body)
		if !errors.Is(err, errBad) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error made by Invalid containing %q", body, err, want)
		}
	}
}
