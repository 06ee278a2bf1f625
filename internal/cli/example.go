package cli

import (
	"flag"
	"strings"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// examples are the message types idemctl knows: the build's (functions/consumer/wiring),
// the first the default. A test swaps in its own.
var examples = wiring.Examples

// exampleFlag adds --example to flags: the message type a command works with. Unset, it
// is the one $EXAMPLE names (`idemctl up` exports it from the template), else the wired
// default.
func exampleFlag(flags *flag.FlagSet) *string {
	return flags.String("example", "", "message type: "+strings.Join(exampleNames(), " or ")+
		" (default $EXAMPLE, else "+examples[0].Name()+")")
}

// pickExample returns the example --example (name) or $EXAMPLE names, or the default.
func pickExample(name string, env lookupEnv) (example.Example, error) {
	return example.Find(examples, setting(name, env, example.Var))
}

// needExample returns the example --example (name) or $EXAMPLE names, as what need
// asks of it (example.TrafficOf, for instance): a command that needs an optional
// interface the example lacks stops with a usage error that names it.
func needExample[T any](name string, env lookupEnv, need func(example.Example) (T, error)) (example.Example, T, error) {
	var none T
	ex, err := pickExample(name, env)
	if err != nil {
		return nil, none, err
	}
	v, err := need(ex)
	return ex, v, err
}

func exampleNames() []string {
	names := make([]string, len(examples))
	for i, ex := range examples {
		names[i] = ex.Name()
	}
	return names
}

// loadTemplate reads the template at path with the example's block wired in: the
// example --example (name) or $EXAMPLE names, else the one the template carries.
func loadTemplate(path, name string, env lookupEnv) (*stack.Template, example.Example, error) {
	name = setting(name, env, example.Var)
	if name == "" {
		t, err := stack.Load(path)
		if err != nil {
			return nil, nil, err
		}
		ex, err := pickExample("", env)
		return t, ex, err
	}
	ex, err := example.Find(examples, name)
	if err != nil {
		return nil, nil, err
	}
	t, err := stack.LoadFor(path, ex)
	return t, ex, err
}
