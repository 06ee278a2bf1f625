package ledger_test

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
)

func TestDecode(t *testing.T) {
	long := strings.Repeat("x", ledger.MaxIDBytes)
	tests := []struct {
		name string
		body string
		want ledger.Payment
		// wantErr is a part of the error message (the field named); empty for valid bodies.
		wantErr string
	}{
		{name: "valid", body: `{"payment_id":"p-1","account_id":"acct-1","amount_cents":1250,"currency":"EUR"}`,
			want: ledger.Payment{PaymentID: "p-1", AccountID: "acct-1", AmountCents: 1250, Currency: "EUR"}},
		{name: "any field order and white space", body: " {\n \"currency\" : \"JPY\", \"amount_cents\":7,\t\"account_id\":\"a\",\"payment_id\":\"p\"}\n",
			want: ledger.Payment{PaymentID: "p", AccountID: "a", AmountCents: 7, Currency: "JPY"}},
		{name: "largest amount", body: `{"payment_id":"p","account_id":"a","amount_cents":1000000000000,"currency":"CHF"}`,
			want: ledger.Payment{PaymentID: "p", AccountID: "a", AmountCents: 1_000_000_000_000, Currency: "CHF"}},
		{name: "printable unicode and escapes in ids", body: `{"payment_id":"zahlung-\u00fc-€","account_id":"Konto 7","amount_cents":1,"currency":"GBP"}`,
			want: ledger.Payment{PaymentID: "zahlung-ü-€", AccountID: "Konto 7", AmountCents: 1, Currency: "GBP"}},
		{name: "id of the maximum length", body: `{"payment_id":"` + long + `","account_id":"a","amount_cents":1,"currency":"USD"}`,
			want: ledger.Payment{PaymentID: long, AccountID: "a", AmountCents: 1, Currency: "USD"}},

		{name: "not UTF-8", body: "{\"payment_id\":\"p\xff\",\"account_id\":\"a\",\"amount_cents\":1,\"currency\":\"EUR\"}", wantErr: "UTF-8"},
		{name: "empty body", body: ``, wantErr: "body is not a JSON object"},
		{name: "array", body: `[{"payment_id":"p"}]`, wantErr: "body is not a JSON object"},
		{name: "null", body: `null`, wantErr: "body is not a JSON object"},
		{name: "broken JSON", body: `{"payment_id":"p",}`, wantErr: "body is not valid JSON"},
		{name: "unterminated object", body: `{"payment_id":"p"`, wantErr: "body is not valid JSON"},
		{name: "second object after", body: `{"payment_id":"p","account_id":"a","amount_cents":1,"currency":"EUR"}{}`, wantErr: "data after the JSON object"},
		{name: "garbage after", body: `{"payment_id":"p","account_id":"a","amount_cents":1,"currency":"EUR"} x`, wantErr: "data after the JSON object"},
		{name: "unknown field", body: `{"payment_id":"p","account_id":"a","amount":1,"currency":"EUR"}`, wantErr: `"amount": unknown field`},
		{name: "duplicate field", body: `{"payment_id":"p","account_id":"a","amount_cents":1,"amount_cents":2,"currency":"EUR"}`, wantErr: "amount_cents: duplicate field"},
		{name: "payment_id missing", body: `{"account_id":"a","amount_cents":1,"currency":"EUR"}`, wantErr: "payment_id: missing"},
		{name: "payment_id empty", body: `{"payment_id":"","account_id":"a","amount_cents":1,"currency":"EUR"}`, wantErr: "payment_id: must not be empty"},
		{name: "payment_id number", body: `{"payment_id":42,"account_id":"a","amount_cents":1,"currency":"EUR"}`, wantErr: "payment_id: must be a string"},
		{name: "payment_id null", body: `{"payment_id":null,"account_id":"a","amount_cents":1,"currency":"EUR"}`, wantErr: "payment_id: must be a string"},
		{name: "payment_id too long", body: `{"payment_id":"` + long + `y","account_id":"a","amount_cents":1,"currency":"EUR"}`, wantErr: "payment_id: longer than 128 bytes"},
		{name: "payment_id control character", body: `{"payment_id":"p\u0007","account_id":"a","amount_cents":1,"currency":"EUR"}`, wantErr: "payment_id: must be printable"},
		{name: "payment_id lone surrogate", body: `{"payment_id":"p\ud800","account_id":"a","amount_cents":1,"currency":"EUR"}`, wantErr: "payment_id: must be printable"},
		{name: "account_id leading space", body: `{"payment_id":"p","account_id":" a","amount_cents":1,"currency":"EUR"}`, wantErr: "account_id: must be printable"},
		{name: "account_id missing", body: `{"payment_id":"p","amount_cents":1,"currency":"EUR"}`, wantErr: "account_id: missing"},
		{name: "amount fraction", body: `{"payment_id":"p","account_id":"a","amount_cents":12.5,"currency":"EUR"}`, wantErr: "amount_cents: must be an integer"},
		{name: "amount whole float", body: `{"payment_id":"p","account_id":"a","amount_cents":12.0,"currency":"EUR"}`, wantErr: "amount_cents: must be an integer"},
		{name: "amount exponent", body: `{"payment_id":"p","account_id":"a","amount_cents":1e3,"currency":"EUR"}`, wantErr: "amount_cents: must be an integer"},
		{name: "amount string", body: `{"payment_id":"p","account_id":"a","amount_cents":"12","currency":"EUR"}`, wantErr: "amount_cents: must be a JSON integer"},
		{name: "amount bool", body: `{"payment_id":"p","account_id":"a","amount_cents":true,"currency":"EUR"}`, wantErr: "amount_cents: must be a JSON integer"},
		{name: "amount negative", body: `{"payment_id":"p","account_id":"a","amount_cents":-5,"currency":"EUR"}`, wantErr: "amount_cents: must be positive"},
		{name: "amount negative zero", body: `{"payment_id":"p","account_id":"a","amount_cents":-0,"currency":"EUR"}`, wantErr: "amount_cents: must be positive"},
		{name: "amount zero", body: `{"payment_id":"p","account_id":"a","amount_cents":0,"currency":"EUR"}`, wantErr: "amount_cents: must be positive"},
		{name: "amount over the limit", body: `{"payment_id":"p","account_id":"a","amount_cents":1000000000001,"currency":"EUR"}`, wantErr: "amount_cents: too large"},
		{name: "amount over int64", body: `{"payment_id":"p","account_id":"a","amount_cents":99999999999999999999,"currency":"EUR"}`, wantErr: "amount_cents: too large"},
		{name: "amount missing", body: `{"payment_id":"p","account_id":"a","currency":"EUR"}`, wantErr: "amount_cents: missing"},
		{name: "currency lower case", body: `{"payment_id":"p","account_id":"a","amount_cents":1,"currency":"eur"}`, wantErr: "currency: must be one of EUR, USD, GBP, JPY, CHF"},
		{name: "currency unknown", body: `{"payment_id":"p","account_id":"a","amount_cents":1,"currency":"XYZ"}`, wantErr: "currency: must be one of"},
		{name: "currency number", body: `{"payment_id":"p","account_id":"a","amount_cents":1,"currency":978}`, wantErr: "currency: must be a string"},
		{name: "currency missing", body: `{"payment_id":"p","account_id":"a","amount_cents":1}`, wantErr: "currency: missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ledger.Decode([]byte(tt.body))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if got != tt.want {
					t.Fatalf("Decode = %+v, want %+v", got, tt.want)
				}
				return
			}
			if !errors.Is(err, ledger.ErrInvalidPayment) {
				t.Fatalf("Decode error = %v, want one wrapping ErrInvalidPayment", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Decode error = %q, want it to contain %q", err, tt.wantErr)
			}
			if got != (ledger.Payment{}) {
				t.Fatalf("Decode returned %+v with an error, want the zero Payment", got)
			}
		})
	}
}

func TestExpectedBalances(t *testing.T) {
	tests := []struct {
		name     string
		payments []ledger.Payment
		want     map[string]int64
	}{
		{name: "none", payments: nil, want: map[string]int64{}},
		{name: "sums per account", payments: []ledger.Payment{
			{PaymentID: "p1", AccountID: "a", AmountCents: 100},
			{PaymentID: "p2", AccountID: "b", AmountCents: 5},
			{PaymentID: "p3", AccountID: "a", AmountCents: 20},
		}, want: map[string]int64{"a": 120, "b": 5}},
		{name: "a repeated payment counts once", payments: []ledger.Payment{
			{PaymentID: "p1", AccountID: "a", AmountCents: 100},
			{PaymentID: "p1", AccountID: "a", AmountCents: 100},
			{PaymentID: "p2", AccountID: "a", AmountCents: 1},
			{PaymentID: "p1", AccountID: "a", AmountCents: 100},
		}, want: map[string]int64{"a": 101}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ledger.ExpectedBalances(tt.payments); !maps.Equal(got, tt.want) {
				t.Fatalf("ExpectedBalances = %v, want %v", got, tt.want)
			}
		})
	}
}
