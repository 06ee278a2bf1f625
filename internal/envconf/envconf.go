// Package envconf reads a Lambda function's settings from its environment.
package envconf

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// New returns a Reader over lookup (os.LookupEnv in main, a map in tests).
func New(lookup func(string) (string, bool)) *Reader { return &Reader{lookup: lookup} }

// Reader reads typed settings and collects every problem instead of stopping at the
// first, so a misconfigured function reports all of them in one line.
type Reader struct {
	lookup func(string) (string, bool)
	errs   []string
}

func (e *Reader) get(name string) (string, bool) {
	v, ok := e.lookup(name)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

// Required returns the value of name and records an error when it is unset or blank.
func (e *Reader) Required(name string) string {
	v, ok := e.get(name)
	if !ok {
		e.errs = append(e.errs, name+" is not set")
	}
	return v
}

// String returns the value of name, or def when it is unset or blank.
func (e *Reader) String(name, def string) string {
	if v, ok := e.get(name); ok {
		return v
	}
	return def
}

// Duration parses name as a positive Go duration, or returns def when it is unset.
func (e *Reader) Duration(name string, def time.Duration) time.Duration {
	v, ok := e.get(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q is not a positive duration like 30s or 168h", name, v))
		return def
	}
	return d
}

// Int parses name as a whole number in [lo, hi], or returns def when it is unset.
func (e *Reader) Int(name string, def, lo, hi int) int {
	v, ok := e.get(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q is not a whole number from %d to %d", name, v, lo, hi))
		return def
	}
	return n
}

// OneOf returns the value of name when it is one of allowed, def when it is unset, and
// records an error otherwise.
func (e *Reader) OneOf(name, def string, allowed ...string) string {
	v, ok := e.get(name)
	if !ok {
		return def
	}
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	e.errs = append(e.errs, fmt.Sprintf("%s=%q is not one of %s", name, v, strings.Join(allowed, ", ")))
	return def
}

// Err returns every problem found so far, joined, or nil.
func (e *Reader) Err() error {
	if len(e.errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(e.errs, "; "))
}
