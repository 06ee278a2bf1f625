package rename

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Main is the command `make rename` runs: rename -module PATH [-force] [-dir DIR]. It
// prints what it changed to stdout and errors to stderr, and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("rename", flag.ContinueOnError)
	fl.SetOutput(stderr)
	module := fl.String("module", "", "the new module path, e.g. example.com/orders")
	dir := fl.String("dir", ".", "the module root, where go.mod is")
	force := fl.Bool("force", false, "rename despite uncommitted changes, or outside a git work tree")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "rename: unexpected arguments %q\n", fl.Args())
		return 2
	}
	if *module == "" {
		fmt.Fprintln(stderr, "rename: no new module path: make rename MODULE=example.com/orders")
		return 2
	}
	res, err := Rename(Options{Dir: *dir, Module: *module, Force: *force})
	if err != nil {
		fmt.Fprintf(stderr, "rename: %v\n", err)
		if res == nil {
			fmt.Fprintln(stderr, "rename: nothing was changed")
		}
		return 1
	}
	fmt.Fprintf(stdout, "rename: %s -> %s\n", res.Old, res.New)
	fmt.Fprintf(stdout, "rename: %d files changed (%d occurrences): %d Go files (formatted as gofmt does), other: %s\n",
		res.Changed(), res.Replaced, len(res.GoFiles), strings.Join(res.Other, " "))
	if len(res.Kept) > 0 {
		fmt.Fprintf(stdout, "rename: kept the upstream references (URLs, %s@version) in: %s\n", res.Old, strings.Join(res.Kept, " "))
	}
	fmt.Fprintln(stdout, "rename: next: go build ./... && go vet ./..., review with git diff, commit")
	return 0
}
