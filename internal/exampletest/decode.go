package exampletest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
)

// DecodeCase is a body for an example's Decode: valid (WantErr empty) with the message
// it decodes to, or invalid with a part of its error (the field named).
type DecodeCase[M comparable] struct {
	Name, Body string
	Want       M
	WantErr    string
}

// CheckDecode runs each case through decode, one subtest a case: a valid body gives
// Want; an invalid one the zero M and an error that wraps invalid (the example's
// sentinel) and example.ErrInvalid and contains WantErr.
func CheckDecode[M comparable](t *testing.T, decode func([]byte) (M, error), invalid error, cases []DecodeCase[M]) {
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			got, err := decode([]byte(c.Body))
			if c.WantErr == "" {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if got != c.Want {
					t.Fatalf("Decode = %+v, want %+v", got, c.Want)
				}
				return
			}
			if !errors.Is(err, invalid) || !errors.Is(err, example.ErrInvalid) {
				t.Fatalf("Decode error = %v, want one wrapping %q and example.ErrInvalid", err, invalid)
			}
			if !strings.Contains(err.Error(), c.WantErr) {
				t.Fatalf("Decode error = %q, want it to contain %q", err, c.WantErr)
			}
			var zero M
			if got != zero {
				t.Fatalf("Decode returned %+v with an error, want the zero value", got)
			}
		})
	}
}

// CheckTruncated checks that the valid body full, cut off anywhere (inside a value
// included), is refused as not valid JSON, without naming the field where the cut
// happened: the error is invalid's text and ": body is not valid JSON".
func CheckTruncated[M any](t *testing.T, decode func([]byte) (M, error), invalid error, full string) {
	t.Helper()
	want := invalid.Error() + ": body is not valid JSON"
	for cut := 2; cut < len(full); cut++ {
		body := full[:cut]
		if _, err := decode([]byte(body)); !errors.Is(err, invalid) || err.Error() != want {
			t.Errorf("Decode(%q) = %v, want %q", body, err, want)
		}
	}
}

// CheckDecoded is a fuzz target's check of decode on body: an error wraps invalid and
// comes with the zero M; what it accepts is valid JSON, within limits (nil, or why
// not), and decodes again, to the same M, from its encoding/json re-encoding.
func CheckDecoded[M comparable](t *testing.T, decode func([]byte) (M, error), invalid error, body []byte, limits func(M) error) {
	t.Helper()
	m, err := decode(body)
	var zero M
	switch {
	case err != nil && !errors.Is(err, invalid):
		t.Fatalf("Decode(%q): error %v does not wrap %v", body, err, invalid)
	case err != nil && m != zero:
		t.Fatalf("Decode(%q): %+v returned with error %v", body, m, err)
	case err != nil:
		return
	}
	if err := limits(m); err != nil {
		t.Fatalf("Decode(%q) accepted %+v: %v", body, m, err)
	}
	if !json.Valid(body) {
		t.Fatalf("Decode accepted %q, which is not valid JSON", body)
	}
	again, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("marshal %+v: %v", m, err)
	}
	if q, err := decode(again); err != nil || q != m {
		t.Fatalf("round trip: Decode(%q) = %+v, Decode(%q) = %+v, %v", body, m, again, q, err)
	}
}
