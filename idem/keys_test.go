package idem_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
)

// testKeys are the keys of a fixed test secret.
func testKeys(t testing.TB) *sqsmsg.Keys {
	t.Helper()
	keys, err := sqsmsg.NewKeys(bytes.Repeat([]byte("s"), sqsmsg.MinSecretBytes))
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestNewKeysRefusesShortSecrets: a secret shorter than 256 bits derives nothing.
func TestNewKeysRefusesShortSecrets(t *testing.T) {
	if _, err := sqsmsg.NewKeys(bytes.Repeat([]byte("s"), sqsmsg.MinSecretBytes-1)); !errors.Is(err, sqsmsg.ErrSecret) {
		t.Fatalf("a %d-byte secret: %v, want ErrSecret", sqsmsg.MinSecretBytes-1, err)
	}
}

// TestLogHashIsKeyed: a key's log hash depends on the stack's secret, so hashing guesses
// (idem.HashKey, a plain SHA-256) does not find it; the same secret gives the same hash
// everywhere (the functions, idemctl), and no secret leaves the key out.
func TestLogHashIsKeyed(t *testing.T) {
	keys := testKeys(t)
	other, err := sqsmsg.NewKeys(bytes.Repeat([]byte("t"), sqsmsg.MinSecretBytes))
	if err != nil {
		t.Fatal(err)
	}
	again := testKeys(t)
	const key = "payment:pay-1"
	h := keys.LogHash(key)
	if len(h) != 16 || h == idem.HashKey(key) || h == other.LogHash(key) || h != again.LogHash(key) || h == keys.LogHash("payment:pay-2") {
		t.Fatalf("LogHash(%q) = %q (plain %s, other secret %s, same secret %s)", key, h, idem.HashKey(key), other.LogHash(key), again.LogHash(key))
	}
	var none *sqsmsg.Keys
	if got := none.LogHash(key); got != "" {
		t.Fatalf("nil keys hash %q, want nothing", got)
	}
}

// TestLogHashDerivation pins how the log key is derived from the secret (HMAC-SHA-256 of
// "idem/v1/log-hash") and how a value is hashed under it (its length, then its bytes):
// the functions and idemctl of two versions must give one key the same hash, and the
// log key must be a key of its own, not the ingress's or the dead letters'.
func TestLogHashDerivation(t *testing.T) {
	secret := bytes.Repeat([]byte("s"), sqsmsg.MinSecretBytes)
	mac := func(key []byte, parts ...[]byte) []byte {
		m := hmac.New(sha256.New, key)
		for _, p := range parts {
			m.Write(p)
		}
		return m.Sum(nil)
	}
	const value = "payment:pay-1"
	logKey := mac(secret, []byte("idem/v1/log-hash"))
	want := hex.EncodeToString(mac(logKey, binary.AppendUvarint(nil, uint64(len(value))), []byte(value))[:8])
	if got := testKeys(t).LogHash(value); got != want {
		t.Fatalf("LogHash(%q) = %s, want %s", value, got, want)
	}
}

// TestDeadLetterSignatureDerivation pins the dead letter's signature, as VerifyDeadLetter
// checks it: the HMAC-SHA-256 under the key of "idem/v1/dead-letter-signature" of the
// label "dead-letter", the body's SHA-256 in hex, the group, then each attribute by name
// (name, data type, string value, binary value), each field written with its length
// first. A consumer and an idemctl of two versions must agree on it.
func TestDeadLetterSignatureDerivation(t *testing.T) {
	secret := bytes.Repeat([]byte("s"), sqsmsg.MinSecretBytes)
	k := hmac.New(sha256.New, secret)
	k.Write([]byte("idem/v1/dead-letter-signature"))
	m := hmac.New(sha256.New, k.Sum(nil))
	field := func(b []byte) {
		m.Write(binary.AppendUvarint(nil, uint64(len(b))))
		m.Write(b)
	}
	const body, group = `{"payment_id":"p-1"}`, "acct-1"
	digest := sha256.Sum256([]byte(body))
	field([]byte("dead-letter"))
	field([]byte(hex.EncodeToString(digest[:])))
	field([]byte(group))
	for _, a := range [][2]string{{sqsmsg.DLQReasonAttribute, "invalid amount"}, {idem.KeyAttribute, "k-1"}} { // sorted by name
		field([]byte(a[0]))
		field([]byte("String"))
		field([]byte(a[1]))
		field(nil)
	}
	msg := types.Message{Body: aws.String(body), Attributes: map[string]string{"MessageGroupId": group}, MessageAttributes: map[string]types.MessageAttributeValue{
		sqsmsg.DLQReasonAttribute:    {DataType: aws.String("String"), StringValue: aws.String("invalid amount")},
		idem.KeyAttribute:            {DataType: aws.String("String"), StringValue: aws.String("k-1")},
		sqsmsg.DLQSignatureAttribute: {DataType: aws.String("String"), StringValue: aws.String(hex.EncodeToString(m.Sum(nil)))},
	}}
	if err := testKeys(t).VerifyDeadLetter(msg); err != nil {
		t.Fatalf("the signature made as documented does not verify: %v", err)
	}
}

// TestIngressSignature: the ingress's signature binds the key and the body under the
// stack's secret.
func TestIngressSignature(t *testing.T) {
	keys := testKeys(t)
	other, _ := sqsmsg.NewKeys(bytes.Repeat([]byte("t"), sqsmsg.MinSecretBytes))
	sig := keys.SignIngress("http~k", `{"a":1}`)
	var none *sqsmsg.Keys
	for what, ok := range map[string]bool{
		"the signed key and body": keys.VerifyIngress("http~k", `{"a":1}`, sig),
		"another key":             !keys.VerifyIngress("http~j", `{"a":1}`, sig),
		"another body":            !keys.VerifyIngress("http~k", `{"a":2}`, sig),
		"another secret's":        !other.VerifyIngress("http~k", `{"a":1}`, sig),
		"no signature":            !keys.VerifyIngress("http~k", `{"a":1}`, ""),
		"no keys":                 !none.VerifyIngress("http~k", `{"a":1}`, sig) && none.SignIngress("http~k", "b") == "",
		"no keys, no signature":   !none.VerifyIngress("http~k", `{"a":1}`, ""),
		"a split moved":           !keys.VerifyIngress("http~k{", `"a":1}`, sig),
	} {
		if !ok {
			t.Errorf("%s: verified wrongly", what)
		}
	}
}

// TestIngressDeduplicationID: the ingress's deduplication id of a key is the same on
// every resend, another key's is another, and nobody without the secret can compute it
// (a producer that sent a message under it first would have SQS drop the ingress's).
func TestIngressDeduplicationID(t *testing.T) {
	keys := testKeys(t)
	other, _ := sqsmsg.NewKeys(bytes.Repeat([]byte("t"), sqsmsg.MinSecretBytes))
	id := keys.IngressDeduplicationID("http~k")
	if id != keys.IngressDeduplicationID("http~k") || id == keys.IngressDeduplicationID("http~j") || id == other.IngressDeduplicationID("http~k") ||
		id == outbox.DeduplicationID("http~k") || len(id) > 128 || outbox.DeduplicationID(id) != id {
		t.Fatalf("IngressDeduplicationID = %q", id)
	}
	var none *sqsmsg.Keys
	if got := none.IngressDeduplicationID("http~k"); got != "" {
		t.Errorf("nil keys: %q, want none", got)
	}
}
