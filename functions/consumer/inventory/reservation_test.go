package inventory_test

import (
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/inventory"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

func TestDecode(t *testing.T) {
	long := strings.Repeat("x", inventory.MaxIDBytes)
	tests := []exampletest.DecodeCase[inventory.Reservation]{
		{Name: "valid", Body: `{"order_id":"o-1","sku":"sku-1","quantity":3}`,
			Want: inventory.Reservation{OrderID: "o-1", SKU: "sku-1", Quantity: 3}},
		{Name: "any field order and white space", Body: " {\n \"quantity\" : 7,\t\"sku\":\"s\",\"order_id\":\"o\"}\n",
			Want: inventory.Reservation{OrderID: "o", SKU: "s", Quantity: 7}},
		{Name: "largest quantity", Body: `{"order_id":"o","sku":"s","quantity":1000000}`,
			Want: inventory.Reservation{OrderID: "o", SKU: "s", Quantity: 1_000_000}},
		{Name: "printable unicode and escapes in ids", Body: `{"order_id":"bestellung-\u00fc-€","sku":"Artikel 7/ü","quantity":1}`,
			Want: inventory.Reservation{OrderID: "bestellung-ü-€", SKU: "Artikel 7/ü", Quantity: 1}},
		{Name: "id of the maximum length", Body: `{"order_id":"` + long + `","sku":"` + long + `","quantity":1}`,
			Want: inventory.Reservation{OrderID: long, SKU: long, Quantity: 1}},
		{Name: "journal prefix inside a sku", Body: `{"order_id":"o","sku":"x-order#1","quantity":1}`,
			Want: inventory.Reservation{OrderID: "o", SKU: "x-order#1", Quantity: 1}},

		{Name: "not UTF-8", Body: "{\"order_id\":\"o\xff\",\"sku\":\"s\",\"quantity\":1}", WantErr: "body is not valid UTF-8"},
		{Name: "empty body", Body: ``, WantErr: "body is not a JSON object"},
		{Name: "array", Body: `[{"order_id":"o"}]`, WantErr: "body is not a JSON object"},
		{Name: "null", Body: `null`, WantErr: "body is not a JSON object"},
		{Name: "string", Body: `"o"`, WantErr: "body is not a JSON object"},
		{Name: "broken JSON", Body: `{"order_id":"o",}`, WantErr: "body is not valid JSON"},
		{Name: "truncated", Body: `{"order_id":"o","sku":`, WantErr: "body is not valid JSON"},
		{Name: "unterminated object", Body: `{"order_id":"o","sku":"s","quantity":1`, WantErr: "body is not valid JSON"},
		{Name: "second object after", Body: `{"order_id":"o","sku":"s","quantity":1}{}`, WantErr: "data after the JSON object"},
		{Name: "garbage after", Body: `{"order_id":"o","sku":"s","quantity":1} x`, WantErr: "data after the JSON object"},
		{Name: "unknown field", Body: `{"order_id":"o","sku":"s","quantity":1,"unit_price":250}`, WantErr: `"unit_price": unknown field`},
		{Name: "misspelt field", Body: `{"order_id":"o","sku":"s","qty":1}`, WantErr: `"qty": unknown field`},
		{Name: "long unknown field is cut", Body: `{"` + strings.Repeat("f", 60) + `":1}`, WantErr: `"` + strings.Repeat("f", 40) + `...": unknown field`},
		{Name: "duplicate field", Body: `{"order_id":"o","sku":"s","quantity":1,"quantity":2}`, WantErr: "quantity: duplicate field"},
		{Name: "duplicate order_id", Body: `{"order_id":"o","order_id":"p","sku":"s","quantity":1}`, WantErr: "order_id: duplicate field"},
		{Name: "order_id missing", Body: `{"sku":"s","quantity":1}`, WantErr: "order_id: missing"},
		{Name: "order_id empty", Body: `{"order_id":"","sku":"s","quantity":1}`, WantErr: "order_id: must not be empty"},
		{Name: "order_id number", Body: `{"order_id":42,"sku":"s","quantity":1}`, WantErr: "order_id: must be a string"},
		{Name: "order_id null", Body: `{"order_id":null,"sku":"s","quantity":1}`, WantErr: "order_id: must be a string"},
		{Name: "order_id too long", Body: `{"order_id":"` + long + `y","sku":"s","quantity":1}`, WantErr: "order_id: longer than 128 bytes"},
		{Name: "order_id control character", Body: `{"order_id":"o\u0007","sku":"s","quantity":1}`, WantErr: "order_id: must be printable"},
		{Name: "order_id lone surrogate", Body: `{"order_id":"o\ud800","sku":"s","quantity":1}`, WantErr: "order_id: must be printable"},
		{Name: "order_id trailing space", Body: `{"order_id":"o ","sku":"s","quantity":1}`, WantErr: "order_id: must be printable"},
		{Name: "sku missing", Body: `{"order_id":"o","quantity":1}`, WantErr: "sku: missing"},
		{Name: "sku empty", Body: `{"order_id":"o","sku":"","quantity":1}`, WantErr: "sku: must not be empty"},
		{Name: "sku array", Body: `{"order_id":"o","sku":["s"],"quantity":1}`, WantErr: "sku: must be a string"},
		{Name: "sku too long", Body: `{"order_id":"o","sku":"` + long + `y","quantity":1}`, WantErr: "sku: longer than 128 bytes"},
		{Name: "sku leading space", Body: `{"order_id":"o","sku":" s","quantity":1}`, WantErr: "sku: must be printable"},
		{Name: "sku journal prefix", Body: `{"order_id":"o","sku":"order#o-1","quantity":1}`, WantErr: `sku: must not begin with "order#"`},
		{Name: "quantity missing", Body: `{"order_id":"o","sku":"s"}`, WantErr: "quantity: missing"},
		{Name: "quantity zero", Body: `{"order_id":"o","sku":"s","quantity":0}`, WantErr: "quantity: must be positive"},
		{Name: "quantity negative", Body: `{"order_id":"o","sku":"s","quantity":-3}`, WantErr: "quantity: must be positive"},
		{Name: "quantity negative zero", Body: `{"order_id":"o","sku":"s","quantity":-0}`, WantErr: "quantity: must be positive"},
		{Name: "quantity fraction", Body: `{"order_id":"o","sku":"s","quantity":2.5}`, WantErr: "quantity: must be an integer"},
		{Name: "quantity whole float", Body: `{"order_id":"o","sku":"s","quantity":2.0}`, WantErr: "quantity: must be an integer"},
		{Name: "quantity exponent", Body: `{"order_id":"o","sku":"s","quantity":1e1}`, WantErr: "quantity: must be an integer"},
		{Name: "quantity string", Body: `{"order_id":"o","sku":"s","quantity":"2"}`, WantErr: "quantity: must be a JSON integer"},
		{Name: "quantity bool", Body: `{"order_id":"o","sku":"s","quantity":true}`, WantErr: "quantity: must be a JSON integer"},
		{Name: "quantity null", Body: `{"order_id":"o","sku":"s","quantity":null}`, WantErr: "quantity: must be a JSON integer"},
		{Name: "quantity over the limit", Body: `{"order_id":"o","sku":"s","quantity":1000001}`, WantErr: "quantity: too large (limit 1000000)"},
		{Name: "quantity over int64", Body: `{"order_id":"o","sku":"s","quantity":99999999999999999999}`, WantErr: "quantity: too large"},
	}
	exampletest.CheckDecode(t, inventory.Decode, inventory.ErrInvalidReservation, tests)
}

// TestDecodeDoesNotEchoValues: an error names the field, never the value that was
// refused (it ends up in logs and on the dead-letter queue).
func TestDecodeDoesNotEchoValues(t *testing.T) {
	const secret = "SECRET-VALUE"
	for _, body := range []string{
		`{"order_id":"` + secret + "\\u0007" + `","sku":"s","quantity":1}`,
		`{"order_id":"o","sku":" ` + secret + `","quantity":1}`,
		`{"order_id":"o","sku":"order#` + secret + `","quantity":1}`,
		`{"order_id":"o","sku":"s","quantity":"` + secret + `"}`,
		`{"order_id":"o","sku":"s","quantity":1,"note":"` + secret + `"}`,
		`{"order_id":"` + secret + `","sku":"s","quantity":0}`,
	} {
		_, err := inventory.Decode([]byte(body))
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("Decode(%s) = %v, want an error without the value", body, err)
		}
	}
}

// TestDecodeTruncatedBody: a body cut off anywhere, inside a value included, is
// reported as not valid JSON, without naming the field where the cut happened.
func TestDecodeTruncatedBody(t *testing.T) {
	exampletest.CheckTruncated(t, inventory.Decode, inventory.ErrInvalidReservation, `{"order_id":"ord-1","sku":"sku-1","quantity":1250}`)
}

func TestKey(t *testing.T) {
	if got := inventory.Key(inventory.Reservation{OrderID: "ord-7", SKU: "s", Quantity: 1}); got != "reservation:ord-7" {
		t.Fatalf("Key = %q, want reservation:ord-7", got)
	}
}
