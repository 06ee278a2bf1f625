package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
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
func CheckScope(scope string) error { return validScope(scope) }

func validScope(scope string) error {
	switch {
	case scope == "":
		return fmt.Errorf("idem: scope is empty")
	case strings.Contains(scope, "#"):
		return fmt.Errorf("idem: scope %q contains '#'", scope)
	case len(scope) > 256:
		return fmt.Errorf("idem: scope longer than 256 bytes")
	case !utf8.ValidString(scope):
		return fmt.Errorf("idem: scope is not valid UTF-8")
	}
	return nil
}

// HashKey returns a short, stable hash of a key for logs: the first 16 hex digits of its
// SHA-256. Logs carry this instead of the key, which may hold personal data.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// CanonicalJSON re-encodes a JSON document with object keys sorted, insignificant white
// space removed and numbers kept exactly as written, so that two encodings of the same
// value compare equal. With fields set, only those top-level fields of an object are kept.
func CanonicalJSON(doc []byte, fields ...string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("idem: canonical JSON: %w", err)
	}
	// More() misses a stray '}' or ']'; only io.EOF proves there is nothing after.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("idem: canonical JSON: trailing data after the document")
	}
	if len(fields) > 0 {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("idem: canonical JSON: payload fields configured but payload is not an object")
		}
		kept := make(map[string]any, len(fields))
		for _, f := range fields {
			if fv, ok := obj[f]; ok {
				kept[f] = fv
			}
		}
		v = kept
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	// encoding/json writes map keys sorted and json.Number verbatim.
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("idem: canonical JSON: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// HashPayload returns the hex SHA-256 of the canonical form of a JSON payload (see
// CanonicalJSON). A payload that is not JSON is hashed as raw bytes, unless fields are
// given, which require a JSON object.
func HashPayload(payload []byte, fields ...string) (string, error) {
	canon, err := CanonicalJSON(payload, fields...)
	if err != nil {
		if len(fields) > 0 {
			return "", err
		}
		canon = payload
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// redactKey is what errors and logs may show of an idempotency key: its short hash
// ("h:" and HashKey), "" for none.
func redactKey(key string) string {
	if key == "" {
		return `""`
	}
	return "h:" + HashKey(key)
}

// redact turns a record key into what errors and logs may show: the scope and a short
// hash of the key, which may hold personal data. `idemctl inspect` takes the raw key.
func redact(pk string) string {
	scope, key, ok := strings.Cut(pk, "#")
	if !ok {
		return "h:" + HashKey(pk)
	}
	return scope + "#h:" + HashKey(key)
}
