package doccheck_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/internal/cli"
	"github.com/idemgo/sqs-lambda-consumer/internal/doccheck"
	"github.com/idemgo/sqs-lambda-consumer/internal/rename"
)

// external are the commands the test never runs, with the reason: they need the
// network, AWS, Docker, root, or they change a repository or start a server.
var external = map[string]string{
	"apt-get":     "installs system packages",
	"aws":         "needs AWS credentials and a deployed stack",
	"benchstat":   "compares the files a benchmark run wrote",
	"curl":        "an HTTP request: needs the network or a server started before",
	"docker":      "needs a Docker engine (the project's machines have none)",
	"git":         "changes a repository, or needs the network",
	"moto_server": "starts a server",
	"sam":         "needs the SAM CLI, and AWS to deploy to",
	"sudo":        "runs as root",
	"unzip":       "unpacks a download",
}

// allow lists the commands of one file that the checks cannot place, with the reason.
// A command matches an entry when it starts with the entry's prefix.
var allow = []struct{ file, prefix, reason string }{
	{"docs/library.md", "go mod ", "runs in a module of the reader's own, next to a clone: internal/libonly's TestLibraryMainBuilds runs this block as written"},
	{"docs/library.md", "go vet .", "runs in a module of the reader's own: internal/libonly runs it"},
	{"docs/library.md", "go build .", "runs in a module of the reader's own: internal/libonly runs it"},
	{"docs/library.md", "GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build", "builds the reader's own module for Lambda: the same flags as the Makefile's LAMBDA_BUILD, not run (two minutes on a cold cache)"},
	{"docs/tooling.md", "rm -rf cmd internal/", "deletes the development tooling: internal/tooling's test deletes the same folders (its list) from a copy"},
	{"docs/tooling.md", "go mod tidy", "rewrites go.mod once the tooling is gone, and needs the module proxy"},
	{"docs/adapting.md", "cp -r functions/consumer/payouts functions/consumer/orders", "creates the reader's own package from the example it names (which exists)"},
	{"docs/adapting.md", "rm -r functions/consumer/orders/events", "deletes the events the copy above brought along, in the reader's own package"},
	{"docs/adapting.md", "go test ./functions/consumer/orders/ ./functions/consumer/consumerapp/", "tests the reader's own package, which the copy above creates"},
}

// pendingLinks are link targets another branch adds; the link check skips them while
// they are missing. Remove an entry once its file is merged.
var pendingLinks = map[string]bool{}

// outcome is what the test did with a command.
type outcome int

const (
	checked outcome = iota // its targets, flags, packages and paths exist
	ran                    // run for real, and it succeeded
	notRun                 // listed, with the reason
	failed
)

func (o outcome) String() string {
	return [...]string{"checked", "ran", "not run", "FAILED"}[o]
}

type finding struct {
	file    string
	line    int
	command string
	outcome outcome
	note    string
}

func TestShellBlocks(t *testing.T) {
	r := newRepo(t)
	start := time.Now()
	var all []finding
	for _, file := range r.markdownFiles(t) {
		all = append(all, r.checkFile(t, file, r.read(t, file))...)
	}
	report(t, all)
	if len(all) == 0 {
		t.Fatal("no shell command found in the documentation")
	}
	t.Logf("%d commands in %s", len(all), time.Since(start).Round(time.Millisecond))
}

// TestCatchesTypos feeds the checks a page of wrong commands: each must fail.
func TestCatchesTypos(t *testing.T) {
	r := newRepo(t)
	page := "```sh\n" + `make sim-hole
make demo DEMO_FLAG="--kills 5"
make demo DEMO_FLAGS="--kils 5"
go run ./cmd/idemctl send --acounts 5
go run ./cmd/idemctl frobnicate
idemctl help frobnicate
go test -run TestNoSuchTest ./idem/
go test -run 'TestRoundTrips|TestNoSuchTest' ./idem/
go test ./internal/nosuchpackage/
go test ./internal/sim -run TestSim -seeed 3
go run ./internal/nosuchcommand
chmod +x internal/makefile/nosuch.sh
RELIABILITY_SIZE=full go test ./internal/reliability/
python3 internal/awstest/nosuch.py
frobctl --help
` + "```\n" + "Prose: `make no-such-target`, `idemctl run --no-such-flag`, `TestNoSuchThing`, [a link](nosuch.md), [an anchor](#nosuch).\n"
	findings := r.checkFile(t, "typos.md", page)
	want := map[int]bool{}
	for i := 2; i <= 16; i++ {
		want[i] = true
	}
	got := map[int]int{}
	for _, f := range findings {
		if f.outcome == failed {
			got[f.line]++
		}
	}
	for line := range want {
		if got[line] == 0 {
			t.Errorf("typos.md:%d: no failure reported", line)
		}
	}
	if got[18] != 5 {
		t.Errorf("the prose line: %d failures, want 5 (a target, a flag, a test, a file, an anchor)", got[18])
	}
	for _, f := range findings {
		t.Logf("%s:%d: %s: %s %s", f.file, f.line, f.command, f.outcome, f.note)
	}
}

func TestParse(t *testing.T) {
	cmds, err := doccheck.Parse(`a=1 b="x y" go run ./x \
  --flag 'v w' > out.txt 2>&1 && eval "$(go run ./cmd/idemctl up)"   # note
# alone
x & y | z; curl -s "${URL%/}/r" | jq .`, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cmds {
		got = append(got, fmt.Sprintf("%d env=%q args=%q subst=%q comment=%q", c.Line, c.Env, c.Args, c.Subst, c.Comment))
	}
	want := []string{
		`10 env=["a=1" "b=x y"] args=["go" "run" "./x" "--flag" "v w"] subst=[] comment=""`,
		`11 env=[] args=["eval" "$(go run ./cmd/idemctl up)"] subst=["go run ./cmd/idemctl up"] comment="note"`,
		`12 env=[] args=[] subst=[] comment="alone"`,
		`13 env=[] args=["x"] subst=[] comment=""`,
		`13 env=[] args=["y"] subst=[] comment=""`,
		`13 env=[] args=["z"] subst=[] comment=""`,
		`13 env=[] args=["curl" "-s" "${URL%/}/r"] subst=[] comment=""`,
		`13 env=[] args=["jq" "."] subst=[] comment=""`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("Parse:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func report(t *testing.T, all []finding) {
	t.Helper()
	count := map[outcome]int{}
	var skipped, ok []string
	for _, f := range all {
		count[f.outcome]++
		switch f.outcome {
		case failed:
			t.Errorf("%s:%d: %s: %s", f.file, f.line, f.command, f.note)
		case notRun:
			skipped = append(skipped, fmt.Sprintf("  %s:%d: %s (%s)", f.file, f.line, f.command, f.note))
		case ran:
			t.Logf("ran %s:%d: %s", f.file, f.line, f.command)
		case checked:
			ok = append(ok, fmt.Sprintf("  %s:%d: %s (%s)", f.file, f.line, f.command, f.note))
		}
	}
	t.Logf("checked:\n%s", strings.Join(ok, "\n"))
	t.Logf("not run:\n%s", strings.Join(skipped, "\n"))
	t.Logf("%d checked, %d ran, %d not run, %d failed", count[checked], count[ran], count[notRun], count[failed])
}

// repo is what the checks know of the repository, read once.
type repo struct {
	root     string
	top      map[string]bool            // the entries of the root directory
	targets  map[string]bool            // make's targets
	makeVars map[string]bool            // variables the Makefile and its scripts read
	names    map[string]bool            // upper-case names the code, scripts and config use
	idemctl  map[string]map[string]bool // command -> flag -> takes a value
	renameFl map[string]bool            // internal/rename/cmd/rename's flags -> takes a value
	ran      map[string]error           // commands already run, by their text

	mu    sync.Mutex
	tests map[string]*testFiles // by directory, relative to root
}

type testFiles struct {
	funcs []string
	flags map[string]bool // flag -> takes a value
	files int             // Go files
	main  bool            // a package main
}

var repoOnce = sync.OnceValues(func() (*repo, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return nil, err
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	r := &repo{root: root, top: map[string]bool{}, ran: map[string]error{}, tests: map[string]*testFiles{}}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.Name() != ".git" && e.Name() != ".aws-sam" {
			r.top[e.Name()] = true
		}
	}
	if r.targets, err = makeTargets(root); err != nil {
		return nil, err
	}
	if r.makeVars, err = makeVariables(root); err != nil {
		return nil, err
	}
	if r.names, err = upperNames(root); err != nil {
		return nil, err
	}
	if r.idemctl, err = idemctlFlags(); err != nil {
		return nil, err
	}
	var help bytes.Buffer
	rename.Main([]string{"-h"}, &help, &help)
	r.renameFl = flagsOf(help.String())
	if len(r.renameFl) == 0 {
		return nil, fmt.Errorf("rename -h lists no flag:\n%s", &help)
	}
	return r, nil
})

func newRepo(t *testing.T) *repo {
	t.Helper()
	r, err := repoOnce()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(r.root) // idemctl's commands read template.yaml from the working directory
	return r
}

// markdownFiles lists the Markdown files of the repository, relative to its root.
func (r *repo) markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(r.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != r.root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(r.root, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"README.md", "docs/configuration.md"} {
		if !slices.Contains(files, must) {
			t.Fatalf("%s is missing from the files found: %q", must, files)
		}
	}
	return files
}

func (r *repo) read(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.root, filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkFile checks the shell blocks, the inline commands, the quoted test names and the
// links of one Markdown file, named relative to the root.
func (r *repo) checkFile(t *testing.T, file, text string) []finding {
	t.Helper()
	doc := doccheck.ParseMarkdown(text)
	c := &checker{r: r, t: t, file: file, doc: doc}
	for _, b := range doc.Blocks {
		switch b.Lang {
		case "sh", "bash", "shell":
		default:
			continue
		}
		cmds, err := doccheck.Parse(b.Text, b.Line)
		if err != nil {
			c.add(b.Line, "(block)", failed, "%v", err)
			continue
		}
		for _, cmd := range cmds {
			c.command(cmd)
		}
	}
	for _, s := range doc.Spans {
		c.span(s.Line, s.Text)
	}
	for _, l := range doc.Links {
		c.link(l)
	}
	return c.found
}

type checker struct {
	r     *repo
	t     *testing.T
	file  string
	doc   doccheck.Doc
	found []finding
}

func (c *checker) add(line int, cmd string, o outcome, note string, args ...any) {
	c.found = append(c.found, finding{file: c.file, line: line, command: cmd, outcome: o, note: fmt.Sprintf(note, args...)})
}

// command checks one command of a shell block, its substitutions, and what its comment
// quotes: `cmd` spans, and an alternative after "or:".
func (c *checker) command(cmd doccheck.Command) {
	for _, s := range cmd.Subst {
		inner, err := doccheck.Parse(s, cmd.Line)
		if err != nil {
			c.add(cmd.Line, "$("+s+")", failed, "%v", err)
		}
		for _, ic := range inner {
			c.command(ic)
		}
	}
	if cmd.Comment != "" {
		for _, s := range doccheck.ParseMarkdown(cmd.Comment).Spans {
			c.span(cmd.Line, s.Text)
		}
		if alt, ok := strings.CutPrefix(cmd.Comment, "or:"); ok {
			if inner, err := doccheck.Parse(alt, cmd.Line); err == nil {
				for _, ic := range inner {
					c.command(ic)
				}
			}
		}
	}
	if len(cmd.Args) == 0 && len(cmd.Env) == 0 {
		return // a comment line
	}
	text := cmd.String()
	for _, a := range allow {
		if a.file == c.file && strings.HasPrefix(text, a.prefix) {
			c.add(cmd.Line, text, notRun, "%s", a.reason)
			return
		}
	}
	o, note := c.r.simple(cmd.Env, cmd.Args, false)
	c.add(cmd.Line, text, o, "%s", note)
}

var commandSpan = regexp.MustCompile(`^(make |go (run|test|build|vet) \./|go test |idemctl [a-z])`)

// testName is a quoted test, benchmark or fuzz target (not Example: the template's
// resources are named Example... too).
var testName = regexp.MustCompile(`^(Test|Benchmark|Fuzz)[A-Z_][A-Za-z0-9_]*$`)

// span checks an inline code span that quotes a command or a test's name. Quoted
// commands may carry placeholders ([--flag], KEY, …): only what is certain is checked.
func (c *checker) span(line int, text string) {
	switch {
	case testName.MatchString(text):
		if !c.r.testExists(text) {
			c.add(line, text, failed, "no test function %s in the repository", text)
		}
	case commandSpan.MatchString(text):
		cmds, err := doccheck.Parse(strings.NewReplacer("[", " ", "]", " ", "…", "").Replace(text), line)
		if err != nil {
			return // prose, not a command
		}
		for _, cmd := range cmds {
			if len(cmd.Args) == 0 {
				continue
			}
			if o, note := c.r.simple(cmd.Env, cmd.Args, true); o == failed {
				c.add(line, "`"+text+"`", failed, "%s", note)
			}
		}
	}
}

// link checks a relative link: its file exists, and its anchor is a heading there.
func (c *checker) link(l doccheck.Link) {
	target := l.Target
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return
	}
	file, anchor, _ := strings.Cut(target, "#")
	var doc doccheck.Doc
	if file == "" {
		doc = c.doc
	} else {
		rel := path.Join(path.Dir(c.file), file)
		full := filepath.Join(c.r.root, filepath.FromSlash(rel))
		st, err := os.Stat(full)
		switch {
		case err != nil && pendingLinks[rel]:
			c.add(l.Line, target, notRun, "%s comes from another branch", rel)
			return
		case err != nil:
			c.add(l.Line, target, failed, "no file %s", rel)
			return
		case anchor == "" || st.IsDir() || !strings.HasSuffix(rel, ".md"):
			return
		}
		b, err := os.ReadFile(full)
		if err != nil {
			c.add(l.Line, target, failed, "%v", err)
			return
		}
		doc = doccheck.ParseMarkdown(string(b))
	}
	if anchor != "" && !doc.Anchors()[anchor] {
		c.add(l.Line, target, failed, "no heading with the anchor #%s", anchor)
	}
}

// simple checks one simple command. lenient is for commands quoted in prose, which may
// leave values out.
func (r *repo) simple(env, args []string, lenient bool) (outcome, string) {
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		if !r.knownName(name) {
			return failed, fmt.Sprintf("nothing in the repository reads the variable %s", name)
		}
	}
	if len(args) == 0 {
		return checked, "assignments"
	}
	if bad := r.missingPaths(args); bad != "" {
		return failed, bad
	}
	name := args[0]
	switch {
	case name == "env":
		i := 1
		for i < len(args) && strings.Contains(args[i], "=") {
			i++
		}
		return r.simple(append(env, args[1:i]...), args[i:], lenient)
	case name == "make":
		return r.make(args[1:], lenient)
	case name == "go":
		return r.goCommand(args[1:], lenient)
	case name == "idemctl" || strings.HasSuffix(name, "/idemctl"):
		return r.idemctlCommand(args[1:], lenient)
	case name == "cd":
		if len(args) == 2 && !r.top[strings.SplitN(args[1], "/", 2)[0]] {
			return checked, "a directory outside the repository: the commands after it are checked against the repository, of which it is a copy"
		}
		return checked, "a directory of the repository"
	case name == "export":
		for _, a := range args[1:] {
			n, _, _ := strings.Cut(a, "=")
			if !r.knownName(n) {
				return failed, fmt.Sprintf("nothing in the repository reads the variable %s", n)
			}
		}
		return checked, "known variables"
	case name == "eval":
		return checked, "its substitution is checked"
	case name == "chmod":
		return checked, "its files exist"
	case name == "source" || name == ".":
		if len(args) == 2 && strings.HasPrefix(args[1], ".aws-sam/") {
			return notRun, "reads a file an earlier command writes"
		}
		return failed, "source of a file the checks do not know"
	case name == "python3" && len(args) > 2 && args[1] == "-m" && args[2] == "pip":
		return notRun, "installs from PyPI (network)"
	case name == "python3" && len(args) > 1 && strings.HasSuffix(args[1], ".py"):
		return notRun, "starts a server (the script exists)"
	case name == "bash" && len(args) == 2:
		return notRun, "runs a script that runs a long command (the script exists)"
	case external[name] != "":
		return notRun, external[name]
	case strings.HasSuffix(name, "with-local-aws.sh"):
		rest := args[1:]
		if i := slices.Index(rest, "--"); i >= 0 {
			if o, note := r.simple(nil, rest[i+1:], lenient); o == failed {
				return o, note
			}
		}
		return notRun, "starts moto, then runs the command after --, which is checked"
	case strings.Contains(name, "/"):
		return notRun, "a script of the repository (it exists)"
	}
	return failed, fmt.Sprintf("a command the checks do not know: %q (add it to the allowlist of internal/doccheck with a reason)", name)
}

func (r *repo) knownName(name string) bool {
	for _, p := range []string{"AWS_", "GO", "CGO_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return name == "PATH" || name == "HOME" || r.names[name]
}

// missingPaths names the first argument that is a path of the repository (its first
// element is an entry of the root) and does not exist. Globs must match; "dir/..."
// is a package pattern.
func (r *repo) missingPaths(args []string) string {
	for _, a := range args {
		if i := strings.Index(a, "="); i >= 0 && strings.HasPrefix(a, "-") {
			a = a[i+1:]
		}
		a = strings.TrimPrefix(a, "./")
		if a == "" || strings.Contains(a, "://") || strings.HasPrefix(a, "-") || strings.ContainsAny(a, "$`") {
			continue
		}
		first := strings.SplitN(a, "/", 2)[0]
		if !r.top[first] || a == first && !strings.Contains(a, ".") {
			continue
		}
		a = strings.TrimSuffix(strings.TrimSuffix(a, "..."), "/")
		if m, _ := filepath.Glob(filepath.Join(r.root, filepath.FromSlash(a))); len(m) == 0 {
			return fmt.Sprintf("no file or directory %s in the repository", a)
		}
	}
	return ""
}

// make checks a make command line: its targets exist, the variables it sets are read.
func (r *repo) make(args []string, lenient bool) (outcome, string) {
	var targets []string
	vars := map[string]string{}
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "-"):
			return failed, fmt.Sprintf("make flag %s: the checks know none", a)
		case strings.Contains(a, "="):
			n, v, _ := strings.Cut(a, "=")
			vars[n] = v
		case lenient && strings.ToUpper(a) == a:
			// a placeholder
		default:
			targets = append(targets, a)
		}
	}
	for _, tg := range targets {
		if !r.targets[tg] {
			return failed, fmt.Sprintf("no target %q in the Makefile", tg)
		}
	}
	for n := range vars {
		if !r.makeVars[n] {
			return failed, fmt.Sprintf("the Makefile and its scripts do not read %s", n)
		}
	}
	if flags, ok := vars["DEMO_FLAGS"]; ok {
		if o, note := r.idemctlCommand(append([]string{"demo"}, strings.Fields(flags)...), lenient); o == failed {
			return o, "DEMO_FLAGS: " + note
		}
	}
	if len(targets) == 1 && targets[0] == "help" && len(vars) == 0 && !lenient {
		if err := r.once("make help", func() error {
			cmd := exec.Command("make", "help")
			cmd.Dir = r.root
			out, err := cmd.CombinedOutput()
			if err == nil && !bytes.Contains(out, []byte("list the targets")) {
				err = fmt.Errorf("make help printed %q", out)
			}
			return err
		}); err != nil {
			return failed, err.Error()
		}
		return ran, "make help"
	}
	return checked, "targets and variables exist"
}

// once runs a command the first time it is met, and remembers its result.
func (r *repo) once(key string, run func() error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err, ok := r.ran[key]; ok {
		return err
	}
	err := run()
	r.ran[key] = err
	return err
}

// goCommand checks go run, go test, go build and go vet.
func (r *repo) goCommand(args []string, lenient bool) (outcome, string) {
	if len(args) == 0 {
		return failed, "go without a command"
	}
	switch args[0] {
	case "run":
		rest := args[1:]
		for len(rest) > 0 && strings.HasPrefix(rest[0], "-") {
			rest = rest[1:]
		}
		if len(rest) == 0 {
			return failed, "go run without a package"
		}
		pkg := rest[0]
		switch {
		case strings.Contains(pkg, "@"):
			return notRun, "downloads " + pkg + " through the Go module proxy"
		case strings.TrimSuffix(pkg, "/") == "./cmd/idemctl":
			return r.idemctlCommand(rest[1:], lenient)
		case strings.TrimSuffix(pkg, "/") == "./internal/rename/cmd/rename":
			if o, note := checkFlags(r.renameFl, rest[1:], lenient); o == failed {
				return o, "rename: " + note
			}
			return checked, "rename's flags exist"
		}
		tf := r.dir(pkg)
		if tf.files == 0 || !tf.main {
			return failed, fmt.Sprintf("%s is not a main package of the repository", pkg)
		}
		return checked, "a main package"
	case "test":
		return r.goTest(args[1:])
	case "build", "vet", "list":
		var pkgs []string
		for i := 1; i < len(args); i++ {
			switch a := args[i]; {
			case a == "-o" || a == "-tags" || a == "-ldflags" || a == "-gcflags" || a == "-p":
				i++
			case strings.HasPrefix(a, "-"):
			default:
				pkgs = append(pkgs, a)
			}
		}
		if len(pkgs) == 0 {
			pkgs = []string{"."}
		}
		for _, p := range pkgs {
			if len(r.packages(p)) == 0 {
				return failed, fmt.Sprintf("no package %s in the repository", p)
			}
		}
		return checked, "its packages exist"
	}
	return failed, fmt.Sprintf("go %s: a go command the checks do not know", args[0])
}

// goTestValue are go test's own flags that take a value; its other flags take none.
var goTestValue = map[string]bool{
	"run": true, "bench": true, "benchtime": true, "count": true, "cpu": true, "fuzz": true, "fuzztime": true,
	"fuzzminimizetime": true, "list": true, "p": true, "parallel": true, "shuffle": true, "skip": true,
	"timeout": true, "tags": true, "ldflags": true, "gcflags": true, "o": true, "exec": true, "mod": true,
	"coverprofile": true, "covermode": true, "coverpkg": true, "cpuprofile": true, "memprofile": true,
	"blockprofile": true, "mutexprofile": true, "trace": true, "outputdir": true, "vet": true, "json": false,
}
var goTestBool = map[string]bool{
	"v": true, "race": true, "short": true, "benchmem": true, "cover": true, "failfast": true, "json": true,
	"c": true, "x": true, "n": true, "a": true, "trimpath": true, "msan": true, "asan": true,
}

func (r *repo) goTest(args []string) (outcome, string) {
	var pkgs []string
	patterns := map[string]string{}
	var custom []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			pkgs = append(pkgs, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case goTestValue[name]:
			if !hasValue {
				if i+1 >= len(args) {
					return failed, "go test -" + name + " without a value"
				}
				i++
				value = args[i]
			}
			if name == "run" || name == "bench" || name == "fuzz" {
				patterns[name] = value
			}
		case goTestBool[name]:
		default:
			custom = append(custom, a)
			if !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && !strings.HasPrefix(args[i+1], "./") {
				i++ // its value, when the flag takes one (checked below)
			}
		}
	}
	if len(pkgs) == 0 {
		pkgs = []string{"."}
	}
	var funcs []string
	flags := map[string]bool{}
	for _, p := range pkgs {
		dirs := r.packages(p)
		if len(dirs) == 0 {
			return failed, fmt.Sprintf("no package %s in the repository", p)
		}
		for _, d := range dirs {
			tf := r.dir(d)
			funcs = append(funcs, tf.funcs...)
			for f, v := range tf.flags {
				flags[f] = v
			}
		}
	}
	for _, a := range custom {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if _, ok := flags[name]; !ok {
			return failed, fmt.Sprintf("neither go test nor the tests of %s define the flag -%s", strings.Join(pkgs, " "), name)
		}
	}
	for kind, prefixes := range map[string][]string{"run": {"Test", "Example", "Fuzz"}, "bench": {"Benchmark"}, "fuzz": {"Fuzz"}} {
		pattern, ok := patterns[kind]
		if !ok {
			continue
		}
		for _, alt := range alternatives(pattern) {
			if alt == "^$" || alt == "." || alt == "" {
				continue
			}
			re, err := regexp.Compile(alt)
			if err != nil {
				return failed, fmt.Sprintf("-%s %q: %v", kind, pattern, err)
			}
			found := false
			for _, f := range funcs {
				for _, p := range prefixes {
					found = found || strings.HasPrefix(f, p) && re.MatchString(f)
				}
			}
			if !found {
				return failed, fmt.Sprintf("-%s %q: no %s function of %s matches %q", kind, pattern, strings.Join(prefixes, "/"), strings.Join(pkgs, " "), alt)
			}
		}
	}
	return checked, "packages, test names and flags exist"
}

// alternatives splits a go test pattern on its top-level | and keeps, of each
// alternative, the part before the first top-level / (the subtest path).
func alternatives(pattern string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i <= len(pattern); i++ {
		if i == len(pattern) || depth == 0 && pattern[i] == '|' {
			alt := pattern[start:i]
			if j := strings.Index(alt, "/"); j >= 0 {
				alt = alt[:j]
			}
			out = append(out, alt)
			start = i + 1
			continue
		}
		switch pattern[i] {
		case '(':
			depth++
		case ')':
			depth--
		}
	}
	return out
}

// packages resolves a package pattern (./dir, ./dir/..., dir) to the directories of
// the repository that hold Go files.
func (r *repo) packages(pattern string) []string {
	p := strings.TrimPrefix(strings.TrimPrefix(pattern, "./"), "/")
	recursive := strings.HasSuffix(p, "...")
	p = strings.TrimSuffix(strings.TrimSuffix(p, "..."), "/")
	if p == "" || p == "." {
		p = "."
	}
	if strings.Contains(p, ".") && p != "." && !r.top[strings.SplitN(p, "/", 2)[0]] {
		return nil // an import path outside the module
	}
	var dirs []string
	base := filepath.Join(r.root, filepath.FromSlash(p))
	if !recursive {
		if r.dir(p).files > 0 {
			dirs = append(dirs, p)
		}
		return dirs
	}
	_ = filepath.WalkDir(base, func(q string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil //nolint:nilerr // an unreadable entry holds no package: skipped, the walk goes on
		}
		if n := d.Name(); q != base && (strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || n == "testdata") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(r.root, q)
		if r.dir(filepath.ToSlash(rel)).files > 0 {
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	return dirs
}

var (
	testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)[A-Za-z0-9_]*)\(`)
	flagDef  = regexp.MustCompile(`flag\.(Bool|Int|Int64|Uint|Uint64|String|Duration|Float64|Func|Var|TextVar)\w*\(\s*(?:&?\w+,\s*)?"([^"]+)"`)
)

// dir reads the Go files of one directory of the repository.
func (r *repo) dir(rel string) *testFiles {
	rel = strings.TrimSuffix(strings.TrimPrefix(rel, "./"), "/")
	r.mu.Lock()
	defer r.mu.Unlock()
	if tf, ok := r.tests[rel]; ok {
		return tf
	}
	tf := &testFiles{flags: map[string]bool{}}
	r.tests[rel] = tf
	files, _ := filepath.Glob(filepath.Join(r.root, filepath.FromSlash(rel), "*.go"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		tf.files++
		if regexp.MustCompile(`(?m)^package main$`).Match(b) && !strings.HasSuffix(f, "_test.go") {
			tf.main = true
		}
		if !strings.HasSuffix(f, "_test.go") {
			continue
		}
		for _, m := range testFunc.FindAllSubmatch(b, -1) {
			tf.funcs = append(tf.funcs, string(m[1]))
		}
		for _, m := range flagDef.FindAllSubmatch(b, -1) {
			tf.flags[string(m[2])] = string(m[1]) != "Bool"
		}
	}
	return tf
}

// testExists reports whether a test, benchmark, fuzz target or example of that name is
// defined anywhere in the repository.
func (r *repo) testExists(name string) bool {
	for _, d := range r.packages("./...") {
		if slices.Contains(r.dir(d).funcs, name) {
			return true
		}
	}
	return false
}

// idemctlCommand checks an idemctl command line against idemctl's help, and runs the
// cheap ones: help, and wire --check.
func (r *repo) idemctlCommand(args []string, lenient bool) (outcome, string) {
	if len(args) == 0 {
		return checked, "idemctl alone prints its usage"
	}
	sub := args[0]
	if sub == "help" || sub == "-h" || sub == "--help" {
		if len(args) > 1 && r.idemctl[args[1]] == nil && (!lenient || strings.ToUpper(args[1]) != args[1]) {
			return failed, fmt.Sprintf("idemctl has no command %q", args[1])
		}
		if lenient {
			return checked, "idemctl help"
		}
		if err := r.once(strings.Join(args, " "), func() error { return runIdemctl(args) }); err != nil {
			return failed, err.Error()
		}
		return ran, "idemctl " + strings.Join(args, " ")
	}
	flags := r.idemctl[sub]
	if flags == nil {
		return failed, fmt.Sprintf("idemctl has no command %q", sub)
	}
	if o, note := checkFlags(flags, args[1:], lenient); o == failed {
		return o, "idemctl " + sub + ": " + note
	}
	if !lenient && slices.Equal(args, []string{"wire", "--check"}) {
		if err := r.once("wire --check", func() error { return runIdemctl(args) }); err != nil {
			return failed, err.Error()
		}
		return ran, "idemctl wire --check"
	}
	return checked, "idemctl " + sub + "'s flags exist"
}

// checkFlags checks command-line flags against a flag set's: every flag is defined, and
// one that takes a value has it.
func checkFlags(flags map[string]bool, args []string, lenient bool) (outcome, string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takes, ok := flags[name]
		if !ok {
			return failed, fmt.Sprintf("no flag -%s", name)
		}
		if takes && !hasValue {
			if i+1 >= len(args) {
				if lenient {
					continue
				}
				return failed, fmt.Sprintf("-%s without its value", name)
			}
			i++
		}
	}
	return checked, ""
}

// runIdemctl runs idemctl in this process, as `go run ./cmd/idemctl args...` does.
func runIdemctl(args []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if code := cli.Main(ctx, args, &out, &out, os.LookupEnv); code != 0 {
		return fmt.Errorf("idemctl %s: exit %d\n%s", strings.Join(args, " "), code, &out)
	}
	return nil
}

// idemctlFlags asks idemctl's help for its commands and each one's flags.
func idemctlFlags() (map[string]map[string]bool, error) {
	var usage bytes.Buffer
	if code := cli.Main(context.Background(), []string{"help"}, &usage, &usage, os.LookupEnv); code != 0 {
		return nil, fmt.Errorf("idemctl help: exit %d\n%s", code, &usage)
	}
	_, list, ok := strings.Cut(usage.String(), "commands:\n")
	if !ok {
		return nil, fmt.Errorf("idemctl help lists no commands:\n%s", &usage)
	}
	list, _, _ = strings.Cut(list, "\n\n")
	out := map[string]map[string]bool{}
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var help bytes.Buffer
		if code := cli.Main(context.Background(), []string{"help", f[0]}, &help, &help, os.LookupEnv); code != 0 {
			return nil, fmt.Errorf("idemctl help %s: exit %d\n%s", f[0], code, &help)
		}
		out[f[0]] = flagsOf(help.String())
	}
	if len(out) < 5 {
		return nil, fmt.Errorf("idemctl help lists %d commands:\n%s", len(out), &usage)
	}
	return out, nil
}

var flagLine = regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9_-]*)( [^\t\n]+)?(\t.*)?$`)

// flagsOf reads the flags of a flag.PrintDefaults text: a flag followed by a word takes
// a value.
func flagsOf(help string) map[string]bool {
	out := map[string]bool{}
	for _, m := range flagLine.FindAllStringSubmatch(help, -1) {
		out[m[1]] = m[2] != ""
	}
	return out
}

// makeTargets asks make for the Makefile's targets (its database, nothing run).
func makeTargets(root string) (map[string]bool, error) {
	cmd := exec.Command("make", "-pRrq", "-f", "Makefile")
	cmd.Dir = root
	out, _ := cmd.Output() // -q exits 1: the default goal is not up to date
	_, db, ok := strings.Cut(string(out), "\n# Files\n")
	if !ok {
		return nil, fmt.Errorf("make -pRrq printed no database:\n%s", out)
	}
	targets := map[string]bool{}
	rule := regexp.MustCompile(`^([^#\s:=][^:=]*):(?:[^=]|$)`)
	prev := ""
	for _, line := range strings.Split(db, "\n") {
		if m := rule.FindStringSubmatch(line); m != nil && prev != "# Not a target:" {
			for _, t := range strings.Fields(m[1]) {
				targets[t] = true
			}
		}
		prev = line
	}
	for _, want := range []string{"help", "test", "demo"} {
		if !targets[want] {
			return nil, fmt.Errorf("make's database has no target %q: %v", want, keys(targets))
		}
	}
	return targets, nil
}

// makeVariables lists the variables the Makefile reads, and those the scripts it runs
// read from their environment (make exports the variables of its command line).
func makeVariables(root string) (map[string]bool, error) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return nil, err
	}
	vars := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$[({]([A-Za-z_][A-Za-z0-9_]*)`).FindAllSubmatch(mk, -1) {
		vars[string(m[1])] = true
	}
	for _, m := range regexp.MustCompile(`[\w./-]+\.sh\b`).FindAll(mk, -1) {
		b, err := os.ReadFile(filepath.Join(root, string(m)))
		if err != nil {
			continue
		}
		for _, v := range regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`).FindAllSubmatch(b, -1) {
			vars[string(v[1])] = true
		}
	}
	return vars, nil
}

// upperNames collects the upper-case names the code, the scripts and the configuration
// files use: the environment variables something reads are among them.
func upperNames(root string) (map[string]bool, error) {
	names := map[string]bool{}
	word := regexp.MustCompile(`\b[A-Z][A-Z0-9_]{2,}\b`)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// This package's own test names wrong variables on purpose (TestCatchesTypos).
			if p != root && strings.HasPrefix(d.Name(), ".") && d.Name() != ".ci" || p == filepath.Join(root, "internal", "doccheck") {
				return filepath.SkipDir
			}
			return nil
		}
		switch ext := filepath.Ext(p); {
		case ext == ".go" || ext == ".sh" || ext == ".py" || ext == ".yml" || ext == ".yaml" || ext == ".toml",
			d.Name() == "Makefile", d.Name() == "run":
		default:
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, w := range word.FindAll(b, -1) {
			names[string(w)] = true
		}
		return nil
	})
	return names, err
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
