package persistence

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

func Truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func ValidScope(scope string) error {
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
