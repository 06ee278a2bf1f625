package inventory_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/inventory"
)

func TestDecode(t *testing.T) {
	long := strings.Repeat("x", inventory.MaxIDBytes)
	tests := []struct {
		name string
		body string
		want inventory.Reservation
		// wantErr is a part of the error message (the field named); empty for valid bodies.
		wantErr string
	}{
		{name: "valid", body: `{"order_id":"o-1","sku":"sku-1","quantity":3}`,
			want: inventory.Reservation{OrderID: "o-1", SKU: "sku-1", Quantity: 3}},
		{name: "any field order and white space", body: " {\n \"quantity\" : 7,\t\"sku\":\"s\",\"order_id\":\"o\"}\n",
			want: inventory.Reservation{OrderID: "o", SKU: "s", Quantity: 7}},
		{name: "largest quantity", body: `{"order_id":"o","sku":"s","quantity":1000000}`,
			want: inventory.Reservation{OrderID: "o", SKU: "s", Quantity: 1_000_000}},
		{name: "printable unicode and escapes in ids", body: `{"order_id":"bestellung-\u00fc-€","sku":"Artikel 7/ü","quantity":1}`,
			want: inventory.Reservation{OrderID: "bestellung-ü-€", SKU: "Artikel 7/ü", Quantity: 1}},
		{name: "id of the maximum length", body: `{"order_id":"` + long + `","sku":"` + long + `","quantity":1}`,
			want: inventory.Reservation{OrderID: long, SKU: long, Quantity: 1}},
		{name: "journal prefix inside a sku", body: `{"order_id":"o","sku":"x-order#1","quantity":1}`,
			want: inventory.Reservation{OrderID: "o", SKU: "x-order#1", Quantity: 1}},

		{name: "not UTF-8", body: "{\"order_id\":\"o\xff\",\"sku\":\"s\",\"quantity\":1}", wantErr: "body is not valid UTF-8"},
		{name: "empty body", body: ``, wantErr: "body is not a JSON object"},
		{name: "array", body: `[{"order_id":"o"}]`, wantErr: "body is not a JSON object"},
		{name: "null", body: `null`, wantErr: "body is not a JSON object"},
		{name: "string", body: `"o"`, wantErr: "body is not a JSON object"},
		{name: "broken JSON", body: `{"order_id":"o",}`, wantErr: "body is not valid JSON"},
		{name: "truncated", body: `{"order_id":"o","sku":`, wantErr: "body is not valid JSON"},
		{name: "unterminated object", body: `{"order_id":"o","sku":"s","quantity":1`, wantErr: "body is not valid JSON"},
		{name: "second object after", body: `{"order_id":"o","sku":"s","quantity":1}{}`, wantErr: "data after the JSON object"},
		{name: "garbage after", body: `{"order_id":"o","sku":"s","quantity":1} x`, wantErr: "data after the JSON object"},
		{name: "unknown field", body: `{"order_id":"o","sku":"s","quantity":1,"unit_price":250}`, wantErr: `"unit_price": unknown field`},
		{name: "misspelt field", body: `{"order_id":"o","sku":"s","qty":1}`, wantErr: `"qty": unknown field`},
		{name: "long unknown field is cut", body: `{"` + strings.Repeat("f", 60) + `":1}`, wantErr: `"` + strings.Repeat("f", 40) + `...": unknown field`},
		{name: "duplicate field", body: `{"order_id":"o","sku":"s","quantity":1,"quantity":2}`, wantErr: "quantity: duplicate field"},
		{name: "duplicate order_id", body: `{"order_id":"o","order_id":"p","sku":"s","quantity":1}`, wantErr: "order_id: duplicate field"},
		{name: "order_id missing", body: `{"sku":"s","quantity":1}`, wantErr: "order_id: missing"},
		{name: "order_id empty", body: `{"order_id":"","sku":"s","quantity":1}`, wantErr: "order_id: must not be empty"},
		{name: "order_id number", body: `{"order_id":42,"sku":"s","quantity":1}`, wantErr: "order_id: must be a string"},
		{name: "order_id null", body: `{"order_id":null,"sku":"s","quantity":1}`, wantErr: "order_id: must be a string"},
		{name: "order_id too long", body: `{"order_id":"` + long + `y","sku":"s","quantity":1}`, wantErr: "order_id: longer than 128 bytes"},
		{name: "order_id control character", body: `{"order_id":"o\u0007","sku":"s","quantity":1}`, wantErr: "order_id: must be printable"},
		{name: "order_id lone surrogate", body: `{"order_id":"o\ud800","sku":"s","quantity":1}`, wantErr: "order_id: must be printable"},
		{name: "order_id trailing space", body: `{"order_id":"o ","sku":"s","quantity":1}`, wantErr: "order_id: must be printable"},
		{name: "sku missing", body: `{"order_id":"o","quantity":1}`, wantErr: "sku: missing"},
		{name: "sku empty", body: `{"order_id":"o","sku":"","quantity":1}`, wantErr: "sku: must not be empty"},
		{name: "sku array", body: `{"order_id":"o","sku":["s"],"quantity":1}`, wantErr: "sku: must be a string"},
		{name: "sku too long", body: `{"order_id":"o","sku":"` + long + `y","quantity":1}`, wantErr: "sku: longer than 128 bytes"},
		{name: "sku leading space", body: `{"order_id":"o","sku":" s","quantity":1}`, wantErr: "sku: must be printable"},
		{name: "sku journal prefix", body: `{"order_id":"o","sku":"order#o-1","quantity":1}`, wantErr: `sku: must not begin with "order#"`},
		{name: "quantity missing", body: `{"order_id":"o","sku":"s"}`, wantErr: "quantity: missing"},
		{name: "quantity zero", body: `{"order_id":"o","sku":"s","quantity":0}`, wantErr: "quantity: must be positive"},
		{name: "quantity negative", body: `{"order_id":"o","sku":"s","quantity":-3}`, wantErr: "quantity: must be positive"},
		{name: "quantity negative zero", body: `{"order_id":"o","sku":"s","quantity":-0}`, wantErr: "quantity: must be positive"},
		{name: "quantity fraction", body: `{"order_id":"o","sku":"s","quantity":2.5}`, wantErr: "quantity: must be an integer"},
		{name: "quantity whole float", body: `{"order_id":"o","sku":"s","quantity":2.0}`, wantErr: "quantity: must be an integer"},
		{name: "quantity exponent", body: `{"order_id":"o","sku":"s","quantity":1e1}`, wantErr: "quantity: must be an integer"},
		{name: "quantity string", body: `{"order_id":"o","sku":"s","quantity":"2"}`, wantErr: "quantity: must be a JSON integer"},
		{name: "quantity bool", body: `{"order_id":"o","sku":"s","quantity":true}`, wantErr: "quantity: must be a JSON integer"},
		{name: "quantity null", body: `{"order_id":"o","sku":"s","quantity":null}`, wantErr: "quantity: must be a JSON integer"},
		{name: "quantity over the limit", body: `{"order_id":"o","sku":"s","quantity":1000001}`, wantErr: "quantity: too large (limit 1000000)"},
		{name: "quantity over int64", body: `{"order_id":"o","sku":"s","quantity":99999999999999999999}`, wantErr: "quantity: too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := inventory.Decode([]byte(tt.body))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if got != tt.want {
					t.Fatalf("Decode = %+v, want %+v", got, tt.want)
				}
				return
			}
			if !errors.Is(err, inventory.ErrInvalidReservation) || !errors.Is(err, example.ErrInvalid) {
				t.Fatalf("Decode error = %v, want one wrapping ErrInvalidReservation and example.ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Decode error = %q, want it to contain %q", err, tt.wantErr)
			}
			if got != (inventory.Reservation{}) {
				t.Fatalf("Decode returned %+v with an error, want the zero Reservation", got)
			}
		})
	}
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
	full := `{"order_id":"ord-1","sku":"sku-1","quantity":1250}`
	want := inventory.ErrInvalidReservation.Error() + ": body is not valid JSON"
	for cut := 2; cut < len(full); cut++ {
		body := full[:cut]
		_, err := inventory.Decode([]byte(body))
		if !errors.Is(err, inventory.ErrInvalidReservation) || err.Error() != want {
			t.Errorf("Decode(%q) = %v, want %q", body, err, want)
		}
	}
}

func TestKey(t *testing.T) {
	if got := inventory.Key(inventory.Reservation{OrderID: "ord-7", SKU: "s", Quantity: 1}); got != "reservation:ord-7" {
		t.Fatalf("Key = %q, want reservation:ord-7", got)
	}
}
