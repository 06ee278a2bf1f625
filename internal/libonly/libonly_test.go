package libonly_test

import (
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// maxMainLines bounds docs/library.md's main, counting every line of its code block.
const maxMainLines = 33

// block is a fenced code block of a Markdown file.
type block struct {
	info string // what follows the opening fence, e.g. "go"
	text string // the lines between the fences, each ending in "\n"
}

// fenced returns the ``` code blocks of md, in order.
func fenced(t *testing.T, md string) []block {
	t.Helper()
	var out []block
	var cur *block
	for line := range strings.Lines(md) {
		trimmed := strings.TrimRight(line, "\r\n")
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &block{info: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += trimmed + "\n"
		}
	}
	if cur != nil {
		t.Fatalf("docs/library.md: the code block %q is not closed", cur.info)
	}
	return out
}

// sameLines reports whether a and b hold the same lines in some order.
func sameLines(a, b string) bool {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	slices.Sort(la)
	slices.Sort(lb)
	return slices.Equal(la, lb)
}

// moduleRoot returns the directory of this module's go.mod and its module path.
func moduleRoot(t *testing.T) (dir, path string) {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		t.Fatalf("go env GOMOD: %v %q", err, out)
	}
	data, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^module\s+(\S+)\s*$`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s has no module line", gomod)
	}
	return filepath.Dir(gomod), string(m[1])
}

// TestLibraryMainBuilds takes the main of docs/library.md (its only go block) and runs
// the page's build commands (its first sh block: go mod init, go mod edit -replace, go
// mod tidy, go vet, go build) as written, in a directory next to a link to this
// repository named as the replace directive names the clone: the main builds as a
// module of its own, with this one required through the replace, and the page cannot
// drift from the code.
//
// The commands run offline first (GOPROXY=off, GOSUMDB=off: the module cache is the only
// source, and its content was verified when it was downloaded). go mod tidy also loads
// the tests of the dependencies' packages, whose modules a cache filled by building this
// repository may lack; when offline fails for that reason, the commands run again with
// the environment's GOPROXY and GOSUMDB. GOFLAGS is the environment's plus -mod=mod.
func TestLibraryMainBuilds(t *testing.T) {
	root, modPath := moduleRoot(t)
	page, err := os.ReadFile(filepath.Join(root, "docs", "library.md"))
	if err != nil {
		t.Fatal(err)
	}
	var code string
	var commands []string
	for _, b := range fenced(t, string(page)) {
		switch {
		case b.info == "go" && code != "":
			t.Fatal("docs/library.md has more than one go block: the test would not know which is the main")
		case b.info == "go":
			code = b.text
		case b.info == "sh" && commands == nil:
			for line := range strings.Lines(b.text) {
				if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
					commands = append(commands, line)
				}
			}
		}
	}
	if code == "" || commands == nil {
		t.Fatal("docs/library.md needs a go block (the main) and, after it, an sh block (the commands that build it)")
	}

	lines := strings.Count(code, "\n")
	t.Logf("the main is %d lines, every line of its code block counted", lines)
	if lines > maxMainLines {
		t.Errorf("docs/library.md: the main is %d lines, more than %d", lines, maxMainLines)
	}
	if formatted, err := format.Source([]byte(code)); err != nil {
		t.Errorf("docs/library.md: the main does not parse: %v", err)
	} else if string(formatted) != code && !sameLines(string(formatted), code) {
		// Only the order of the imports may differ: make rename rewrites the module
		// path in Markdown without sorting the imports again.
		t.Errorf("docs/library.md: the main is not gofmt-formatted; gofmt makes it:\n%s", formatted)
	}
	if !strings.Contains(code, `"`+modPath+`/idem"`) {
		t.Errorf("docs/library.md: the main does not import %s/idem", modPath)
	}
	for _, want := range []string{"go mod tidy", "go vet", "go build"} {
		found := false
		for _, c := range commands {
			found = found || strings.HasPrefix(c, want)
		}
		if !found {
			t.Errorf("docs/library.md: the build commands %q do not run %s", commands, want)
		}
	}
	var clone string
	for _, c := range commands {
		m := regexp.MustCompile(`-replace=(\S+)=\.\./([^/\s]+)$`).FindStringSubmatch(c)
		if m == nil {
			continue
		}
		if m[1] != modPath {
			t.Errorf("docs/library.md: %q replaces %s, but this module is %s", c, m[1], modPath)
		}
		clone = m[2]
	}
	if clone == "" {
		t.Fatalf("docs/library.md: no command replaces %s with ../<clone>: %q", modPath, commands)
	}
	if t.Failed() {
		t.FailNow()
	}

	flags, err := exec.Command("go", "env", "GOFLAGS").Output()
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOFLAGS="+strings.TrimSpace(string(flags)+" -mod=mod -trimpath"), "GOWORK=off")
	offline := append(env[:len(env):len(env)], "GOPROXY=off", "GOSUMDB=off")

	out, err := run(t, "offline", code, modPath, clone, root, commands, offline)
	if err != nil && strings.Contains(out, "disabled by GOPROXY=off") {
		proxy, perr := exec.Command("go", "env", "GOPROXY").Output()
		if perr != nil || strings.TrimSpace(string(proxy)) == "off" {
			t.Fatalf("%v\n%s\n(the module cache lacks a module and GOPROXY is off)", err, out)
		}
		t.Logf("offline, the module cache did not have every module:\n%s", out)
		out, err = run(t, "GOPROXY="+strings.TrimSpace(string(proxy)), code, modPath, clone, root, commands, env)
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// run writes code as main.go in a new directory next to a link named clone to root,
// and runs commands there one by one with sh and env; then go.mod must require modPath.
// It returns the output of the command that failed and an error naming it, or "" and
// nil.
func run(t *testing.T, mode, code, modPath, clone, root string, commands, env []string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(root, filepath.Join(dir, clone)); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "app")
	if err := os.Mkdir(app, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(app, "main.go"), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range commands {
		start := time.Now()
		cmd := exec.CommandContext(t.Context(), "sh", "-c", c)
		cmd.Dir, cmd.Env = app, env
		out, err := cmd.CombinedOutput()
		t.Logf("%s: %s (%s)", mode, c, time.Since(start).Round(time.Millisecond))
		if err != nil {
			return string(out), fmt.Errorf("%s: %s: %w", mode, c, err)
		}
	}
	gomod, err := os.ReadFile(filepath.Join(app, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s*(require\s+)?` + regexp.QuoteMeta(modPath) + `\s+v\S+`).Match(gomod) {
		t.Errorf("the commands left a go.mod that does not require the module:\n%s", gomod)
	}
	return "", nil
}
