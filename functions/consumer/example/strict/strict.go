// Package strict decodes a message body as strictly as an example needs: one JSON object
// in valid UTF-8 with nothing after it, no unknown, duplicate or missing field, ids of
// printable characters, integers written as digits only. A lenient parser turns producer
// bugs into wrong effects. Its error messages name the field but never echo a value:
// they end up in logs, in idempotency records and on DLQ messages.
package strict

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Decoder decodes the objects of one message type.
type Decoder struct {
	// Fields are the fields of a valid object, all required, in the order missing ones
	// are reported.
	Fields []string
	// Invalid makes the error for msg: the example wraps its own sentinel around it.
	Invalid func(msg string) error
}

func (d Decoder) invalid(format string, args ...any) error {
	return d.Invalid(fmt.Sprintf(format, args...))
}

// Object walks the object of body, calling field once for each of its fields, in body
// order; field's error stops the walk and is returned as it is.
func (d Decoder) Object(body []byte, field func(name string, raw json.RawMessage) error) error {
	if !utf8.Valid(body) {
		return d.invalid("body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return d.invalid("body is not a JSON object")
	}
	seen := make(map[string]bool, len(d.Fields))
	for dec.More() {
		tok, err := dec.Token()
		name, ok := tok.(string)
		if err != nil || !ok {
			return d.invalid("body is not valid JSON")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return d.invalid("body is not valid JSON") // cut off or broken: no field to blame
		}
		if seen[name] {
			return d.invalid("%s: duplicate field", d.fieldName(name))
		}
		seen[name] = true
		if !slices.Contains(d.Fields, name) {
			return d.invalid("%s: unknown field", d.fieldName(name))
		}
		if err := field(name, raw); err != nil {
			return err
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return d.invalid("body is not valid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return d.invalid("data after the JSON object")
	}
	for _, f := range d.Fields {
		if !seen[f] {
			return d.invalid("%s: missing", f)
		}
	}
	return nil
}

// fieldName quotes a field's name for an error message, cut to a sane length; a known
// field goes unquoted.
func (d Decoder) fieldName(name string) string {
	if slices.Contains(d.Fields, name) {
		return name
	}
	if len(name) > 40 {
		name = strings.ToValidUTF8(name[:40], "") + "..."
	}
	return strconv.Quote(name)
}

// ID decodes a non-empty JSON string of printable characters, at most maxBytes bytes,
// without leading or trailing spaces.
func (d Decoder) ID(field string, raw json.RawMessage, maxBytes int) (string, error) {
	s, err := d.String(field, raw)
	if err != nil {
		return "", err
	}
	switch {
	case s == "":
		return "", d.invalid("%s: must not be empty", field)
	case len(s) > maxBytes:
		return "", d.invalid("%s: longer than %d bytes", field, maxBytes)
	case !printable(s):
		return "", d.invalid("%s: must be printable characters without leading or trailing spaces", field)
	}
	return s, nil
}

// String decodes a JSON string.
func (d Decoder) String(field string, raw json.RawMessage) (string, error) {
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", d.invalid("%s: must be a string", field)
	}
	return s, nil
}

// printable rejects control and format characters, U+FFFD (what an escaped lone
// surrogate such as "\ud800" decodes to) and surrounding spaces, so that two ids that
// look the same are the same.
func printable(s string) bool {
	if strings.TrimSpace(s) != s {
		return false
	}
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// PositiveInt decodes a positive integer written as digits only, at most max: 12.5,
// "12", 1e3 and 12.0 are refused, since a producer writing them uses floats. what names
// the kind of integer in the message for a fraction or an exponent ("an integer in minor
// units").
func (d Decoder) PositiveInt(field string, raw json.RawMessage, limit int64, what string) (int64, error) {
	s := string(raw)
	switch {
	case s[0] == '-':
		return 0, d.invalid("%s: must be positive", field)
	case s[0] < '0' || s[0] > '9':
		return 0, d.invalid("%s: must be a JSON integer", field)
	case strings.ContainsAny(s, ".eE"):
		return 0, d.invalid("%s: must be %s, without fraction or exponent", field, what)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil || n > limit:
		// ParseInt fails only on overflow here: the token is all digits.
		return 0, d.invalid("%s: too large (limit %d)", field, limit)
	case n == 0:
		return 0, d.invalid("%s: must be positive", field)
	}
	return n, nil
}
