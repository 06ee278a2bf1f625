package tooling_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/internal/adapt"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/tooling"
)

// A moto of its own under make test (AWSTEST_OWN_MOTO=1): the consumer's tests in the
// copy load it as much as the packages beside them load theirs.
func TestMain(m *testing.M) { os.Exit(awstest.MainOwn(m)) }

// root is the repository.
const root = "../.."

func kept() []tooling.Entry { return slices.Concat(tooling.Production, tooling.TestSupport) }

// under reports whether path (slash-separated, from the root) is entry or inside it.
func under(path string, e tooling.Entry) bool {
	return path == e.Path || strings.HasPrefix(path, e.Path+"/")
}

// TestRemovingTheToolingLeavesTheConsumerGreen copies the files git tracks (as they are
// in the work tree), deletes every Deletable folder from the copy, and checks that what
// is left builds, vets, passes the consumer's own tests against this package's moto and
// lints: what a production team that drops the development tooling keeps working.
func TestRemovingTheToolingLeavesTheConsumerGreen(t *testing.T) {
	start := time.Now()
	src, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	n, err := adapt.CopyWorkTree(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("copy: %d files (tracked, and new ones git does not ignore) in %s (%s)", n, dir, time.Since(start).Round(time.Millisecond))

	for _, e := range tooling.Deletable {
		if _, err := os.Stat(filepath.Join(dir, e.Path)); err != nil {
			t.Errorf("%s is listed as deletable but is not in the copy (%v): update internal/tooling/tooling.go", e.Path, err)
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Path)); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range kept() {
		if _, err := os.Stat(filepath.Join(dir, e.Path)); err != nil {
			t.Errorf("%s is listed as kept but is not in the copy (%v): update internal/tooling/tooling.go", e.Path, err)
		}
	}
	if t.Failed() {
		return
	}

	// The copy has none of the tooling's packages left.
	module := strings.TrimSpace(run(t, dir, nil, "go", "list", "-m"))
	pkgs := strings.Fields(run(t, dir, nil, "go", "list", "./..."))
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		for _, e := range tooling.Deletable {
			if under(rel, e) {
				t.Errorf("go list ./... in the copy still names %s, under %s", p, e.Path)
			}
		}
	}
	t.Logf("the copy holds %d packages", len(pkgs))

	// A kept package that imports a deleted one fails to build (non-test code) or to vet
	// (test code: vet type-checks every package's tests).
	run(t, dir, nil, "go", "build", "./...")
	run(t, dir, nil, "go", "vet", "./...")
	// The consumer's own tests (the functions' and the examples'), on this package's moto
	// (not one more of their own). idem's tests are left to make test's own run of them:
	// vet above type-checked them without the tooling, and they read no file outside idem/.
	env := []string{"AWS_ENDPOINT_URL=" + awstest.Endpoint(t), awstest.OwnMotoVar + "="}
	// (-vet=off: go vet ./... above checked them.)
	t.Logf("in the copy:\n%s", run(t, dir, env, "go", "test", "-count=1", "-vet=off", "./functions/..."))

	// Last, so that a machine without cfn-lint has run every other step when it skips.
	if _, err := exec.LookPath("cfn-lint"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("cfn-lint is not on PATH, and CI=%s: install it (python3 -m pip install 'cfn-lint==1.51.*')", os.Getenv("CI"))
		}
		t.Skipf("every other step passed (%s); cfn-lint is not on PATH, so template.yaml was not linted: python3 -m pip install 'cfn-lint==1.51.*'",
			time.Since(start).Round(time.Second))
	}
	run(t, dir, nil, "cfn-lint", "template.yaml")
	t.Logf("all steps: %s", time.Since(start).Round(time.Millisecond))
}

// run runs a command in dir with env added to the test's environment and returns its
// output; a failure fails the test with the output. It logs how long the command took.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		// End the command before the test binary's timeout, to report its output.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-30*time.Second))
		defer cancel()
	}
	out, took, err := adapt.Run(ctx, dir, env, name, args...)
	t.Logf("%s %s: %s", name, strings.Join(args, " "), took.Round(time.Millisecond))
	if err != nil {
		t.Fatalf("%s %s in the copy without the tooling: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// TestEveryPackageIsSorted: each Go package of the repository is in exactly one entry of
// the lists, so that a new package is placed on purpose.
func TestEveryPackageIsSorted(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", root+"/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	src, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	all := slices.Concat(kept(), tooling.Deletable)
	for _, d := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(src, d)
		if err != nil {
			t.Fatal(err)
		}
		rel = filepath.ToSlash(rel)
		var in []string
		for _, e := range all {
			if under(rel, e) {
				in = append(in, e.Path)
			}
		}
		if len(in) != 1 {
			t.Errorf("package %s is in %d entries of internal/tooling's lists %v, want 1", rel, len(in), in)
		}
	}
}

// TestDocsNameEveryFolder: docs/tooling.md names every entry of the lists, and README.md's
// "What you can delete" names every deletable folder.
func TestDocsNameEveryFolder(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(root, "docs", "tooling.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range slices.Concat(kept(), tooling.Deletable) {
		name := e.Path
		if filepath.Ext(name) == "" && !strings.HasPrefix(name, "go.") && name != "Makefile" {
			name += "/"
		}
		if !bytes.Contains(page, []byte("`"+name+"`")) {
			t.Errorf("docs/tooling.md does not name `%s`", name)
		}
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := regexp.MustCompile(`(?s)\n## What you can delete\n(.*?)\n## `).FindSubmatch(readme)
	if section == nil {
		t.Fatal(`README.md has no section "What you can delete"`)
	}
	for _, e := range tooling.Deletable {
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(filepath.Base(e.Path)) + `\b`).Match(section[1]) {
			t.Errorf("README.md's What you can delete does not name %s", e.Path)
		}
	}
}
