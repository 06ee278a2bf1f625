package rename

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// CheckPath reports whether path is a valid module path, by the rules of
// golang.org/x/mod/module.CheckPath (not a dependency of this module, so written out
// here): elements separated by single slashes; each element made of ASCII letters,
// digits and "-._~", neither starting nor ending with a dot, not "." or "..", not a
// Windows reserved name; the first element a host name (lower case letters, digits,
// dots and dashes, with a dot, not starting with a dash); a final /vN element, if any,
// with N >= 2 and no leading zero (gopkg.in paths end in .vN instead).
func CheckPath(path string) error {
	if err := checkPath(path); err != nil {
		return fmt.Errorf("%q is not a valid module path: %w", path, err)
	}
	return nil
}

func checkPath(path string) error {
	switch {
	case path == "":
		return errors.New("empty")
	case !utf8.ValidString(path):
		return errors.New("invalid UTF-8")
	case strings.HasPrefix(path, "/"):
		return errors.New("leading slash")
	case strings.HasSuffix(path, "/"):
		return errors.New("trailing slash")
	case strings.Contains(path, "//"):
		return errors.New("double slash")
	}
	elems := strings.Split(path, "/")
	host := elems[0]
	if !strings.Contains(host, ".") {
		return fmt.Errorf("the first element %q has no dot: it must be a domain name such as example.com", host)
	}
	if strings.HasPrefix(host, "-") {
		return fmt.Errorf("the first element %q starts with a dash", host)
	}
	for _, r := range host {
		if !hostRune(r) {
			return fmt.Errorf("invalid character %q in the first element %q (lower case letters, digits, dots and dashes only)", r, host)
		}
	}
	for _, e := range elems {
		if err := checkElem(e); err != nil {
			return err
		}
	}
	return checkMajor(elems)
}

// checkElem checks one path element.
func checkElem(e string) error {
	if e == "." || e == ".." {
		return fmt.Errorf("%q is not allowed as a path element", e)
	}
	for _, r := range e {
		if !elemRune(r) {
			return fmt.Errorf("invalid character %q in the path element %q (letters, digits and -._~ only)", r, e)
		}
	}
	if e[0] == '.' {
		return fmt.Errorf("the path element %q starts with a dot", e)
	}
	if e[len(e)-1] == '.' {
		return fmt.Errorf("the path element %q ends with a dot", e)
	}
	short, _, _ := strings.Cut(e, ".")
	// A Windows short name such as PROGRA~1 would clash with a long name.
	if i := strings.LastIndexByte(short, '~'); i >= 0 && allDigits(short[i+1:]) {
		return fmt.Errorf("the path element %q has the form of a Windows short name (tilde and digits)", e)
	}
	for _, bad := range []string{"CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8", "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9"} {
		if strings.EqualFold(short, bad) {
			return fmt.Errorf("the path element %q is a reserved file name on Windows", e)
		}
	}
	return nil
}

// checkMajor checks a major version suffix: /vN with N >= 2, or .vN for gopkg.in.
func checkMajor(elems []string) error {
	last := elems[len(elems)-1]
	if elems[0] == "gopkg.in" {
		i := strings.LastIndex(last, ".v")
		if len(elems) > 3 || i < 1 || !isVersion(last[i+2:], 0) {
			return errors.New("a gopkg.in path must end in .vN (gopkg.in/name.v1 or gopkg.in/user/name.v2)")
		}
		return nil
	}
	if len(elems) > 1 && len(last) >= 2 && last[0] == 'v' && allDigits(last[1:]) {
		if !isVersion(last[1:], 2) {
			return fmt.Errorf("the major version suffix /%s is invalid: /v2 or higher, without leading zero, or none (for v0 and v1)", last)
		}
	}
	return nil
}

// hostRune reports whether r can be in the first element of a module path.
func hostRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.'
}

// elemRune reports whether r can be in an element of a module path.
func elemRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~", r)
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// isVersion reports whether s is a decimal number >= min without a leading zero.
func isVersion(s string, min int) bool {
	if !allDigits(s) || len(s) > 1 && s[0] == '0' {
		return false
	}
	n, err := strconv.Atoi(s)
	return err == nil && n >= min
}
