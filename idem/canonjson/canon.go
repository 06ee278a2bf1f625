package canonjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
)

// CanonicalJSON re-encodes a JSON document with object keys sorted, insignificant white
// space removed and numbers kept exactly as written, so that two encodings of the same
// value compare equal. With fields set, only those top-level fields of an object are kept.
// A document longer than MaxSQSMessageBytes or nested deeper than MaxJSONDepth is refused
// (ErrJSONTooLarge) before it is decoded.
//
// It refuses what would make two different documents one value (ErrAmbiguousJSON): a
// string escape that is not a character (a lone surrogate such as "\ud800", a high
// surrogate not followed by a low one), bytes that are not UTF-8, and an object with two
// members of one name, or of two names that differ only in case. Go's decoder reads the
// first two as U+FFFD and keeps the last of duplicate members (matching names to fields
// regardless of case), other decoders keep the first: two bodies that decode differently
// would share a fingerprint, and the second be answered as a retry of the first.
func CanonicalJSON(doc []byte, fields ...string) ([]byte, error) {
	if err := bounded(doc); err != nil {
		return nil, fmt.Errorf("idem: canonical JSON: %w", err)
	}
	if err := unambiguousText(doc); err != nil {
		return nil, fmt.Errorf("idem: canonical JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, fmt.Errorf("idem: canonical JSON: %w", err)
	}
	if !AtEnd(dec) {
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

// ErrAmbiguousJSON means a JSON document could be read as two different values: see
// CanonicalJSON.
var ErrAmbiguousJSON = errors.New("ambiguous JSON")

// MaxJSONDepth is the deepest nesting of arrays and objects CanonicalJSON reads. Go's
// decoder would follow any depth, and a document read and written back recursively
// costs memory and stack in proportion: 1 MiB of '[' took 886 MB, 2 MB overflowed the
// stack (issue 38). No business message needs more.
const MaxJSONDepth = 128

// ErrJSONTooLarge means a payload is longer than MaxSQSMessageBytes, or nested deeper
// than MaxJSONDepth: CanonicalJSON and HashPayload refuse it, and Middleware fails its
// record permanently, so it is dead-lettered at once with this reason.
var ErrJSONTooLarge = errors.New("payload too large to fingerprint")

// bounded refuses a document longer than MaxSQSMessageBytes, or with arrays and objects
// nested deeper than MaxJSONDepth (brackets inside strings are text), in one pass that
// neither recurses nor allocates.
func bounded(doc []byte) error {
	if len(doc) > sqsmsg.MaxSQSMessageBytes {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrJSONTooLarge, len(doc), sqsmsg.MaxSQSMessageBytes)
	}
	depth, inString := 0, false
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; {
		case inString && c == '\\':
			i++ // the escaped character, a quote too, is text
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			if depth++; depth > MaxJSONDepth {
				return fmt.Errorf("%w: nested deeper than %d at byte %d", ErrJSONTooLarge, MaxJSONDepth, i)
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return nil
}

// unambiguousText refuses a document that is not UTF-8, or with a \u escape in a string
// that is not a character: a lone surrogate, or a high one not followed by a low one.
func unambiguousText(doc []byte) error {
	if !utf8.Valid(doc) {
		return fmt.Errorf("%w: not valid UTF-8", ErrAmbiguousJSON)
	}
	inString := false
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString && i+1 < len(doc):
			i++
			if doc[i] != 'u' {
				continue
			}
			r, ok := hex4(doc, i+1)
			if !ok {
				continue // not an escape: the decoder refuses it
			}
			i += 4
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return fmt.Errorf("%w: a lone low surrogate \\u%04x at byte %d", ErrAmbiguousJSON, r, i-5)
			case r >= 0xD800 && r <= 0xDBFF:
				if i+2 >= len(doc) || doc[i+1] != '\\' || doc[i+2] != 'u' {
					return fmt.Errorf("%w: a high surrogate \\u%04x not followed by a low one at byte %d", ErrAmbiguousJSON, r, i-5)
				}
				lo, ok := hex4(doc, i+3)
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return fmt.Errorf("%w: a high surrogate \\u%04x not followed by a low one at byte %d", ErrAmbiguousJSON, r, i-5)
				}
				i += 6
			}
		}
	}
	return nil
}

// hex4 reads the four hex digits at doc[i:].
func hex4(doc []byte, i int) (rune, bool) {
	if i+4 > len(doc) {
		return 0, false
	}
	var r rune
	for _, c := range doc[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// decodeValue reads one JSON value from dec (numbers as json.Number), refusing an object
// with two members of one name.
func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := map[string]any{}
			folded := map[string]string{} // foldName of each member's name -> the name
			for dec.More() {
				nt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				name, ok := nt.(string)
				if !ok {
					return nil, fmt.Errorf("object member name %v is not a string", nt)
				}
				if _, dup := obj[name]; dup {
					return nil, fmt.Errorf("%w: two members named %q in one object", ErrAmbiguousJSON, name)
				}
				if other, dup := folded[foldName(name)]; dup {
					return nil, fmt.Errorf("%w: members %q and %q of one object differ only in case", ErrAmbiguousJSON, other, name)
				}
				folded[foldName(name)] = name
				if obj[name], err = decodeValue(dec); err != nil {
					return nil, err
				}
			}
			if _, err := dec.Token(); err != nil { // '}'
				return nil, err
			}
			return obj, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return nil, err
			}
			return arr, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil // string, json.Number, bool, nil
	}
}

// foldName returns one string for all names equal under Unicode simple case folding
// (strings.EqualFold): each rune replaced by the smallest of its fold orbit. Go's decoder
// matches a member to a struct field by this equality, so {"a":1,"A":2} decodes as one
// field, the last.
func foldName(name string) string {
	var b strings.Builder
	for _, r := range name {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			r = min(r, f)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// AtEnd reports whether dec, after a whole JSON value, has nothing but white space left.
// Decoder.More misses a stray '}' or ']'; only io.EOF proves there is nothing after.
func AtEnd(dec *json.Decoder) bool {
	_, err := dec.Token()
	return errors.Is(err, io.EOF)
}
