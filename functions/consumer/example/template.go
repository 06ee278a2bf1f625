package example

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
)

// Regions are the parts of template.yaml an example owns, in template order. Each sits
// between a line "# example:begin NAME" and a line "# example:end NAME" (any
// indentation), in template.yaml and in the example's block.
var Regions = []string{"parameters", "resources", "environment", "outputs"}

// ErrBlock is wrapped by the errors of SwapBlock and BlockExample.
var ErrBlock = errors.New("example template block")

func regionPattern(name string) *regexp.Regexp {
	return regexp.MustCompile(`(?ms)^[ \t]*# example:begin ` + regexp.QuoteMeta(name) + `[ \t]*\n(.*?)^[ \t]*# example:end ` +
		regexp.QuoteMeta(name) + `[ \t]*(\n|\z)`)
}

// region returns the text of one region, markers included, and where it is.
func region(text []byte, name, what string) ([]byte, []int, error) {
	all := regionPattern(name).FindAllIndex(text, -1)
	switch len(all) {
	case 0:
		return nil, nil, fmt.Errorf("%w: %s has no region %q (a line \"# example:begin %s\", then \"# example:end %s\")", ErrBlock, what, name, name, name)
	case 1:
		return text[all[0][0]:all[0][1]], all[0], nil
	default:
		return nil, nil, fmt.Errorf("%w: %s has region %q %d times", ErrBlock, what, name, len(all))
	}
}

// SwapBlock returns template with each region of block in place of the region of the
// same name: template.yaml with another example wired.
func SwapBlock(template, block []byte) ([]byte, error) {
	out := bytes.Clone(template)
	for _, name := range Regions {
		repl, _, err := region(block, name, "the example's block")
		if err != nil {
			return nil, err
		}
		_, at, err := region(out, name, "the template")
		if err != nil {
			return nil, err
		}
		if !bytes.HasSuffix(repl, []byte("\n")) {
			repl = append(bytes.Clone(repl), '\n')
		}
		out = append(out[:at[0]:at[0]], append(repl, out[at[1]:]...)...)
	}
	return out, nil
}

var exampleVar = regexp.MustCompile(`(?m)^[ \t]*` + Var + `:[ \t]*"?([A-Za-z0-9_-]+)"?[ \t]*(#.*)?$`)

// BlockExample returns the name of the example whose block template carries: the value
// of the EXAMPLE variable in its environment region.
func BlockExample(template []byte) (string, error) {
	env, _, err := region(template, "environment", "the template")
	if err != nil {
		return "", err
	}
	m := exampleVar.FindSubmatch(env)
	if m == nil {
		return "", fmt.Errorf("%w: the environment region sets no %s variable", ErrBlock, Var)
	}
	return string(m[1]), nil
}

// Wire returns template with ex's block in it, unchanged when it already carries ex's.
func Wire(template []byte, ex Example) ([]byte, error) {
	if name, err := BlockExample(template); err == nil && name == ex.Name() {
		return template, nil
	}
	out, err := SwapBlock(template, ex.Template())
	if err != nil {
		return nil, fmt.Errorf("wire example %s: %w", ex.Name(), err)
	}
	return out, nil
}
