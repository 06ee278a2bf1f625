package mutation

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// testCoverage is one top-level test (or example) of a killer's packages and what it runs
// of the target.
type testCoverage struct {
	name     string
	coverage *Coverage
}

// perTest records, for a killer without test binary arguments (a package's whole tests),
// the coverage of each of its top-level tests run alone: one test binary a package, built
// with coverage of the target, run once a test, parallel at most c.Workers+1 at once. A
// mutant then runs only the tests that run its line (-run '^(A|B)$').
func (c *Config) perTest(ctx context.Context, pl *plan, dirs map[string]string) error {
	bin := filepath.Join(c.Out, "bin")
	if err := os.MkdirAll(bin, 0o750); err != nil {
		return fmt.Errorf("mutation: %w", err)
	}
	type job struct{ pkg, exe, test string }
	var jobs []job
	for _, pkg := range pl.pkgs {
		exe := filepath.Join(bin, strings.NewReplacer("/", "_", ".", "_").Replace(pkg+"-"+pl.target)+".test")
		build := exec.CommandContext(ctx, "go", "test", "-c", "-cover", "-coverpkg", pl.target, "-o", exe, pkg)
		build.Dir = c.Dir
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("mutation: go test -c %s: %w\n%s", pkg, err, out)
		}
		list := exec.CommandContext(ctx, exe, "-test.list", ".*")
		list.Dir = dirs[pkg]
		list.Env = c.env(pl.Killer)
		out, err := list.Output()
		if err != nil {
			return fmt.Errorf("mutation: %s -test.list: %w\n%s", pkg, err, out)
		}
		for _, name := range strings.Fields(string(out)) {
			if strings.HasPrefix(name, "Test") || strings.HasPrefix(name, "Example") || strings.HasPrefix(name, "Fuzz") {
				jobs = append(jobs, job{pkg, exe, name})
			}
		}
	}
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, c.Workers+1)
	var wg sync.WaitGroup
	for i, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			profile := filepath.Join(bin, fmt.Sprintf("%s-%d.cover", pl.Name, i))
			cmd := exec.CommandContext(ctx, j.exe, "-test.run", "^"+regexp.QuoteMeta(j.test)+"$", "-test.count=1",
				"-test.coverprofile", profile, "-test.timeout", "10m")
			cmd.Dir = dirs[j.pkg]
			cmd.Env = c.env(pl.Killer)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			var cov *Coverage
			if err == nil {
				cov, err = ReadCoverage(profile)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("mutation: %s's %s alone, unmutated: %w\n%s", j.pkg, j.test, err, tail(out.Bytes(), 30))
				}
				return
			}
			pl.tests = append(pl.tests, testCoverage{name: j.test, coverage: cov})
		})
	}
	wg.Wait()
	slices.SortFunc(pl.tests, func(a, b testCoverage) int { return strings.Compare(a.name, b.name) })
	return firstErr
}

// selectTests returns the -run argument of the tests of pl that run the line, and false
// when none does.
func (pl *plan) selectTests(file string, line, col int) ([]string, bool) {
	var names []string
	for _, t := range pl.tests {
		if t.coverage.Runs(file, line, col) && !slices.Contains(names, t.name) {
			names = append(names, t.name)
		}
	}
	if len(names) == 0 {
		return nil, false
	}
	return []string{"-run", "^(" + strings.Join(names, "|") + ")$"}, true
}

// env is the environment of a killer's commands.
func (c *Config) env(k Killer) []string {
	if k.AWS {
		return append(os.Environ(), c.AWSEnv...)
	}
	return os.Environ()
}

// since rounds a duration for the log.
func since(t time.Time) time.Duration { return time.Since(t).Round(time.Second) }
