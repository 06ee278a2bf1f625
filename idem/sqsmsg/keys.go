package sqsmsg

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// MinSecretBytes is the shortest secret NewKeys takes: 256 bits.
const MinSecretBytes = 32

// ErrSecret means a stack secret is too short to derive keys from.
var ErrSecret = errors.New("idem: the stack secret is too short")

// Keys are the keys derived from one per-stack secret (the template's StackSecret), one
// for each purpose, so that a value made for one (a log line's hash) never stands for
// another (a signature):
//
//   - LogHash names keys and message groups in logs by a hash that nobody without the
//     secret can reverse by hashing guesses;
//   - SignIngress and VerifyIngress: the ingress signs the key and the body of every
//     message it sends; a consumer takes a key of the HTTP callers' namespace
//     (CallerKeyPrefix) only from a message so signed (KeyRule.Keys);
//   - SQSDeadLetter signs every dead letter it sends, and VerifyDeadLetter tells a dead
//     letter the consumer or the reaper sent from one a producer forged and SQS's own
//     redrive moved: `idemctl redrive` honours the destination of the first kind only.
//
// A nil *Keys is valid: it hashes nothing (LogHash is "", so logs leave the value out),
// signs nothing and verifies nothing.
type Keys struct {
	logs, ingress, deadLetter []byte
}

// NewKeys derives the keys from secret (at least MinSecretBytes): each is the
// HMAC-SHA-256 of its purpose's label under secret.
func NewKeys(secret []byte) (*Keys, error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("%w: %d bytes, at least %d", ErrSecret, len(secret), MinSecretBytes)
	}
	derive := func(purpose string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte("idem/v1/" + purpose))
		return m.Sum(nil)
	}
	return &Keys{logs: derive("log-hash"), ingress: derive("ingress-signature"), deadLetter: derive("dead-letter-signature")}, nil
}

// LogHash is what logs show of a key or a message group: the first 16 hex digits of its
// HMAC-SHA-256 under the stack's log key. The same key always has the same hash in every
// function and in `idemctl` given the secret, so an operator finds a key's lines; a guess
// cannot be checked against it without the secret (a plain hash, HashKey, can). "" for a
// nil *Keys: the value is left out.
func (k *Keys) LogHash(s string) string {
	if k == nil {
		return ""
	}
	return hex.EncodeToString(macOf(k.logs, s)[:8])
}

// macOf is the HMAC-SHA-256 under key of fields, each written with its length first, so
// that no two lists of fields are written the same.
func macOf(key []byte, fields ...string) []byte {
	m := hmac.New(sha256.New, key)
	for _, f := range fields {
		writeField(m, []byte(f))
	}
	return m.Sum(nil)
}

func writeField(m hash.Hash, b []byte) {
	m.Write(binary.AppendUvarint(nil, uint64(len(b))))
	m.Write(b)
}

// IngressSignatureAttribute is the message attribute in which the ingress signs the key
// and the body of a message it sends (Keys.SignIngress).
const IngressSignatureAttribute = "idem-ingress-signature"

// SignIngress returns the signature of a message with idempotency key key and body body,
// as the ingress sends it (IngressSignatureAttribute): 64 hex digits; "" for a nil *Keys.
func (k *Keys) SignIngress(key, body string) string {
	if k == nil {
		return ""
	}
	return hex.EncodeToString(macOf(k.ingress, "ingress-message", key, bodyDigest(body)))
}

// VerifyIngress reports whether sig is the ingress's signature of key and body. A nil
// *Keys verifies nothing.
func (k *Keys) VerifyIngress(key, body, sig string) bool {
	if k == nil || sig == "" {
		return false
	}
	return hmac.Equal([]byte(k.SignIngress(key, body)), []byte(sig))
}

// IngressDeduplicationID is the MessageDeduplicationId the ingress sends the message of
// key under: "ingress-" and 64 hex digits of its HMAC under the stack's ingress key. The
// same key always gets the same id (a resend is a duplicate for SQS), and nobody without
// the secret can compute it: a producer that sent a message under the id first would
// have SQS drop the ingress's as its duplicate for 5 minutes, leaving the request
// accepted and its message gone. "" for a nil *Keys.
func (k *Keys) IngressDeduplicationID(key string) string {
	if k == nil {
		return ""
	}
	return "ingress-" + hex.EncodeToString(macOf(k.ingress, "deduplication-id", key))
}

func bodyDigest(body string) string {
	sum := sha256.Sum256([]byte(body))
	return hex.EncodeToString(sum[:])
}

// DLQSignatureAttribute holds the dead letter's signature: the HMAC-SHA-256, under the
// stack's dead-letter key, of the body's digest, the message group and every other
// message attribute of the dead letter (dlq-outbound-queue, the destination; dlq-reason;
// the key), as SQSDeadLetter sent them. Only the holders of the secret (the consumer, the
// reaper, the operator) can make one.
const DLQSignatureAttribute = "dlq-signature"

// deadLetterSignature is the signature of a dead letter with body, message group group
// and attributes attrs (DLQSignatureAttribute itself left out).
func (k *Keys) deadLetterSignature(body, group string, attrs map[string]types.MessageAttributeValue) string {
	names := make([]string, 0, len(attrs))
	for name := range attrs {
		if name != DLQSignatureAttribute {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	m := hmac.New(sha256.New, k.deadLetter)
	writeField(m, []byte("dead-letter"))
	writeField(m, []byte(bodyDigest(body)))
	writeField(m, []byte(group))
	for _, name := range names {
		v := attrs[name]
		writeField(m, []byte(name))
		writeField(m, []byte(aws.ToString(v.DataType)))
		writeField(m, []byte(aws.ToString(v.StringValue)))
		writeField(m, v.BinaryValue)
	}
	return hex.EncodeToString(m.Sum(nil))
}

// ErrUnsignedDeadLetter means a dead letter carries no valid signature of the stack's
// consumer or reaper: a producer sent it (SQS's redrive moves a message with the
// attributes its producer gave it), or it was changed since.
var ErrUnsignedDeadLetter = errors.New("idem: the dead letter is not signed by the stack's consumer or reaper")

// VerifyDeadLetter checks that m, a message received from the dead-letter queue (with
// all its message attributes and its MessageGroupId), is a dead letter the consumer or
// the reaper sent, unchanged: its DLQSignatureAttribute is their signature of its body,
// its group and its other attributes. It returns ErrUnsignedDeadLetter otherwise, and for
// a nil *Keys.
func (k *Keys) VerifyDeadLetter(m types.Message) error {
	sig := aws.ToString(m.MessageAttributes[DLQSignatureAttribute].StringValue)
	if k == nil || sig == "" {
		return ErrUnsignedDeadLetter
	}
	want := k.deadLetterSignature(aws.ToString(m.Body), m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)], m.MessageAttributes)
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return ErrUnsignedDeadLetter
	}
	return nil
}
