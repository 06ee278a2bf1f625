package example

import (
	"errors"
	"fmt"
	"strings"
)

// Var is the variable that picks one of the examples a build carries by name: the
// consumer reads it at init, and the demo and the reliability suite read it too. Unset,
// the first of the build's examples runs.
const Var = "EXAMPLE"

// ErrUnknown is returned by Find for a name none of the examples has.
var ErrUnknown = errors.New("unknown example")

// Find returns the example of examples named name; "" is the first (the default).
func Find(examples []Example, name string) (Example, error) {
	if len(examples) == 0 {
		return nil, errors.New("example: the build carries no example (functions/consumer/wiring)")
	}
	if name == "" {
		return examples[0], nil
	}
	names := make([]string, len(examples))
	for i, ex := range examples {
		if ex.Name() == name {
			return ex, nil
		}
		names[i] = ex.Name()
	}
	return nil, fmt.Errorf("%w %q: this build has %s", ErrUnknown, name, strings.Join(names, ", "))
}

// FromEnv returns the example the variable Var names in env, or the first.
func FromEnv(examples []Example, env Lookup) (Example, error) {
	name, _ := env(Var)
	return Find(examples, name)
}
