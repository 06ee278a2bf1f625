package makefile_test

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the repository, where the Makefile is.
const root = "../.."

// watched are the tools a target runs. In the test's PATH each is a wrapper that logs
// its arguments before running the real one, so a test sees what ran.
var watched = []string{"go", "python3", "moto_server", "cfn-lint", "curl", "sam"}

// installLine is what the message must show for each tool: its install command.
var installLine = map[string]string{
	"go":       "https://go.dev/doc/install",
	"moto":     "python3 -m pip install 'moto[server]==5.2.1'",
	"cfn-lint": "python3 -m pip install 'cfn-lint==1.51.*'",
	"curl":     "sudo apt-get install curl",
	"sam":      "sudo ./sam-installation/install",
}

// removes lists the executables taken out of PATH to remove a tool: moto is either
// python3 that imports it or moto_server.
var removes = map[string][]string{
	"go": {"go"}, "moto": {"python3", "moto_server"}, "cfn-lint": {"cfn-lint"}, "curl": {"curl"}, "sam": {"sam"},
}

// pathWithout builds a directory that holds every executable of the test's PATH except
// the names in without (docker always left out: the demo would use LocalStack), the
// watched ones as logging wrappers, and a stand-in sam (not installed on every machine
// that runs the tests). It returns the directory and the log file.
func pathWithout(t *testing.T, without ...string) (dir, log string) {
	t.Helper()
	dir, log = t.TempDir(), filepath.Join(t.TempDir(), "ran.log")
	skip := map[string]bool{"docker": true}
	for _, n := range without {
		skip[n] = true
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			name, target := e.Name(), filepath.Join(d, e.Name())
			if skip[name] {
				continue
			}
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
				continue // an earlier PATH entry has it
			}
			if fi, err := os.Stat(target); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				continue
			}
			if slices.Contains(watched, name) {
				wrap(t, dir, name, log, target)
				continue
			}
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "sam")); err != nil && !skip["sam"] {
		wrap(t, dir, "sam", log, "/bin/true")
	}
	return dir, log
}

func wrap(t *testing.T, dir, name, log, target string) {
	t.Helper()
	script := "#!/bin/sh\necho \"" + name + " $*\" >>" + strconv.Quote(log) + "\nexec " + strconv.Quote(target) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// freePort returns a loopback port nothing listens on, so `make demo` finds no endpoint
// to reuse.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// run runs name with args in dir with only PATH, HOME and LOCAL_AWS_PORT set: no
// AWS_ENDPOINT_URL and no MAKEFLAGS of a make that runs this test.
func run(t *testing.T, path, dir, name string, args ...string) (string, int) {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + path, "HOME=" + os.Getenv("HOME"), "LOCAL_AWS_PORT=" + freePort(t)}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), 0
}

// ranBesidesProbes returns the logged runs of the watched tools other than the check's
// own probes (python3 importing moto, curl asking the demo's port).
func ranBesidesProbes(t *testing.T, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ran []string
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "python3 -c import moto") || strings.HasPrefix(line, "curl -s -o /dev/null --max-time 2 http://127.0.0.1:") {
			continue
		}
		ran = append(ran, line)
	}
	return ran
}

// TestMissingToolStopsMake removes each tool a target needs from PATH in turn and runs
// the target: make must print that tool and its install command, and run nothing.
func TestMissingToolStopsMake(t *testing.T) {
	cases := []struct{ target, tool, neededBy string }{
		{"test", "go", ""}, {"test", "moto", ""}, {"test", "cfn-lint", ""}, {"test", "curl", ""},
		{"demo", "go", ""}, {"demo", "moto", ""}, {"demo", "curl", ""},
		{"deploy", "sam", ""}, {"deploy", "go", ""},
		{"rename", "go", ""}, {"mutation", "moto", ""},
		{"unit", "moto", ""}, {"cfn-lint", "cfn-lint", ""}, {"actionlint", "go", ""},
		{"tools", "cfn-lint", "test"}, {"tools", "moto", "test"}, // alone: what test and demo need
	}
	for _, c := range cases {
		t.Run(c.target+"/without-"+c.tool, func(t *testing.T) {
			t.Parallel() // each with its own PATH directory and log
			dir, log := pathWithout(t, removes[c.tool]...)
			out, code := run(t, dir, root, "make", c.target)
			if code == 0 {
				t.Fatalf("make %s succeeded without %s:\n%s", c.target, c.tool, out)
			}
			neededBy := c.target
			if c.neededBy != "" {
				neededBy = c.neededBy
			}
			header := "  " + c.tool + " (needed by make " + neededBy + "):"
			if !strings.Contains(out, header) || !strings.Contains(out, installLine[c.tool]) {
				t.Errorf("make %s without %s: the output does not name it (%q) with %q:\n%s", c.target, c.tool, header, installLine[c.tool], out)
			}
			// Nothing but the message and make's line about the failed check.
			for line := range strings.Lines(out) {
				switch {
				case strings.HasPrefix(line, "Missing tools: nothing was run."),
					strings.HasPrefix(line, header),
					strings.HasPrefix(line, "      "),
					strings.HasPrefix(line, "make: *** [Makefile:") && strings.Contains(line, ": tools] Error 1"):
				default:
					t.Errorf("make %s without %s printed a line besides the message: %q\n%s", c.target, c.tool, line, out)
				}
			}
			if ran := ranBesidesProbes(t, log); len(ran) > 0 {
				t.Errorf("make %s without %s ran %q", c.target, c.tool, ran)
			}
		})
	}
}

// TestAllToolsPresent: with every tool there, the check prints nothing and lets make go on.
func TestAllToolsPresent(t *testing.T) {
	dir, log := pathWithout(t)
	out, code := run(t, dir, root, "bash", "internal/makefile/tools.sh", "test", "demo", "deploy", "unit", "bench-e2e")
	if code != 0 || out != "" {
		t.Fatalf("exit %d, output %q; want 0 and nothing", code, out)
	}
	if ran := ranBesidesProbes(t, log); len(ran) > 0 {
		t.Errorf("the check ran %q", ran)
	}
}

// TestHelpListsEveryTarget: `make help` lists every target the Makefile documents with
// "## ", digits in the name included (bench-e2e).
func TestHelpListsEveryTarget(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	documented := regexp.MustCompile(`(?m)^([^\s:#=]+):[^=\n]*## `).FindAllSubmatch(mk, -1)
	out, code := run(t, os.Getenv("PATH"), root, "make", "--no-print-directory", "help")
	if code != 0 {
		t.Fatalf("make help: exit %d\n%s", code, out)
	}
	var listed []string
	for line := range strings.Lines(out) {
		listed = append(listed, strings.Fields(line)[0])
	}
	if len(documented) < 10 {
		t.Fatalf("found only %d documented targets in the Makefile", len(documented))
	}
	for _, m := range documented {
		if name := string(m[1]); !slices.Contains(listed, name) {
			t.Errorf("make help does not list %s:\n%s", name, out)
		}
	}
	if !slices.Contains(listed, "bench-e2e") {
		t.Errorf("make help does not list bench-e2e")
	}
}

// TestCheckFormatsNewFiles runs `make check` in a fresh git repository holding the
// Makefile: a new file git does not track yet is checked by gofmt, and a tracked file
// deleted from the work tree is not looked for.
func TestCheckFormatsNewFiles(t *testing.T) {
	repo := t.TempDir()
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := os.ReadFile("tools.sh")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, s string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(repo, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, name), []byte(s), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("Makefile", string(mk), 0o644)
	write("internal/makefile/tools.sh", string(tools), 0o755)
	write("go.mod", "module example.com/checktest\n\ngo 1.26\n", 0o644)
	write("go.sum", "", 0o644)
	write("kept.go", "package checktest\n\n// Kept is tracked and formatted.\nconst Kept = 1\n", 0o644)
	write("gone.go", "package checktest\n\n// Gone is tracked, then deleted.\nconst Gone = 2\n", 0o644)
	path := os.Getenv("PATH")
	git := func(args ...string) {
		t.Helper()
		if out, code := run(t, path, repo, "git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...); code != 0 {
			t.Fatalf("git %v: %s", args, out)
		}
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "start")
	if err := os.Remove(filepath.Join(repo, "gone.go")); err != nil {
		t.Fatal(err)
	}
	write("handler.go", "package checktest\n\n// New is not staged.\nfunc New( ) int {return 1}\n", 0o644)

	out, code := run(t, path, repo, "make", "--no-print-directory", "check")
	if code == 0 || !strings.Contains(out, "gofmt would change:\nhandler.go\n") {
		t.Errorf("make check with an unformatted new file: exit %d, want it named:\n%s", code, out)
	}
	if strings.Contains(out, "gone.go") || strings.Contains(out, "no such file") {
		t.Errorf("make check looked for the deleted file:\n%s", out)
	}

	write("handler.go", "package checktest\n\n// New is not staged.\nfunc New() int { return 1 }\n", 0o644)
	if out, code := run(t, path, repo, "make", "--no-print-directory", "check"); code != 0 || strings.Contains(out, "no such file") {
		t.Errorf("make check with every file formatted: exit %d\n%s", code, out)
	}
}

// TestDemoSaysItBuilds: `make demo` announces the build of idemctl, the long silent
// step on a cold Go cache, before it starts it, and runs the binary it built.
func TestDemoSaysItBuilds(t *testing.T) {
	out, code := run(t, os.Getenv("PATH"), root, "make", "--no-print-directory", "-n", "demo")
	if code != 0 {
		t.Fatalf("make -n demo: exit %d\n%s", code, out)
	}
	say := strings.Index(out, "demo: building idemctl")
	build := strings.Index(out, "build -o .aws-sam/idemctl ./cmd/idemctl")
	start := strings.Index(out, "-- .aws-sam/idemctl demo")
	if say < 0 || build < say || start < build {
		t.Errorf("make demo should say it builds idemctl, build it, then run it:\n%s", out)
	}
}

// TestActionlintInMakeTest: make test runs make actionlint, and make actionlint fails on
// a workflow with a mistake (run in a fresh repository holding the Makefile and such a
// workflow) and passes on this repository's workflows.
func TestActionlintInMakeTest(t *testing.T) {
	out, code := run(t, os.Getenv("PATH"), root, "make", "--no-print-directory", "-n", "test")
	if code != 0 || !strings.Contains(out, "github.com/rhysd/actionlint/cmd/actionlint@") {
		t.Errorf("make -n test: exit %d, and it does not run actionlint:\n%s", code, out)
	}
	if out, code := run(t, os.Getenv("PATH"), root, "make", "--no-print-directory", "actionlint"); code != 0 {
		t.Errorf("make actionlint on .github/workflows: exit %d\n%s", code, out)
	}

	repo := t.TempDir()
	for name, mode := range map[string]os.FileMode{"Makefile": 0o644, "internal/makefile/tools.sh": 0o755} {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(repo, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, name), b, mode); err != nil {
			t.Fatal(err)
		}
	}
	bad := "on: push\njobs:\n  test:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo ${{ github.no_such_property }}\n"
	if err := os.MkdirAll(filepath.Join(repo, ".github", "workflows"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, ".github", "workflows", "bad.yml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, os.Getenv("PATH"), repo, "git", "init", "-q"); code != 0 { // actionlint looks for the repository's root
		t.Fatalf("git init: %s", out)
	}
	out, code = run(t, os.Getenv("PATH"), repo, "make", "--no-print-directory", "actionlint")
	if code == 0 || !strings.Contains(out, "no_such_property") {
		t.Errorf("make actionlint on a workflow with a mistake: exit %d, want a failure naming it:\n%s", code, out)
	}
}
