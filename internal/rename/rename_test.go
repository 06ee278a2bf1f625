package rename_test

import (
	"bytes"
	"errors"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/internal/rename"
)

// keep lists the files of this repository that hold the module path in a kept form
// after a rename: references to the upstream template (URLs, path@version).
var keep = map[string]bool{
	"README.md": true, // the gonew command and the clone URL name the upstream template
}

func TestCheckPath(t *testing.T) {
	good := []string{
		"example.com/app", "example.com/app/v2", "github.com/acme/orders-consumer",
		"git.example.co.uk/team/a_b~c.d", "example.com", "gopkg.in/yaml.v3", "example.com/v2x/v1x",
	}
	for _, p := range good {
		if err := rename.CheckPath(p); err != nil {
			t.Errorf("CheckPath(%q) = %v, want nil", p, err)
		}
	}
	bad := map[string]string{
		"":                       "empty",
		"orders":                 "has no dot",
		"example/orders":         "has no dot",
		"Example.com/orders":     "invalid character",
		"-example.com/app":       "starts with a dash",
		"/example.com/app":       "leading slash",
		"example.com/app/":       "trailing slash",
		"example.com//orders":    "double slash",
		"example.com/or ders":    "invalid character",
		"example.com/app\"x":     "invalid character",
		"example.com/../orders":  `".." is not allowed`,
		"example.com/.orders":    "starts with a dot",
		"example.com/app.":       "ends with a dot",
		"example.com/app/v1":     "major version",
		"example.com/app/v0":     "major version",
		"example.com/app/v02":    "major version",
		"example.com/con/x":      "reserved file name on Windows",
		"example.com/PROGRA~1":   "Windows short name",
		"example.com/app@v1.0.0": "invalid character",
		"gopkg.in/yaml":          "gopkg.in",
		"example.com/\xff":       "invalid UTF-8",
	}
	for p, want := range bad {
		err := rename.CheckPath(p)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "is not a valid module path") {
			t.Errorf("CheckPath(%q) = %v, want an error about %q", p, err, want)
		}
	}
}

func TestReplace(t *testing.T) {
	cases := []struct {
		in, want       string
		replaced, kept int
	}{
		{`import "example.com/old/sub"`, `import "example.com/new/sub"`, 1, 0},
		{"module example.com/old\n", "module example.com/new\n", 1, 0},
		{"the module example.com/old.", "the module example.com/new.", 1, 0},
		{"example.com/old-two example.com/oldx xexample.com/old example.com/old.v2", "example.com/old-two example.com/oldx xexample.com/old example.com/old.v2", 0, 0},
		{"https://github.com/x/y https://pkg.go.dev/example.com/old/sub", "https://github.com/x/y https://pkg.go.dev/example.com/old/sub", 0, 1},
		{"gonew example.com/old@v1.2.0 example.com/old", "gonew example.com/old@v1.2.0 example.com/new", 1, 1},
		{"example.com/old example.com/old/a/b", "example.com/new example.com/new/a/b", 2, 0},
	}
	for _, c := range cases {
		out, replaced, kept := rename.Replace([]byte(c.in), "example.com/old", "example.com/new")
		if string(out) != c.want || replaced != c.replaced || kept != c.kept {
			t.Errorf("Replace(%q) = %q, %d replaced, %d kept; want %q, %d, %d", c.in, out, replaced, kept, c.want, c.replaced, c.kept)
		}
	}
	// A new path that extends the old one is not rewritten twice.
	if out, _, _ := rename.Replace([]byte(`"example.com/old/sub"`), "example.com/old", "example.com/old/v2"); string(out) != `"example.com/old/v2/sub"` {
		t.Errorf("rename to example.com/old/v2: %s", out)
	}
}

// smallModule writes a module example.com/old: a Go file whose import order and comment
// alignment change with the path, a package, a README with kept forms, a script.
func smallModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/old\n\ngo 1.26\n",
		"a.go": `package old

import (
	"example.com/m/other"
	"example.com/old/sub"
)

const (
	mod = "example.com/old" // the module
	n   = 1                 // one
)

var _, _ = other.X, sub.Y
`,
		"sub/sub.go": "package sub\n\n// Y is in example.com/old/sub.\nconst Y = 1\n",
		"README.md":  "# example.com/old\n\nHome: https://github.com/example.com/old. Go docs: https://pkg.go.dev/example.com/old/sub\n\n    gonew example.com/old@latest example.com/you\n\nNot ours: example.com/old-two, example.com/oldx.\n",
		"run.sh":     "#!/bin/sh\ngo build example.com/old/sub\n",
	}
	for name, s := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(path, []byte(s), mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func gitCommit(t *testing.T, dir, msg string) {
	t.Helper()
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "--no-verify", "-m", msg}} {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

func read(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRenameSmallModule(t *testing.T) {
	dir := smallModule(t)
	gitCommit(t, dir, "start")
	res, err := rename.Rename(rename.Options{Dir: dir, Module: "example.com/a"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Old != "example.com/old" || res.Changed() != 5 || strings.Join(res.GoFiles, " ") != "a.go sub/sub.go" ||
		strings.Join(res.Other, " ") != "README.md go.mod run.sh" || strings.Join(res.Kept, " ") != "README.md" {
		t.Errorf("result %+v", res)
	}
	a := read(t, dir, "a.go")
	if !strings.Contains(a, "import (\n\t\"example.com/a/sub\"\n\t\"example.com/m/other\"\n)") {
		t.Errorf("a.go: imports not rewritten and sorted:\n%s", a)
	}
	if f, err := format.Source([]byte(a)); err != nil || string(f) != a {
		t.Errorf("a.go is not formatted as gofmt does (%v):\n%s", err, a)
	}
	if got := read(t, dir, "go.mod"); got != "module example.com/a\n\ngo 1.26\n" {
		t.Errorf("go.mod:\n%s", got)
	}
	wantREADME := "# example.com/a\n\nHome: https://github.com/example.com/old. Go docs: https://pkg.go.dev/example.com/old/sub\n\n    gonew example.com/old@latest example.com/you\n\nNot ours: example.com/old-two, example.com/oldx.\n"
	if got := read(t, dir, "README.md"); got != wantREADME {
		t.Errorf("README.md:\n%s\nwant:\n%s", got, wantREADME)
	}
	if fi, err := os.Stat(filepath.Join(dir, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 || read(t, dir, "run.sh") != "#!/bin/sh\ngo build example.com/a/sub\n" {
		t.Errorf("run.sh: %v %v %q", fi.Mode(), err, read(t, dir, "run.sh"))
	}
}

// TestRenameRefusesUncommitted: a changed file stops the rename, which changes nothing
// and says how to go on; -force renames.
func TestRenameRefusesUncommitted(t *testing.T) {
	dir := smallModule(t)
	gitCommit(t, dir, "start")
	if err := os.WriteFile(filepath.Join(dir, "sub", "sub.go"), []byte("package sub\n\nconst Y = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := rename.Main([]string{"-dir", dir, "-module", "example.com/a"}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, &stdout, &stderr)
	}
	for _, want := range []string{"uncommitted changes", "M sub/sub.go", "FORCE=1", "nothing was changed"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, &stderr)
		}
	}
	if read(t, dir, "go.mod") != "module example.com/old\n\ngo 1.26\n" {
		t.Errorf("go.mod changed")
	}
	stdout.Reset()
	stderr.Reset()
	if code := rename.Main([]string{"-dir", dir, "-module", "example.com/a", "-force"}, &stdout, &stderr); code != 0 {
		t.Fatalf("-force: exit %d\n%s%s", code, &stdout, &stderr)
	}
	// sub.go, rewritten by hand, no longer names the module.
	if !strings.Contains(stdout.String(), "rename: 4 files changed") {
		t.Errorf("stdout does not count the files:\n%s", &stdout)
	}
}

// TestRenameOutsideGit: without git, the rename needs -force, then looks at every file.
func TestRenameOutsideGit(t *testing.T) {
	dir := smallModule(t)
	_, err := rename.Rename(rename.Options{Dir: dir, Module: "example.com/a"})
	if err == nil || !strings.Contains(err.Error(), "not in a git work tree") || !strings.Contains(err.Error(), "FORCE=1") {
		t.Fatalf("outside git: %v", err)
	}
	res, err := rename.Rename(rename.Options{Dir: dir, Module: "example.com/a", Force: true})
	if err != nil || res.Changed() != 5 {
		t.Fatalf("outside git with Force: %v %+v", err, res)
	}
}

// TestBadModuleRefused: an invalid MODULE, none, the same path, or a dependency's path
// is refused with a message, and nothing changes.
func TestBadModuleRefused(t *testing.T) {
	dir := smallModule(t)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/old\n\ngo 1.26\n\nrequire example.com/dep v1.0.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitCommit(t, dir, "start")
	cases := []struct {
		module string
		code   int
		want   string
	}{
		{"", 2, "no new module path: make rename MODULE=example.com/orders"},
		{"orders", 1, `"orders" is not a valid module path: the first element "orders" has no dot`},
		{"Example.com/orders", 1, "is not a valid module path: invalid character 'E'"},
		{"example.com/app/v1", 1, "is not a valid module path: the major version suffix /v1 is invalid"},
		{"example.com/old", 1, "the module path is already example.com/old"},
		{"example.com/dep/x", 1, "would clash with the dependency example.com/dep"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		code := rename.Main([]string{"-dir", dir, "-module", c.module}, &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.want) || stdout.Len() > 0 {
			t.Errorf("MODULE=%q: exit %d, stderr %q, stdout %q; want exit %d and %q", c.module, code, &stderr, &stdout, c.code, c.want)
		}
	}
	cmd := exec.Command("git", "status", "--porcelain")
	cmd.Dir = dir
	if out, err := cmd.Output(); err != nil || len(out) > 0 {
		t.Errorf("the refused renames changed files: %v\n%s", err, out)
	}
}

// TestRenameRepository copies this repository (the files git lists) to a temporary
// directory, renames it to example.com/orders, and checks that no file names the old
// path but in a kept form, and that go build and go vet pass offline; then renames the
// copy again, to example.com/orders2, and checks it the same way, but with go list
// (every import resolves offline) instead of go build and go vet.
func TestRenameRepository(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the whole module in a copy")
	}
	root := moduleRoot(t)
	dir := t.TempDir()
	copyRepo(t, root, dir)
	gitCommit(t, dir, "copy")
	old, err := rename.ModulePath([]byte(read(t, dir, "go.mod")))
	if err != nil {
		t.Fatal(err)
	}

	for i, next := range []string{"example.com/orders", "example.com/orders2"} {
		prev := old
		if i > 0 {
			prev = "example.com/orders"
		}
		var stdout, stderr bytes.Buffer
		if code := rename.Main([]string{"-dir", dir, "-module", next}, &stdout, &stderr); code != 0 {
			t.Fatalf("rename to %s: exit %d\n%s%s", next, code, &stdout, &stderr)
		}
		t.Logf("rename to %s:\n%s", next, &stdout)
		if got, _ := rename.ModulePath([]byte(read(t, dir, "go.mod"))); got != next {
			t.Fatalf("go.mod's module is %s, want %s", got, next)
		}
		checkLeftovers(t, dir, prev, map[bool]map[string]bool{true: keep, false: nil}[i == 0])
		checkLeftovers(t, dir, old, keep) // the upstream references survive the second rename
		if i == 0 {
			goCmd(t, dir, "build", "./...")
			goCmd(t, dir, "vet", "./...")
		} else {
			// Compiling the module again under a third path would double the time of the
			// test: that every package and test imports resolves in the module is what a
			// second rename can break that the first one did not.
			if out := goCmd(t, dir, "list", "-e", "-deps", "-test", "-f", `{{with .Error}}{{.}}{{"\n"}}{{end}}{{range .DepsErrors}}{{.}}{{"\n"}}{{end}}`, "./..."); strings.TrimSpace(out) != "" {
				t.Errorf("go list after the second rename:\n%s", out)
			}
		}
		gitCommit(t, dir, "rename to "+next)
	}
}

// checkLeftovers fails unless the only files naming path are in kept, in kept forms
// only (after a slash or followed by @), and every Go file is formatted as gofmt does.
func checkLeftovers(t *testing.T, dir, path string, kept map[string]bool) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if d != nil && d.Name() == ".git" {
				return filepath.SkipDir
			}
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		total, keptForm := occurrences(b, path)
		switch {
		case total > 0 && !kept[rel]:
			t.Errorf("%s still names %s %d times", rel, path, total)
		case total != keptForm:
			t.Errorf("%s names %s %d times, only %d of them in a kept form (URL, @version)", rel, path, total, keptForm)
		}
		if strings.HasSuffix(rel, ".go") {
			if f, err := format.Source(b); err != nil || !bytes.Equal(f, b) {
				t.Errorf("%s is not formatted as gofmt does (%v)", rel, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// occurrences counts path in b, not as part of a longer path, and those after a slash
// or followed by @.
func occurrences(b []byte, path string) (total, kept int) {
	isPath := func(c byte) bool {
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0
	}
	for i := 0; ; i++ {
		j := bytes.Index(b[i:], []byte(path))
		if j < 0 {
			return total, kept
		}
		i += j
		var before, after byte
		if i > 0 {
			before = b[i-1]
		}
		if end := i + len(path); end < len(b) {
			after = b[end]
		}
		if isPath(before) || isPath(after) && after != '.' {
			continue
		}
		total++
		if before == '/' || after == '@' {
			kept++
		}
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
		t.Fatalf("go env GOMOD: %v %q", err, out)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// copyRepo copies the files git lists in root (tracked, and new ones it does not
// ignore) to dir, with their modes.
func copyRepo(t *testing.T, root, dir string) {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	n := 0
	for name := range strings.SplitSeq(string(out), "\x00") {
		src := filepath.Join(root, filepath.FromSlash(name))
		fi, err := os.Lstat(src)
		if name == "" || errors.Is(err, os.ErrNotExist) || err == nil && !fi.Mode().IsRegular() {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n < 50 {
		t.Fatalf("copied only %d files from %s", n, root)
	}
}

// goCmd runs go in dir offline: the environment's GOFLAGS and caches, -mod=readonly,
// -trimpath (the copy is in a new folder each run: without it nothing of it is cached),
// no module proxy.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	flags, err := exec.Command("go", "env", "GOFLAGS").Output()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(string(flags)+" -mod=readonly -trimpath"), "GOPROXY=off", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in the renamed copy: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("go %s: %s", args[0], time.Since(start).Round(time.Millisecond))
	return string(out)
}
