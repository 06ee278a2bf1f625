package idem_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemgo/sqs-lambda-consumer/idem"
)

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func strAttr(dataType, v string) events.SQSMessageAttribute {
	return events.SQSMessageAttribute{DataType: dataType, StringValue: &v}
}

func TestMessageKey(t *testing.T) {
	fifo := map[string]string{"MessageDeduplicationId": "dedup-1", "MessageGroupId": "g"}
	tests := []struct {
		name    string
		msg     events.SQSMessage
		field   string
		want    string
		missing bool   // errors.Is(err, ErrMissingKey)
		errHas  string // the error must say this
	}{
		{
			name: "attribute",
			msg:  events.SQSMessage{MessageAttributes: map[string]events.SQSMessageAttribute{idem.KeyAttribute: strAttr("String", "k-1")}},
			want: "k-1",
		},
		{
			name: "attribute with custom string type",
			msg:  events.SQSMessage{MessageAttributes: map[string]events.SQSMessageAttribute{idem.KeyAttribute: strAttr("String.uuid", "k-2")}},
			want: "k-2",
		},
		{
			name:  "attribute wins over dedup id and body",
			msg:   events.SQSMessage{Attributes: fifo, Body: `{"id":"body"}`, MessageAttributes: map[string]events.SQSMessageAttribute{idem.KeyAttribute: strAttr("String", "attr")}},
			field: "id",
			want:  "attr",
		},
		{
			name: "FIFO deduplication id",
			msg:  events.SQSMessage{Attributes: fifo, Body: `{"id":"body"}`},
			want: "dedup-1",
		},
		{
			name:    "a redrive's deduplication id is not a key",
			msg:     events.SQSMessage{Attributes: map[string]string{"MessageDeduplicationId": "redrive-" + sha256Hex("m-1"), "MessageGroupId": "g"}, Body: `{"acct":"a"}`},
			missing: true,
			errHas:  "a redrive gave it",
		},
		{
			name:  "a redrive's deduplication id gives way to the body's field",
			msg:   events.SQSMessage{Attributes: map[string]string{"MessageDeduplicationId": "redrive-" + sha256Hex("m-1"), "MessageGroupId": "g"}, Body: `{"id":"op-7"}`},
			field: "id",
			want:  "op-7",
		},
		{
			name:    "content-based deduplication id is not a key",
			msg:     events.SQSMessage{Attributes: map[string]string{"MessageDeduplicationId": sha256Hex(`{"acct":"a","amt":5}`), "MessageGroupId": "g"}, Body: `{"acct":"a","amt":5}`},
			missing: true,
			errHas:  "content-based deduplication",
		},
		{
			name:    "content-based deduplication id in upper case is not a key either",
			msg:     events.SQSMessage{Attributes: map[string]string{"MessageDeduplicationId": strings.ToUpper(sha256Hex(`{"acct":"a"}`)), "MessageGroupId": "g"}, Body: `{"acct":"a"}`},
			missing: true,
			errHas:  "content-based deduplication",
		},
		{
			name:  "content-based deduplication id falls through to the body field",
			msg:   events.SQSMessage{Attributes: map[string]string{"MessageDeduplicationId": sha256Hex(`{"id":"op-9"}`), "MessageGroupId": "g"}, Body: `{"id":"op-9"}`},
			field: "id",
			want:  "op-9",
		},
		{
			name: "a dedup id that is another body's SHA-256 is a key",
			msg:  events.SQSMessage{Attributes: map[string]string{"MessageDeduplicationId": sha256Hex("other"), "MessageGroupId": "g"}, Body: `{"id":"op-9"}`},
			want: sha256Hex("other"),
		},
		{
			name:  "dedup id wins over body",
			msg:   events.SQSMessage{Attributes: fifo, Body: `{"id":"body"}`},
			field: "id",
			want:  "dedup-1",
		},
		{
			name:  "JSON string field",
			msg:   events.SQSMessage{Body: `{"payment_id":"pay-7","amount":3}`},
			field: "payment_id",
			want:  "pay-7",
		},
		{
			name:  "JSON integer field kept exact",
			msg:   events.SQSMessage{Body: `{"n": 12345678901234567890}`},
			field: "n",
			want:  "12345678901234567890",
		},
		{
			name:  "JSON negative integer",
			msg:   events.SQSMessage{Body: `{"n":-42}`},
			field: "n",
			want:  "-42",
		},
		{
			name:  "JSON zero and nine, the digits' bounds",
			msg:   events.SQSMessage{Body: `{"n":0,"m":9}`},
			field: "n",
			want:  "0",
		},
		{
			name:  "JSON nine",
			msg:   events.SQSMessage{Body: `{"n":9}`},
			field: "n",
			want:  "9",
		},
		{
			name:   "JSON float is refused",
			msg:    events.SQSMessage{Body: `{"n":1.5}`},
			field:  "n",
			errHas: "not an integer",
		},
		{
			name:   "JSON exponent is refused",
			msg:    events.SQSMessage{Body: `{"n":1e3}`},
			field:  "n",
			errHas: "not an integer",
		},
		{
			name:   "JSON bool is refused",
			msg:    events.SQSMessage{Body: `{"n":true}`},
			field:  "n",
			errHas: "string or an integer",
		},
		{
			name:    "JSON field absent",
			msg:     events.SQSMessage{Body: `{"other":"x"}`},
			field:   "id",
			missing: true,
		},
		{
			name:    "JSON field null",
			msg:     events.SQSMessage{Body: `{"id":null}`},
			field:   "id",
			missing: true,
		},
		{
			name:    "JSON field empty string",
			msg:     events.SQSMessage{Body: `{"id":""}`},
			field:   "id",
			missing: true,
		},
		{
			name:    "nothing and no field configured",
			msg:     events.SQSMessage{Body: `{"id":"x"}`},
			missing: true,
		},
		{
			name:    "nothing at all",
			msg:     events.SQSMessage{},
			missing: true,
		},
		{
			name:   "invalid JSON body",
			msg:    events.SQSMessage{Body: `{"id":`},
			field:  "id",
			errHas: "not a JSON object: truncated JSON",
		},
		{
			name:   "a JSON string body",
			msg:    events.SQSMessage{Body: `"id"`},
			field:  "id",
			errHas: "not a JSON object: another JSON value",
		},
		{
			name:   "JSON array body",
			msg:    events.SQSMessage{Body: `["id"]`},
			field:  "id",
			errHas: "not a JSON object",
		},
		{
			name:   "JSON null body",
			msg:    events.SQSMessage{Body: `null`},
			field:  "id",
			errHas: "not a JSON object",
		},
		{
			name:   "trailing data after body",
			msg:    events.SQSMessage{Body: `{"id":"a"} {"id":"b"}`},
			field:  "id",
			errHas: "after the JSON object",
		},
		{
			name:   "a stray closing bracket after the body",
			msg:    events.SQSMessage{Body: `{"id":"a"}]`},
			field:  "id",
			errHas: "after the JSON object",
		},
		{
			name:   "attribute of wrong data type",
			msg:    events.SQSMessage{Attributes: fifo, MessageAttributes: map[string]events.SQSMessageAttribute{idem.KeyAttribute: strAttr("Number", "5")}},
			errHas: `data type "Number"`,
		},
		{
			name:   "binary attribute",
			msg:    events.SQSMessage{MessageAttributes: map[string]events.SQSMessageAttribute{idem.KeyAttribute: {DataType: "Binary", BinaryValue: []byte("k")}}},
			errHas: `data type "Binary"`,
		},
		{
			name:   "empty attribute does not fall back",
			msg:    events.SQSMessage{Attributes: fifo, MessageAttributes: map[string]events.SQSMessageAttribute{idem.KeyAttribute: strAttr("String", "")}},
			errHas: "is empty",
		},
		{
			name:   "attribute without value",
			msg:    events.SQSMessage{MessageAttributes: map[string]events.SQSMessageAttribute{idem.KeyAttribute: {DataType: "String"}}},
			errHas: "is empty",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.msg.MessageId = "m-1"
			got, err := idem.MessageKey(tt.msg, tt.field)
			if tt.want != "" {
				if err != nil || got != tt.want {
					t.Fatalf("MessageKey = %q, %v; want %q, nil", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("MessageKey = %q, nil; want an error", got)
			}
			if got != "" {
				t.Errorf("key = %q with an error, want empty", got)
			}
			if !idem.IsPermanent(err) {
				t.Errorf("IsPermanent(%v) = false, want true", err)
			}
			if errors.Is(err, idem.ErrMissingKey) != tt.missing {
				t.Errorf("errors.Is(%v, ErrMissingKey) = %v, want %v", err, !tt.missing, tt.missing)
			}
			if !strings.Contains(err.Error(), tt.errHas) || !strings.Contains(err.Error(), "m-1") {
				t.Errorf("error %q should contain %q and the message id", err, tt.errHas)
			}
		})
	}
}

// TestKeyFromField: with the field as the key source, the body's field keys every message,
// whatever its attribute and deduplication id say; a message without the field has no
// key (permanent, ErrMissingKey), and the rule needs a field.
func TestKeyFromField(t *testing.T) {
	rule := idem.KeyRule{Source: idem.KeyFromField, Field: "payment_id"}
	msg := events.SQSMessage{MessageId: "m1", Body: `{"payment_id":"pay-7","amount":5}`,
		Attributes:        map[string]string{"MessageDeduplicationId": "d-1"},
		MessageAttributes: map[string]events.SQSMessageAttribute{idem.KeyAttribute: strAttr("String", "client-key")}}
	if got, err := rule.Key(msg); err != nil || got != "pay-7" {
		t.Fatalf("key %q, %v; want the field's pay-7", got, err)
	}
	if got, err := (idem.KeyRule{Field: "payment_id"}).Key(msg); err != nil || got != "client-key" {
		t.Fatalf("the message's key %q, %v; want the attribute", got, err)
	}
	msg.Body = `{"amount":5}`
	if _, err := rule.Key(msg); !errors.Is(err, idem.ErrMissingKey) || !idem.IsPermanent(err) || !strings.Contains(err.Error(), `no JSON field "payment_id"`) {
		t.Fatalf("no field: %v, want a permanent ErrMissingKey naming the field", err)
	}
	if err := (idem.KeyRule{Source: idem.KeyFromField}).Check(); err == nil {
		t.Fatal("a field rule without a field passes its check")
	}
	for _, s := range []string{"message", "field"} {
		if k, err := idem.ParseKeySource(s); err != nil || k.String() != s {
			t.Errorf("ParseKeySource(%q) = %v, %v", s, k, err)
		}
	}
	if _, err := idem.ParseKeySource("body"); err == nil {
		t.Error(`ParseKeySource("body") passes`)
	}
}

// TestKeyErrorsCarryNoBody: the error of a body the key cannot be read from goes to the
// logs (the record's line) and the dead letter's reason, so it names where the body is
// wrong, never what it holds (encoding/json quotes it).
func TestKeyErrorsCarryNoBody(t *testing.T) {
	for body, secret := range map[string]string{
		`{"id": 12.75}`:         "12.75",
		`{"id": 4e17}`:          "4e17",
		`{"id": "a", Zsecret}`:  "Z",
		`{"id": "a"}]Qsecret`:   "Q",
		`987654321`:             "987654321",
		`{"id": "\uZZZZ"}`:      "ZZZZ",
		`{"id": "a", "x": 1.2.`: "1.2.",
	} {
		_, err := idem.MessageKey(events.SQSMessage{MessageId: "m", Body: body}, "id")
		if err == nil || !idem.IsPermanent(err) {
			t.Errorf("%s: %v, want a permanent error", body, err)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error quotes the body: %v", body, err)
		}
	}
}
