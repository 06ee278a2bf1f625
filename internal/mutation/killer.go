package mutation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Killer is a go test command that may kill a mutant: Packages (patterns) with Args for
// the test binary. It runs a mutant only when one of its packages' tests imports the
// mutated package (directly or not), and only on those packages.
type Killer struct {
	Name     string
	Packages []string // go test patterns; "{target}" is the mutated package itself
	Args     []string // after the packages: -run, the test binary's own flags
	// With schemata the killer's test binaries run directly: Run is the -test.run of a
	// seeded killer's test, Flags the binary's own flags for every run, and Seeds > 0
	// makes it a seeded killer (the simulator): seeds 1 to Seeds, in blocks, each run
	// with -first and -schedules. A killer without Run and Seeds runs its packages'
	// tests, each alone in its baseline.
	Run   string
	Flags []string
	Seeds int
	// AWS: the killer needs the local AWS endpoint (moto), AWS_ENDPOINT_URL.
	AWS bool
}

// Outcome is what one killer run did to a mutant.
type Outcome string

// Outcomes of one run of a killer.
const (
	Passed      Outcome = "passed"       // every test passed: the mutant lived through it
	Failed      Outcome = "failed"       // a test failed: killed
	TimedOut    Outcome = "timed-out"    // the run outlived its timeout: killed, reported apart
	BuildFailed Outcome = "build-failed" // the mutant (or a test package with it) did not build
)

// run is one go test invocation.
type run struct {
	Dir      string
	Overlay  string // the -overlay file, or ""
	Packages []string
	Args     []string
	Env      []string // added to the driver's environment
	Timeout  time.Duration
	Cover    string // with CoverPkg: -coverprofile to this file
	CoverPkg string
}

var (
	failLine    = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)
	buildFailed = regexp.MustCompile(`\[(build|setup) failed\]`)
)

// exec runs go test and classifies its end. detail names the failed tests (or the build
// error's first lines); out is the whole output.
func (r run) exec(ctx context.Context) (o Outcome, detail string, out []byte, took time.Duration, err error) {
	args := []string{"test", "-count=1", "-failfast", "-vet=off", "-timeout", r.Timeout.String()}
	if r.Overlay != "" {
		args = append(args, "-overlay", r.Overlay)
	}
	if r.Cover != "" {
		args = append(args, "-coverpkg", r.CoverPkg, "-coverprofile", r.Cover)
	}
	args = append(args, r.Packages...)
	args = append(args, r.Args...)
	// The go command's own deadline: go test's -timeout ends a hung test binary with a
	// stack dump; this one ends what is left (a hung build, the process group), a minute
	// later.
	ctx, cancel := context.WithTimeout(ctx, r.Timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = r.Dir
	cmd.Env = append(os.Environ(), r.Env...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	setProcessGroup(cmd)
	start := time.Now()
	runErr := cmd.Run()
	took = time.Since(start)
	out = buf.Bytes()
	o, detail, err = classify(out, runErr, ctx.Err(), r.Timeout)
	if err != nil {
		return "", "", out, took, fmt.Errorf("mutation: go %s: %w", strings.Join(args, " "), err)
	}
	return o, detail, out, took, nil
}

// classify says how a go test command or a test binary ended: runErr is its error,
// ctxErr its context's (set when the driver's deadline, timeout plus a minute, ended it).
func classify(out []byte, runErr, ctxErr error, timeout time.Duration) (Outcome, string, error) {
	switch {
	case runErr == nil:
		return Passed, "", nil
	case ctxErr != nil:
		return TimedOut, "no end after " + (timeout + time.Minute).String(), nil //nolint:nilerr // a run the deadline ended is an outcome, not an error
	case bytes.Contains(out, []byte("panic: test timed out after")):
		return TimedOut, "-test.timeout " + timeout.String(), nil
	case buildFailed.Match(out):
		return BuildFailed, firstLines(out, 3), nil
	}
	var exit *exec.ExitError
	if !errors.As(runErr, &exit) {
		return "", "", runErr
	}
	names := failedTests(out)
	if len(names) == 0 {
		return Failed, firstLines(out, 3), nil
	}
	if len(names) > 4 {
		names = append(names[:4], fmt.Sprintf("and %d more", len(names)-4))
	}
	return Failed, strings.Join(names, ", "), nil
}

// failedTests lists the tests (and subtests) a go test output says failed, in order.
func failedTests(out []byte) []string {
	names := []string{}
	for _, m := range failLine.FindAllSubmatch(out, -1) {
		if n := string(m[1]); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

func firstLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}
