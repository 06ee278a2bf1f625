package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/idemgo/sqs-lambda-consumer/idem/canonjson"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// MaxRawKeyBytes is the longest key stored as is; longer keys (and all keys when
// Config.HashKeys is set) are replaced by their SHA-256. DynamoDB allows 2048 bytes
// for a partition key; the bound leaves room for the scope.
const MaxRawKeyBytes = 1024

// hashedKeyPrefix starts every record key RecordKey derives by hashing.
const hashedKeyPrefix = "sha256:"

// RecordKey returns the partition key of the record for key in scope:
// "<scope>#<key>", or "<scope>#sha256:<hex>" when the key is long, hash is set, or the
// key itself starts with "sha256:". The mapping is one-to-one: a raw key that looks like
// a hashed one is hashed too, so it can never name the record of a long key.
// It rejects an empty key or one that is not valid UTF-8 with ErrInvalidKey.
func RecordKey(scope, key string, hash bool) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if !utf8.ValidString(key) {
		return "", fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	}
	if hash || len(key) > MaxRawKeyBytes || strings.HasPrefix(key, hashedKeyPrefix) {
		sum := sha256.Sum256([]byte(key))
		key = hashedKeyPrefix + hex.EncodeToString(sum[:])
	}
	return scope + "#" + key, nil
}

// CheckScope reports why scope cannot be a Config.Scope (or a Reaper.Scope), or nil.
func CheckScope(scope string) error { return persistence.ValidScope(scope) }

// HashKey returns a short, stable hash of a key: the first 16 hex digits of its SHA-256.
// It is not for logs: anyone can hash a guessed key and compare (Keys.LogHash is keyed
// with the stack's secret). The examples stamp it on their journal entries, which only
// readers of the business table see, beside the idempotency table holding the key itself.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// HashPayload returns the hex SHA-256 of the canonical form of a JSON payload (see
// CanonicalJSON). A payload that is not JSON is hashed as raw bytes, unless fields are
// given, which require a JSON object. A payload past CanonicalJSON's bounds is refused
// (ErrJSONTooLarge).
func HashPayload(payload []byte, fields ...string) (string, error) {
	canon, err := canonjson.CanonicalJSON(payload, fields...)
	if err != nil {
		if len(fields) > 0 || errors.Is(err, canonjson.ErrJSONTooLarge) {
			return "", err
		}
		canon = payload
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// redactKey is what errors may show of an idempotency key: nothing but whether there is
// one. Errors end in logs, records and dead letters; the line, the record and the
// message that carry them name the key already (its keyed hash, its item, its
// attribute), and an unkeyed hash of it would let anyone check a guess.
func redactKey(key string) string {
	if key == "" {
		return `""`
	}
	return "…"
}
