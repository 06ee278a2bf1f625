package mutation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config is a mutation run.
type Config struct {
	// Dir is the module's root.
	Dir string
	// Packages are the target packages (go list patterns, from Dir).
	Packages []string
	// Files, when set, keeps the target files whose slash path from Dir it matches.
	Files *regexp.Regexp
	// Operators are the operators enabled.
	Operators []Operator
	// Killers, cheapest first: a mutant runs them in this order until one kills it.
	Killers []Killer
	// AWSEnv is added to the environment of the killers that need AWS (AWS_ENDPOINT_URL
	// and the like).
	AWSEnv []string
	// TimeoutFactor times a killer's baseline (at least MinTimeout) is its timeout for a
	// mutant: a mutant that runs longer is counted killed (timed out).
	TimeoutFactor float64
	MinTimeout    time.Duration
	// Workers is how many mutants run at once.
	Workers int
	// Max, when > 0, runs at most that many pending mutants this time (the rest stay
	// pending in the report, for the next run).
	Max int
	// Out is the folder of mutation.json and mutation.md (and the overlays while running).
	Out string
	// Fresh ignores an earlier report; RetrySurvivors runs its survivors again, and with
	// OnlySurvivors nothing else (not the mutants still pending).
	Fresh, RetrySurvivors, OnlySurvivors bool
	// Coverage: the baselines record each killer's coverage of the target, and a mutant
	// runs only the killers that run its line (none: not covered).
	Coverage bool
	// PerTest (with Coverage): the baselines of the killers without arguments (a
	// package's whole tests) also record each top-level test's coverage, run alone; a
	// mutant then runs only the tests that run its line.
	PerTest bool
	// DryRun lists the mutants (report with every one pending) and runs nothing.
	DryRun bool
	// Schemata compiles each target package once with every pending mutant behind a
	// switch (schemata.go): each killer's test binaries are built once, a mutant runs
	// them. Without it, each mutant is built with go test -overlay, once per killer.
	Schemata bool
	// WorkerAWSEnv, when set, is each worker's AWSEnv (a moto each), with Schemata.
	WorkerAWSEnv [][]string
	// Log receives a line per mutant and the progress lines, every Progress.
	Log      io.Writer
	Progress time.Duration
}

// plan is one killer on one target: the packages it runs and its timeout.
type plan struct {
	Killer
	target   string
	pkgs     []string
	baseline time.Duration
	timeout  time.Duration
	coverage *Coverage
	tests    []testCoverage // with Config.PerTest: each test's coverage
}

// Run enumerates the mutants, runs the baselines and the pending mutants, and writes the
// report. It returns the report (also on error, as far as it got).
func Run(ctx context.Context, c Config) (*Report, error) {
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return nil, fmt.Errorf("mutation: %w", err)
	}
	c.Dir = dir
	if c.Out, err = filepath.Abs(c.Out); err != nil {
		return nil, fmt.Errorf("mutation: %w", err)
	}
	if c.Workers < 1 {
		c.Workers = 1
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if err := os.MkdirAll(c.Out, 0o750); err != nil {
		return nil, fmt.Errorf("mutation: %w", err)
	}
	pkgs, err := LoadPackages(ctx, c.Dir, c.Packages)
	if err != nil {
		return nil, err
	}
	module, err := modulePath(ctx, c.Dir)
	if err != nil {
		return nil, err
	}
	rep := &Report{Module: module, Operators: c.Operators}
	if c.Files != nil {
		rep.Files = c.Files.String()
	}
	var all []Result
	byPkg := map[string]*Package{}
	for _, p := range pkgs {
		rep.Targets = append(rep.Targets, p.ImportPath)
		for _, f := range p.Files {
			rel, err := filepath.Rel(c.Dir, f)
			if err != nil {
				return nil, fmt.Errorf("mutation: %w", err)
			}
			rel = filepath.ToSlash(rel)
			if c.Files != nil && !c.Files.MatchString(rel) {
				continue
			}
			for _, m := range p.Mutants(f, rel, c.Operators) {
				r := Result{Mutant: m}
				if m.SkipReason != "" {
					r.Status = Skipped
				}
				all = append(all, r)
				byPkg[m.ID] = p
			}
		}
	}
	retried := map[string]bool{} // earlier survivors run again (RetrySurvivors)
	inScope := len(all)          // the report's mutants of other files come after these
	if !c.Fresh {
		old, err := ReadReport(filepath.Join(c.Out, "mutation.json"))
		if err != nil {
			return nil, err
		}
		prev := map[string]Result{}
		for _, r := range old.Mutants {
			prev[r.ID] = r
		}
		scoped := map[string]bool{}
		for i, r := range all {
			scoped[r.File] = true
			if o, ok := prev[r.ID]; ok && r.Status == "" {
				if decided(o.Status, c.RetrySurvivors) {
					all[i] = o
				} else if o.Status == Survived || o.Status == NotCovered {
					retried[r.ID] = true
				}
			}
		}
		kept, err := c.outOfScope(old.Mutants, scoped)
		if err != nil {
			return nil, err
		}
		all = append(all, kept...)
		rep.Killers = old.Killers
	}
	var todo []int
	for i, r := range all[:inScope] { // a pending mutant of another file waits for its own run
		if r.Status == "" && (!c.OnlySurvivors || retried[r.ID]) {
			todo = append(todo, i)
		}
	}
	todo = interleave(all, todo)
	if c.Max > 0 && len(todo) > c.Max {
		todo = todo[:c.Max]
	}
	rep.Mutants = all
	rep.Updated = time.Now()
	sum := Summarize(all)
	fmt.Fprintf(c.Log, "mutation: %d mutants in %d target packages: %d decided before, %d logging only, %d pending, %d to run now\n",
		len(all), len(pkgs), len(all)-sum.Skipped-sum.Pending, sum.Skipped, sum.Pending, len(todo))
	if len(todo) == 0 || c.DryRun {
		return rep, rep.Write(c.Out)
	}

	if c.Schemata {
		err := c.runSchemata(ctx, rep, all, todo, byPkg, pkgs)
		if err == nil && ctx.Err() != nil {
			err = fmt.Errorf("mutation: %w", ctx.Err())
		}
		return rep, err
	}

	// The baselines, of the targets with mutants to run.
	need := map[string]bool{}
	for _, i := range todo {
		need[byPkg[all[i].ID].ImportPath] = true
	}
	plans := map[string][]*plan{}
	earlier := rep.Killers // kept for the killers and targets not run again now
	rep.Killers = nil
	for _, p := range pkgs {
		if !need[p.ImportPath] {
			continue
		}
		ps, err := c.baselines(ctx, p.ImportPath)
		if err != nil {
			return rep, err
		}
		plans[p.ImportPath] = ps
		for _, pl := range ps {
			rep.Killers = append(rep.Killers, KillerReport{Killer: pl.Name, Target: pl.target, Packages: pl.pkgs, Args: pl.Args,
				BaselineSeconds: pl.baseline.Seconds(), Timeout: pl.timeout.String()})
		}
	}
	for _, k := range earlier {
		if !slices.ContainsFunc(rep.Killers, func(n KillerReport) bool { return n.Killer == k.Killer && n.Target == k.Target }) {
			rep.Killers = append(rep.Killers, k)
		}
	}
	if err := rep.Write(c.Out); err != nil {
		return rep, err
	}

	// The mutants.
	firstErr := c.runMutants(ctx, rep, all, todo, func(ctx context.Context, w int, r Result) (Result, string, error) {
		res, err := c.mutant(ctx, w, byPkg[r.ID], r, plans[byPkg[r.ID].ImportPath])
		return res, "", err
	})
	if firstErr == nil && ctx.Err() != nil {
		firstErr = fmt.Errorf("mutation: %w", ctx.Err())
	}
	return rep, firstErr
}

// outOfScope keeps the earlier results of files outside this run's scope (another
// -files) whose content has not changed since: a run over part of the files adds to the
// report instead of replacing it.
func (c *Config) outOfScope(old []Result, scoped map[string]bool) ([]Result, error) {
	hashes := map[string]string{}
	var kept []Result
	for _, r := range old {
		if scoped[r.File] {
			continue
		}
		h, ok := hashes[r.File]
		if !ok {
			src, err := os.ReadFile(filepath.Join(c.Dir, filepath.FromSlash(r.File)))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("mutation: %w", err)
			}
			if err == nil {
				h = fileHash(src)
			}
			hashes[r.File] = h
		}
		if h == r.FileHash {
			kept = append(kept, r)
		}
	}
	return kept, nil
}

// interleave orders the mutants to run one file after another in turn (the first of each
// file, then the second, ...), so that a run stopped early (or -max) has a sample of every
// file.
func interleave(all []Result, todo []int) []int {
	var files []string
	byFile := map[string][]int{}
	for _, i := range todo {
		f := all[i].File
		if _, ok := byFile[f]; !ok {
			files = append(files, f)
		}
		byFile[f] = append(byFile[f], i)
	}
	out := make([]int, 0, len(todo))
	for n := 0; len(out) < len(todo); n++ {
		for _, f := range files {
			if n < len(byFile[f]) {
				out = append(out, byFile[f][n])
			}
		}
	}
	return out
}

func by(r Result) string {
	if r.By == "" {
		return ""
	}
	return " by " + r.By + ": " + cellText(r.Detail)
}

// baselines runs each killer that reaches target on the unmutated code (with coverage
// when c.Coverage): it must pass, and its duration sets the killer's timeout.
func (c *Config) baselines(ctx context.Context, target string) ([]*plan, error) {
	var plans []*plan
	whole := func(k Killer) bool { return len(k.Args) == 0 }
	err := c.eachReaching(ctx, target, whole, func(k Killer, pkgs []string, dirs map[string]string) error {
		pl := &plan{Killer: k, target: target, pkgs: pkgs}
		r := run{Dir: c.Dir, Packages: pkgs, Args: k.Args, Timeout: 60 * time.Minute}
		if k.AWS {
			r.Env = c.AWSEnv
		}
		if c.Coverage {
			r.Cover = filepath.Join(c.Out, "cover-"+strings.ReplaceAll(k.Name+"-"+target, "/", "_")+".out")
			r.CoverPkg = target
		}
		fmt.Fprintf(c.Log, "mutation: baseline of %s for %s: go test %s %s\n", k.Name, target, strings.Join(pkgs, " "), strings.Join(k.Args, " "))
		o, detail, out, took, err := r.exec(ctx)
		if err != nil {
			return err
		}
		if o != Passed {
			return fmt.Errorf("mutation: the baseline of killer %s for %s, unmutated, %s (%s): fix it before mutating\n%s", k.Name, target, o, detail, tail(out, 40))
		}
		pl.timeout = max(c.MinTimeout, time.Duration(c.TimeoutFactor*float64(took))).Round(time.Second)
		pl.baseline = took
		if c.Coverage {
			if pl.coverage, err = ReadCoverage(r.Cover); err != nil {
				return err
			}
		}
		fmt.Fprintf(c.Log, "mutation: baseline of %s for %s passed in %s; timeout %s\n", k.Name, target, took.Round(time.Second), pl.timeout)
		if c.PerTest && c.Coverage && whole(k) {
			start := time.Now()
			if err := c.perTest(ctx, pl, dirs); err != nil {
				return err
			}
			fmt.Fprintf(c.Log, "mutation: %s for %s: the coverage of each of its %d tests, run alone, in %s\n", k.Name, target, len(pl.tests), since(start))
		}
		plans = append(plans, pl)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return plans, nil
}

// eachReaching calls f with each killer whose tests reach target and the packages it
// runs for it, less those an earlier killer ran whole (whole says which killers do),
// with their directories. No killer reaching target is an error.
func (c *Config) eachReaching(ctx context.Context, target string, whole func(Killer) bool, f func(k Killer, pkgs []string, dirs map[string]string) error) error {
	ranWhole := map[string]bool{}
	reached := false
	for _, k := range c.Killers {
		pkgs, dirs, err := c.reaching(ctx, k, target)
		if err != nil {
			return err
		}
		pkgs = slices.DeleteFunc(pkgs, func(p string) bool { return ranWhole[p] })
		if len(pkgs) == 0 {
			fmt.Fprintf(c.Log, "mutation: %s: killer %s: no package of %v imports it, skipped\n", target, k.Name, k.Packages)
			continue
		}
		if whole(k) {
			for _, p := range pkgs {
				ranWhole[p] = true
			}
		}
		reached = true
		if err := f(k, pkgs, dirs); err != nil {
			return err
		}
	}
	if !reached {
		return fmt.Errorf("mutation: no killer reaches %s", target)
	}
	return nil
}

func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// reaching lists the packages of killer k whose tests import target (directly or not).
func (c *Config) reaching(ctx context.Context, k Killer, target string) ([]string, map[string]string, error) {
	var patterns []string
	for _, p := range k.Packages {
		if p == "{target}" {
			p = target
		}
		patterns = append(patterns, p)
	}
	ls, err := goList(ctx, c.Dir, append([]string{"-test"}, patterns...)...)
	if err != nil {
		return nil, nil, err
	}
	var out []string
	dirs := map[string]string{}
	for _, l := range ls {
		dirs[l.ImportPath] = l.Dir
		base, isTest := strings.CutSuffix(l.ImportPath, ".test")
		if !isTest {
			continue
		}
		if base == target || slices.Contains(l.Deps, target) {
			out = append(out, base)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), dirs, nil
}

// mutant runs one mutant through its target's killers.
func (c *Config) mutant(ctx context.Context, worker int, p *Package, r Result, plans []*plan) (Result, error) {
	start := time.Now()
	path := filepath.Join(c.Dir, filepath.FromSlash(r.File))
	src := r.Apply(p.Source(path))
	if why := p.CompileError(path, src); why != "" {
		r.Status, r.Detail = NotCompiled, why
		r.Seconds = time.Since(start).Seconds()
		return r, nil
	}
	dir := filepath.Join(c.Out, fmt.Sprintf("worker%d", worker))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return r, fmt.Errorf("mutation: %w", err)
	}
	mutated := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(mutated, src, 0o600); err != nil {
		return r, fmt.Errorf("mutation: %w", err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {path: mutated}})
	if err != nil {
		return r, fmt.Errorf("mutation: %w", err)
	}
	ovPath := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ovPath, overlay, 0o600); err != nil {
		return r, fmt.Errorf("mutation: %w", err)
	}
	profileName := p.ImportPath + "/" + filepath.Base(path)
	r.Status = NotCovered
	for _, pl := range plans {
		if pl.coverage != nil && !pl.coverage.Runs(profileName, r.Line, r.Col) {
			continue
		}
		rn := run{Dir: c.Dir, Overlay: ovPath, Packages: pl.pkgs, Args: pl.Args, Timeout: pl.timeout}
		name := pl.Name
		if pl.tests != nil {
			args, ok := pl.selectTests(profileName, r.Line, r.Col)
			if !ok {
				continue
			}
			rn.Args = args
			name = fmt.Sprintf("%s (%d tests)", pl.Name, strings.Count(args[1], "|")+1)
		}
		if pl.AWS {
			rn.Env = c.AWSEnv
		}
		o, detail, _, took, err := rn.exec(ctx)
		if err != nil {
			return r, err
		}
		if ctx.Err() != nil {
			return r, fmt.Errorf("mutation: %w", ctx.Err())
		}
		r.Ran = append(r.Ran, fmt.Sprintf("%s %.1fs", name, took.Seconds()))
		r.Status = Survived
		switch o {
		case Failed:
			r.Status, r.By, r.Detail = Killed, pl.Name, detail
		case TimedOut:
			r.Status, r.By, r.Detail = TimedOutStatus, pl.Name, detail
		case BuildFailed:
			r.Status, r.By, r.Detail = NotCompiled, pl.Name, detail
		}
		if r.Status != Survived {
			break
		}
	}
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

// runMutants runs the mutants of all at the indexes todo on c.Workers workers, each
// through run (which gives the mutant's result and what to add to its log line), writes
// the report after each and logs it, with a progress line; it stops handing out mutants
// at the first error or when ctx ends, and returns the first error.
func (c *Config) runMutants(ctx context.Context, rep *Report, all []Result, todo []int,
	run func(ctx context.Context, worker int, r Result) (Result, string, error)) error {
	var mu sync.Mutex
	var done atomic.Int64
	stop := c.progress(&mu, rep, todo, &done, time.Now())
	defer stop()
	jobs := make(chan int)
	var wg sync.WaitGroup
	var firstErr error
	for w := range c.Workers {
		wg.Go(func() {
			for i := range jobs {
				mu.Lock()
				r := all[i]
				mu.Unlock()
				res, more, err := run(ctx, w, r)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if err == nil {
					all[i] = res
					rep.Updated = time.Now()
					if werr := rep.Write(c.Out); werr != nil && firstErr == nil {
						firstErr = werr
					}
					fmt.Fprintf(c.Log, "mutation: %s:%d %s `%s` -> `%s`: %s%s (%.1fs%s)\n", res.File, res.Line, res.Operator,
						cellText(res.Original), cellText(res.Mutated), res.Status, by(res), res.Seconds, more)
				}
				mu.Unlock()
				done.Add(1)
			}
		})
	}
	for _, i := range todo {
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return firstErr
}

// progress prints a line every c.Progress until the returned function is called.
func (c *Config) progress(mu *sync.Mutex, rep *Report, todo []int, done *atomic.Int64, start time.Time) func() {
	if c.Progress <= 0 {
		return func() {}
	}
	tick := time.NewTicker(c.Progress)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-tick.C:
				mu.Lock()
				var run []Result
				for _, i := range todo {
					run = append(run, rep.Mutants[i])
				}
				s := Summarize(run)
				mu.Unlock()
				d := done.Load()
				el := time.Since(start)
				line := fmt.Sprintf("mutation: %d/%d done, %d killed (%d timed out), %d survived (%d not covered), %d not compiled",
					d, len(todo), s.Killed, s.TimedOut, s.Survived, s.NotCovered, s.NotCompiled)
				if d > 0 {
					per := el / time.Duration(d)
					line += fmt.Sprintf("; %.1fs a mutant, ETA %s", per.Seconds(), (per * time.Duration(int64(len(todo))-d)).Round(time.Second))
				}
				fmt.Fprintln(c.Log, line)
			case <-quit:
				return
			}
		}
	})
	return func() {
		tick.Stop()
		close(quit)
		wg.Wait()
	}
}
