package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
)

// runWire writes the example's template block into the template: the four regions
// between "# example:begin NAME" and "# example:end NAME" are replaced by the example's
// (functions/consumer/<example>/template.yaml), and nothing else changes.
func runWire(_ context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	flags := newFlags("wire", stderr)
	template := flags.String("template", "template.yaml", "the SAM template to rewrite")
	exName := exampleFlag(flags)
	check := flags.Bool("check", false, "change nothing; exit 1 unless the template carries the example's block as it is")
	if code, ok := parseNoArgs(flags, args, stderr); !ok {
		return code
	}
	ex, err := pickExample(*exName, env)
	if err != nil {
		return usageError(flags, stderr, "%v", err)
	}
	old, err := os.ReadFile(*template)
	if err != nil {
		return fail(stderr, "wire", err)
	}
	wired, err := example.SwapBlock(old, ex.Template())
	if err != nil {
		return fail(stderr, "wire", err)
	}
	if string(wired) == string(old) {
		fmt.Fprintf(stdout, "%s carries the %s example's block already\n", *template, ex.Name())
		return exitOK
	}
	if *check {
		return fail(stderr, "wire", fmt.Errorf("%s does not carry the %s example's block as it is (run idemctl wire --example %s)", *template, ex.Name(), ex.Name()))
	}
	info, err := os.Stat(*template)
	if err != nil {
		return fail(stderr, "wire", err)
	}
	if err := os.WriteFile(*template, wired, info.Mode().Perm()); err != nil {
		return fail(stderr, "wire", err)
	}
	fmt.Fprintf(stdout, "%s: the %s example's block is wired in (its parameters, resources, environment and outputs)\n", *template, ex.Name())
	return exitOK
}

func init() {
	commands = append(commands, command{"wire", "[--example NAME] [--template template.yaml] [--check]",
		"write the example's template block into template.yaml (after listing the example first in functions/consumer/wiring)", runWire})
}
