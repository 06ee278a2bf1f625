package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
)

// CallerKeyPrefix starts every key of the HTTP callers' namespace: the keys the ingress
// sends its requests under (CallerKey). A consumer takes such a key only from a message
// the ingress signed (KeyRule.Keys); any other producer's message keyed so is refused,
// so that no producer can take a key an HTTP caller will use.
const CallerKeyPrefix = "http~"

// callerTagLen is the length of a caller's tag in a CallerKey: 32 hex digits, the first
// 128 bits of the SHA-256 of the caller's namespace.
const callerTagLen = 32

// CallerKey returns the idempotency key of the request an HTTP caller of namespace ns
// made with the client's key: CallerKeyPrefix, the caller's tag (the first 32 hex digits
// of the SHA-256 of ns), "~" and key. Callers of two namespaces never share a key: the
// tag has a fixed length, so (tag, key) is read back from the result, and another
// namespace with the same tag would take a second preimage of SHA-256's first 128 bits.
// The result is at most 38 bytes longer than key: for the ingress's keys of at most 255
// characters, 293 bytes, within DynamoDB's key limit (RecordKey keeps it as it is) and
// SQS's attribute limits; DeduplicationID hashes the ones over 128 characters.
func CallerKey(ns, key string) string {
	sum := sha256.Sum256([]byte(ns))
	return CallerKeyPrefix + hex.EncodeToString(sum[:])[:callerTagLen] + "~" + key
}

// CallerScope returns the part of key that names its HTTP caller, CallerKeyPrefix, the
// caller's tag and "~", when key is a CallerKey; "" for any other key. A handler that
// guards a business id (a journal entry per payment) scopes the id with it as the key
// is scoped: one caller's id then never stands for another caller's operation, so no
// caller can take, block or probe a business id another caller will use.
func CallerScope(key string) string {
	n := len(CallerKeyPrefix) + callerTagLen + 1
	if len(key) < n || !strings.HasPrefix(key, CallerKeyPrefix) || key[n-1] != '~' {
		return ""
	}
	return key[:n]
}

// ErrForgedKey means a message's key is in the HTTP callers' namespace (CallerKeyPrefix)
// but the ingress did not sign the message: a producer tried to take a key an HTTP caller
// would use. It is permanent.
var ErrForgedKey = errors.New("idem: a key of the HTTP callers' namespace on a message the ingress did not sign")

// checkNamespace refuses key, the key of msg, when it is in the HTTP callers' namespace
// and msg does not carry the ingress's signature of it and of its body.
func checkNamespace(keys *sqsmsg.Keys, msg events.SQSMessage, key string) error {
	if !strings.HasPrefix(key, CallerKeyPrefix) {
		return nil
	}
	sig := msg.MessageAttributes[sqsmsg.IngressSignatureAttribute].StringValue
	if sig != nil && keys.VerifyIngress(key, msg.Body, *sig) {
		return nil
	}
	why := "no valid " + sqsmsg.IngressSignatureAttribute + " attribute"
	if keys == nil {
		why = "no stack secret to verify it with (KeyRule.Keys)"
	}
	return Permanent(fmt.Errorf("idem: key of message %s: %w (%s)", msg.MessageId, ErrForgedKey, why))
}
