package cli

import (
	"flag"
	"strings"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// exampleFlag adds --example to flags: the message type a command works with. Unset, it
// is the one $EXAMPLE names (`idemctl up` exports it from the template), else the wired
// default.
func exampleFlag(flags *flag.FlagSet) *string {
	return flags.String("example", "", "message type: "+strings.Join(exampleNames(), " or ")+
		" (default $EXAMPLE, else "+wiring.Default().Name()+")")
}

// pickExample returns the example --example (name) or $EXAMPLE names, or the default.
func pickExample(name string, env lookupEnv) (example.Example, error) {
	return example.Find(wiring.Examples, setting(name, env, example.Var))
}

func exampleNames() []string {
	names := make([]string, len(wiring.Examples))
	for i, ex := range wiring.Examples {
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
	ex, err := example.Find(wiring.Examples, name)
	if err != nil {
		return nil, nil, err
	}
	t, err := stack.LoadFor(path, ex)
	return t, ex, err
}
