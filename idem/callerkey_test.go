package idem_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
)

// TestCallerKeyIsOneToOne: two (namespace, key) pairs never share a caller key, nor,
// through it, a record key or a deduplication id; the pair is read back from the key
// (the tag has a fixed length); and a caller key of the ingress's longest key stays
// within DynamoDB's and SQS's limits.
func TestCallerKeyIsOneToOne(t *testing.T) {
	namespaces := []string{"shared", "caller:arn:aws:iam::111122223333:user/a", "caller:arn:aws:iam::111122223333:user/a~b",
		"caller:arn:aws:sts::111122223333:assumed-role/R", "account:111122223333", "account:11112222333", "", "~", "caller:x~y"}
	keys := []string{"k", "~k", "k~", "a~b", "order:1234", strings.Repeat("k", 255), "sha256-" + strings.Repeat("0", 64), idem.CallerKeyPrefix + "x"}
	seen, records, dedups := map[string]string{}, map[string]string{}, map[string]string{}
	for _, ns := range namespaces {
		for _, k := range keys {
			pair := fmt.Sprintf("(%q, %.20q)", ns, k)
			ck := idem.CallerKey(ns, k)
			if other, ok := seen[ck]; ok {
				t.Fatalf("%s and %s share the caller key %q", other, pair, ck)
			}
			seen[ck] = pair
			// Read back: prefix, 32 hex digits of the namespace's SHA-256, "~", the key.
			rest, ok := strings.CutPrefix(ck, idem.CallerKeyPrefix)
			sum := sha256.Sum256([]byte(ns))
			if !ok || len(rest) < 33 || rest[:32] != hex.EncodeToString(sum[:])[:32] || rest[32] != '~' || rest[33:] != k {
				t.Fatalf("CallerKey%s = %q: not prefix, tag, ~, key", pair, ck)
			}
			rk, err := idem.RecordKey("payments", ck, false)
			if err != nil || !strings.HasSuffix(rk, ck) || len(rk) > 2048 {
				t.Fatalf("RecordKey of %q = %q, %v: want it kept as it is, within DynamoDB's 2048 bytes", ck, rk, err)
			}
			if other, ok := records[rk]; ok {
				t.Fatalf("%s and %s share the record key %q", other, pair, rk)
			}
			records[rk] = pair
			id := outbox.DeduplicationID(ck)
			if len(id) == 0 || len(id) > 128 {
				t.Fatalf("DeduplicationID(%q) = %q: not an SQS id", ck, id)
			}
			if other, ok := dedups[id]; ok {
				t.Fatalf("%s and %s share the deduplication id %q", other, pair, id)
			}
			dedups[id] = pair
		}
	}
	if n := len(idem.CallerKey("caller:arn:aws:iam::111122223333:user/a", strings.Repeat("k", 255))); n > 255+38 {
		t.Errorf("a caller key of a 255-character key is %d bytes, want at most %d", n, 255+38)
	}
}

// TestForgedKeyIsRefused: a key of the HTTP callers' namespace is taken only from a
// message the ingress signed, whatever the key's source (attribute, deduplication id,
// body field); a producer's message that claims one is refused for good, so it cannot
// take a key an HTTP caller will use. Other keys are untouched.
func TestForgedKeyIsRefused(t *testing.T) {
	keys := testKeys(t)
	ck := idem.CallerKey("caller:arn:aws:iam::111122223333:user/victim", "payment:pay-1")
	body := `{"payment_id":"` + ck + `","amount_cents":1}`
	signed := func(key, body, signedBody string) events.SQSMessage {
		return events.SQSMessage{MessageId: "m", Body: body, MessageAttributes: map[string]events.SQSMessageAttribute{
			idem.KeyAttribute:                {DataType: "String", StringValue: aws.String(key)},
			sqsmsg.IngressSignatureAttribute: {DataType: "String", StringValue: aws.String(keys.SignIngress(key, signedBody))},
		}}
	}
	rule := idem.KeyRule{Source: idem.KeyFromMessage, Field: "payment_id", Keys: keys}
	if k, err := rule.Key(signed(ck, body, body)); err != nil || k != ck {
		t.Fatalf("the ingress's message: key %q, %v", k, err)
	}
	forged := map[string]events.SQSMessage{
		"attribute, unsigned":       keyedMsg("m", ck, body),
		"attribute, another's body": signed(ck, `{"amount_cents":999}`, body),
		"attribute, a bad signature": func() events.SQSMessage {
			m := signed(ck, body, body)
			m.MessageAttributes[sqsmsg.IngressSignatureAttribute] = events.SQSMessageAttribute{DataType: "String", StringValue: aws.String(strings.Repeat("0", 64))}
			return m
		}(),
		"deduplication id": {MessageId: "m", Body: body, Attributes: map[string]string{"MessageDeduplicationId": ck}},
		"body field":       {MessageId: "m", Body: body},
	}
	for what, msg := range forged {
		k, err := rule.Key(msg)
		if !errors.Is(err, idem.ErrForgedKey) || !idem.IsPermanent(err) || idem.CategoryOf(err) != persistence.CategoryInvalid {
			t.Errorf("%s: key %q, %v; want a permanent ErrForgedKey", what, k, err)
		}
	}
	if _, err := rule.Key(keyedMsg("m", ck, body)); err == nil || !strings.Contains(err.Error(), "no valid "+sqsmsg.IngressSignatureAttribute) {
		t.Errorf("unsigned: %v; want the missing signature named", err)
	}
	if _, err := (idem.KeyRule{Source: idem.KeyFromMessage}).Key(signed(ck, body, body)); !errors.Is(err, idem.ErrForgedKey) || !strings.Contains(err.Error(), "no stack secret") {
		t.Errorf("without keys, the ingress's message: %v; want ErrForgedKey (nothing verifies it) saying so", err)
	}
	if _, err := (idem.KeyRule{Source: idem.KeyFromField}).Key(events.SQSMessage{MessageId: "m", Body: body}); !idem.IsPermanent(err) || !strings.Contains(err.Error(), "needs a JSON field") {
		t.Errorf("key source field without a field: %v; want the rule's problem, permanent", err)
	}
	field := idem.KeyRule{Source: idem.KeyFromField, Field: "payment_id", Keys: keys}
	if _, err := field.Key(events.SQSMessage{MessageId: "m", Body: body}); !errors.Is(err, idem.ErrForgedKey) {
		t.Errorf("key source field, a body field in the namespace: %v; want ErrForgedKey", err)
	}
	for _, k := range []string{"payment:pay-1", "http-x", "HTTP~x", "x" + idem.CallerKeyPrefix} {
		if got, err := rule.Key(keyedMsg("m", k, body)); err != nil || got != k {
			t.Errorf("a producer's own key %q: %q, %v", k, got, err)
		}
	}
}

// TestCategoryOf: the one mapping from an error to what its sender is told, through
// wrapping and the handler's public reason.
func TestCategoryOf(t *testing.T) {
	refusal := idem.Public(idem.Refuse("currency EUR does not match the account's JPY"), "the currencies differ")
	for _, c := range []struct {
		err    error
		want   persistence.Category
		public string
	}{
		{refusal, persistence.CategoryRefused, "the currencies differ"},
		{fmt.Errorf("idem: complete: %w", &idem.WriteConditionError{Index: 1, Reason: "ConditionalCheckFailed"}), persistence.CategoryRefused, ""},
		{idem.Permanent(errors.New("ledger: amount_cents: must be positive")), persistence.CategoryInvalid, ""},
		{fmt.Errorf("idem: acquire: %w", idem.ErrPayloadMismatch), persistence.CategoryInvalid, ""},
		{fmt.Errorf("idem: complete: %w: item too large", idem.ErrInvalidRequest), persistence.CategoryInvalid, ""},
		{errors.New("AccessDeniedException: User: arn:aws:sts::111122223333:assumed-role/consumer/fn is not authorized"), persistence.CategoryRetrying, ""},
		{fmt.Errorf("wrapped: %w", refusal), persistence.CategoryRefused, "the currencies differ"},
	} {
		if got := idem.CategoryOf(c.err); got != c.want {
			t.Errorf("CategoryOf(%v) = %s, want %s", c.err, got, c.want)
		}
		if got := idem.PublicReason(c.err); got != c.public {
			t.Errorf("PublicReason(%v) = %q, want %q", c.err, got, c.public)
		}
	}
	// No error has no reason to show: a handler may wrap its result unconditionally.
	if err := idem.Public(nil, "the currencies differ"); err != nil {
		t.Errorf("Public(nil, ...) = %v, want nil", err)
	}
}
