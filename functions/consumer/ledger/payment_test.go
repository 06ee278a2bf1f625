package ledger_test

import (
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

func TestDecode(t *testing.T) {
	long := strings.Repeat("x", ledger.MaxIDBytes)
	tests := []exampletest.DecodeCase[ledger.Payment]{
		{Name: "valid", Body: `{"payment_id":"p-1","account_id":"acct-1","amount_cents":1250,"currency":"EUR"}`,
			Want: ledger.Payment{PaymentID: "p-1", AccountID: "acct-1", AmountCents: 1250, Currency: "EUR"}},
		{Name: "any field order and white space", Body: " {\n \"currency\" : \"JPY\", \"amount_cents\":7,\t\"account_id\":\"a\",\"payment_id\":\"p\"}\n",
			Want: ledger.Payment{PaymentID: "p", AccountID: "a", AmountCents: 7, Currency: "JPY"}},
		{Name: "largest amount", Body: `{"payment_id":"p","account_id":"a","amount_cents":1000000000000,"currency":"CHF"}`,
			Want: ledger.Payment{PaymentID: "p", AccountID: "a", AmountCents: 1_000_000_000_000, Currency: "CHF"}},
		{Name: "printable unicode and escapes in ids", Body: `{"payment_id":"zahlung-\u00fc-€","account_id":"Konto 7","amount_cents":1,"currency":"GBP"}`,
			Want: ledger.Payment{PaymentID: "zahlung-ü-€", AccountID: "Konto 7", AmountCents: 1, Currency: "GBP"}},
		{Name: "id of the maximum length", Body: `{"payment_id":"` + long + `","account_id":"a","amount_cents":1,"currency":"USD"}`,
			Want: ledger.Payment{PaymentID: long, AccountID: "a", AmountCents: 1, Currency: "USD"}},

		{Name: "not UTF-8", Body: "{\"payment_id\":\"p\xff\",\"account_id\":\"a\",\"amount_cents\":1,\"currency\":\"EUR\"}", WantErr: "UTF-8"},
		{Name: "empty body", Body: ``, WantErr: "body is not a JSON object"},
		{Name: "array", Body: `[{"payment_id":"p"}]`, WantErr: "body is not a JSON object"},
		{Name: "null", Body: `null`, WantErr: "body is not a JSON object"},
		{Name: "broken JSON", Body: `{"payment_id":"p",}`, WantErr: "body is not valid JSON"},
		{Name: "unterminated object", Body: `{"payment_id":"p"`, WantErr: "body is not valid JSON"},
		{Name: "second object after", Body: `{"payment_id":"p","account_id":"a","amount_cents":1,"currency":"EUR"}{}`, WantErr: "data after the JSON object"},
		{Name: "garbage after", Body: `{"payment_id":"p","account_id":"a","amount_cents":1,"currency":"EUR"} x`, WantErr: "data after the JSON object"},
		{Name: "unknown field", Body: `{"payment_id":"p","account_id":"a","amount":1,"currency":"EUR"}`, WantErr: `"amount": unknown field`},
		{Name: "duplicate field", Body: `{"payment_id":"p","account_id":"a","amount_cents":1,"amount_cents":2,"currency":"EUR"}`, WantErr: "amount_cents: duplicate field"},
		{Name: "payment_id missing", Body: `{"account_id":"a","amount_cents":1,"currency":"EUR"}`, WantErr: "payment_id: missing"},
		{Name: "payment_id empty", Body: `{"payment_id":"","account_id":"a","amount_cents":1,"currency":"EUR"}`, WantErr: "payment_id: must not be empty"},
		{Name: "payment_id number", Body: `{"payment_id":42,"account_id":"a","amount_cents":1,"currency":"EUR"}`, WantErr: "payment_id: must be a string"},
		{Name: "payment_id null", Body: `{"payment_id":null,"account_id":"a","amount_cents":1,"currency":"EUR"}`, WantErr: "payment_id: must be a string"},
		{Name: "payment_id too long", Body: `{"payment_id":"` + long + `y","account_id":"a","amount_cents":1,"currency":"EUR"}`, WantErr: "payment_id: longer than 128 bytes"},
		{Name: "payment_id control character", Body: `{"payment_id":"p\u0007","account_id":"a","amount_cents":1,"currency":"EUR"}`, WantErr: "payment_id: must be printable"},
		{Name: "payment_id lone surrogate", Body: `{"payment_id":"p\ud800","account_id":"a","amount_cents":1,"currency":"EUR"}`, WantErr: "payment_id: must be printable"},
		{Name: "account_id leading space", Body: `{"payment_id":"p","account_id":" a","amount_cents":1,"currency":"EUR"}`, WantErr: "account_id: must be printable"},
		{Name: "account_id missing", Body: `{"payment_id":"p","amount_cents":1,"currency":"EUR"}`, WantErr: "account_id: missing"},
		{Name: "amount fraction", Body: `{"payment_id":"p","account_id":"a","amount_cents":12.5,"currency":"EUR"}`, WantErr: "amount_cents: must be an integer"},
		{Name: "amount whole float", Body: `{"payment_id":"p","account_id":"a","amount_cents":12.0,"currency":"EUR"}`, WantErr: "amount_cents: must be an integer"},
		{Name: "amount exponent", Body: `{"payment_id":"p","account_id":"a","amount_cents":1e3,"currency":"EUR"}`, WantErr: "amount_cents: must be an integer"},
		{Name: "amount string", Body: `{"payment_id":"p","account_id":"a","amount_cents":"12","currency":"EUR"}`, WantErr: "amount_cents: must be a JSON integer"},
		{Name: "amount bool", Body: `{"payment_id":"p","account_id":"a","amount_cents":true,"currency":"EUR"}`, WantErr: "amount_cents: must be a JSON integer"},
		{Name: "amount negative", Body: `{"payment_id":"p","account_id":"a","amount_cents":-5,"currency":"EUR"}`, WantErr: "amount_cents: must be positive"},
		{Name: "amount negative zero", Body: `{"payment_id":"p","account_id":"a","amount_cents":-0,"currency":"EUR"}`, WantErr: "amount_cents: must be positive"},
		{Name: "amount zero", Body: `{"payment_id":"p","account_id":"a","amount_cents":0,"currency":"EUR"}`, WantErr: "amount_cents: must be positive"},
		{Name: "amount over the limit", Body: `{"payment_id":"p","account_id":"a","amount_cents":1000000000001,"currency":"EUR"}`, WantErr: "amount_cents: too large"},
		{Name: "amount over int64", Body: `{"payment_id":"p","account_id":"a","amount_cents":99999999999999999999,"currency":"EUR"}`, WantErr: "amount_cents: too large"},
		{Name: "amount missing", Body: `{"payment_id":"p","account_id":"a","currency":"EUR"}`, WantErr: "amount_cents: missing"},
		{Name: "currency lower case", Body: `{"payment_id":"p","account_id":"a","amount_cents":1,"currency":"eur"}`, WantErr: "currency: must be one of EUR, USD, GBP, JPY, CHF"},
		{Name: "currency unknown", Body: `{"payment_id":"p","account_id":"a","amount_cents":1,"currency":"XYZ"}`, WantErr: "currency: must be one of"},
		{Name: "currency number", Body: `{"payment_id":"p","account_id":"a","amount_cents":1,"currency":978}`, WantErr: "currency: must be a string"},
		{Name: "currency missing", Body: `{"payment_id":"p","account_id":"a","amount_cents":1}`, WantErr: "currency: missing"},
	}
	exampletest.CheckDecode(t, ledger.Decode, ledger.ErrInvalidPayment, tests)
}
