package mutation

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The schemata path of Run (Config.Schemata): every target package is compiled once with
// its pending mutants behind a switch (schema.go), each killer's test binaries are
// built once, and a mutant is a few runs of them with SchemaActiveVar naming it.
//
// The baselines run each killer's units on the schemata binaries with no mutant active,
// recording what each unit reaches (SchemaReachVar) and how long it takes: a test alone
// (a killer that runs its packages' tests), or a block of seeds (a seeded killer, the
// simulator). A mutant runs, killer after killer, only the units that reach its site:
// seed blocks in order, each contiguous run of them one invocation that stops at the
// first failed seed; tests fastest first, in tiers (up to 0.5 s, up to 5 s, the rest),
// each tier one invocation of each binary with -test.failfast. A failure is run again
// (the failed tests alone, or the failed seed) before it counts: a test that passes the
// second time is recorded as flaky and does not kill.
//
// A mutant whose site is not in the schemata (Schema.Fallback) is built as without them,
// the one mutated file given to go test -c -overlay, once for each binary its units
// need, and then runs the same way; its reach is its probe's.

// unit is what a baseline runs alone: one test of a package, or a block of seeds.
type unit struct {
	bin      *binary
	test     string // the test's name, or the seeded killer's test (Killer.Run)
	first, n int    // a seed block: seeds first to first+n-1
	took     time.Duration
	reach    []uint64 // bit i: the unit reaches mutant i's site
}

func (u *unit) seeded() bool { return u.n > 0 }

func (u *unit) reaches(id int) bool {
	i := id / 64
	return i < len(u.reach) && u.reach[i]&(1<<(id%64)) != 0
}

func (u *unit) String() string {
	if u.seeded() {
		return fmt.Sprintf("seeds %d-%d", u.first, u.first+u.n-1)
	}
	return u.test
}

// binary is one package's test binary built with the schemata.
type binary struct {
	pkg, dir, exe string
}

// splan is one killer on one target: its units over the packages that reach it.
type splan struct {
	Killer
	target string
	pkgs   []string
	units  []*unit
}

// schemataRun is the state of one run with schemata.
type schemataRun struct {
	ids      map[string]int    // mutant ID -> number
	fallback map[string]string // mutant ID -> why it is built with an overlay
	always   map[string]bool   // fallback mutants without a probe
	overlay  string            // the schemata's overlay file
	bins     map[string]*binary
	units    map[string][]*unit // killer name + "\x00" + package -> its units
	plans    map[string][]*splan
	maxID    int
}

// compileRisk: the operators whose mutants may not compile (a variable left unused, a
// constant division by zero, a missing return): each is type-checked alone first.
var compileRisk = map[Operator]bool{RemoveAssignment: true, RemoveCall: true, ArithmeticBase: true, InvertNegatives: true, InvertLoopCtrl: true}

// runSchemata runs the pending mutants todo of all with schemata, writing rep.
func (c *Config) runSchemata(ctx context.Context, rep *Report, all []Result, todo []int, byPkg map[string]*Package, pkgs []*Package) error {
	start := time.Now()
	// The mutants that do not compile, checked alone.
	var run []int
	for _, i := range todo {
		r := &all[i]
		if compileRisk[r.Operator] {
			p := byPkg[r.ID]
			path := filepath.Join(c.Dir, filepath.FromSlash(r.File))
			if why := p.CompileError(path, r.Apply(p.Source(path))); why != "" {
				r.Status, r.Detail = NotCompiled, why
				continue
			}
		}
		run = append(run, i)
	}
	fmt.Fprintf(c.Log, "mutation: %d of %d mutants do not compile (type-checked alone in %s)\n", len(todo)-len(run), len(todo), since(start))
	if err := rep.Write(c.Out); err != nil {
		return err
	}
	if len(run) == 0 {
		return nil
	}

	// The schemata.
	start = time.Now()
	s := &schemataRun{ids: map[string]int{}, fallback: map[string]string{}, always: map[string]bool{}, bins: map[string]*binary{}, units: map[string][]*unit{}, plans: map[string][]*splan{}}
	byTarget := map[string][]*Mutant{}
	for n, i := range run {
		s.ids[all[i].ID] = n + 1
		byTarget[byPkg[all[i].ID].ImportPath] = append(byTarget[byPkg[all[i].ID].ImportPath], &all[i].Mutant)
	}
	s.maxID = len(run)
	dir := filepath.Join(c.Out, "schema")
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("mutation: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("mutation: %w", err)
	}
	replace := map[string]string{}
	sites := 0
	for pi, p := range pkgs {
		ms := byTarget[p.ImportPath]
		if len(ms) == 0 {
			continue
		}
		sch, err := p.Schema(ms, s.ids, s.maxID)
		if err != nil {
			return err
		}
		sites += sch.Sites
		for path, src := range sch.Files {
			dst := filepath.Join(dir, fmt.Sprintf("%d-%s", pi, filepath.Base(path)))
			if err := os.WriteFile(dst, src, 0o600); err != nil {
				return fmt.Errorf("mutation: %w", err)
			}
			replace[path] = dst
		}
		for id, why := range sch.Fallback {
			s.fallback[id] = why
		}
		for id := range sch.Always {
			s.always[id] = true
		}
	}
	ov, err := json.Marshal(map[string]map[string]string{"Replace": replace})
	if err != nil {
		return fmt.Errorf("mutation: %w", err)
	}
	s.overlay = filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(s.overlay, ov, 0o600); err != nil {
		return fmt.Errorf("mutation: %w", err)
	}
	fmt.Fprintf(c.Log, "mutation: schemata of %d mutants at %d sites in %s; %d mutants fall back to an overlay build each\n",
		len(run), sites, since(start), len(s.fallback))

	// The binaries and the baselines, of the targets with mutants to run.
	for _, p := range pkgs {
		if len(byTarget[p.ImportPath]) == 0 {
			continue
		}
		ps, err := c.schemaBaselines(ctx, s, p.ImportPath)
		if err != nil {
			return err
		}
		s.plans[p.ImportPath] = ps
		for _, pl := range ps {
			var took time.Duration
			for _, u := range pl.units {
				took += u.took
			}
			args := fmt.Sprintf("each of its %d tests alone", len(pl.units))
			if pl.Seeds > 0 {
				args = fmt.Sprintf("-test.run %s %s, seeds 1 to %d in %d blocks", pl.Run, strings.Join(pl.Flags, " "), pl.Seeds, len(pl.units))
			}
			rep.Killers = slices.DeleteFunc(rep.Killers, func(k KillerReport) bool { return k.Killer == pl.Name && k.Target == pl.target })
			rep.Killers = append(rep.Killers, KillerReport{Killer: pl.Name, Target: pl.target, Packages: pl.pkgs, Args: []string{args},
				BaselineSeconds: took.Seconds(), Timeout: fmt.Sprintf("%g x the units run, at least %s", c.TimeoutFactor, c.MinTimeout)})
		}
	}
	if err := rep.Write(c.Out); err != nil {
		return err
	}

	// The mutants.
	return c.runMutants(ctx, rep, all, run, func(ctx context.Context, w int, r Result) (Result, string, error) {
		res, err := c.schemaMutant(ctx, w, s, byPkg[r.ID], r)
		return res, "; " + strings.Join(res.Ran, "; "), err
	})
}

// schemaBaselines builds the binaries of the killers that reach target and runs their
// units' baselines (shared with the other targets).
func (c *Config) schemaBaselines(ctx context.Context, s *schemataRun, target string) ([]*splan, error) {
	var plans []*splan
	whole := func(k Killer) bool { return k.Seeds == 0 && k.Run == "" }
	err := c.eachReaching(ctx, target, whole, func(k Killer, pkgs []string, dirs map[string]string) error {
		pl := &splan{Killer: k, target: target, pkgs: pkgs}
		for _, pkg := range pkgs {
			b, err := c.schemaBinary(ctx, s, pkg, dirs[pkg])
			if err != nil {
				return err
			}
			key := k.Name + "\x00" + pkg
			us, ok := s.units[key]
			if !ok {
				start := time.Now()
				if us, err = c.unitBaselines(ctx, s, k, b); err != nil {
					return err
				}
				s.units[key] = us
				var took time.Duration
				for _, u := range us {
					took += u.took
				}
				fmt.Fprintf(c.Log, "mutation: baseline of %s on %s: %d units, %s of runs, in %s\n", k.Name, pkg, len(us), took.Round(100*time.Millisecond), since(start))
			}
			pl.units = append(pl.units, us...)
		}
		plans = append(plans, pl)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return plans, nil
}

// schemaBinary builds (once a run) the test binary of pkg with the schemata.
func (c *Config) schemaBinary(ctx context.Context, s *schemataRun, pkg, dir string) (*binary, error) {
	if b, ok := s.bins[pkg]; ok {
		return b, nil
	}
	b := &binary{pkg: pkg, dir: dir, exe: filepath.Join(c.Out, "bin", exeName(pkg))}
	start := time.Now()
	if out, err := buildTest(ctx, c.Dir, s.overlay, pkg, b.exe); err != nil {
		return nil, fmt.Errorf("mutation: the schemata test binary of %s: %w\n%s", pkg, err, tail(out, 30))
	}
	fmt.Fprintf(c.Log, "mutation: built %s's test binary with the schemata in %s\n", pkg, since(start))
	s.bins[pkg] = b
	return b, nil
}

func exeName(pkg string) string {
	return strings.NewReplacer("/", "_", ".", "_").Replace(pkg) + ".test"
}

// buildTest runs go test -c for pkg into exe, with overlay when set.
func buildTest(ctx context.Context, dir, overlay, pkg, exe string) ([]byte, error) {
	if err := os.MkdirAll(filepath.Dir(exe), 0o750); err != nil {
		return nil, err
	}
	args := []string{"test", "-c", "-vet=off", "-o", exe}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

// unitBaselines lists the units of killer k on binary b and runs each with no mutant
// active, recording its time and reach; a unit that fails runs once more, alone.
func (c *Config) unitBaselines(ctx context.Context, s *schemataRun, k Killer, b *binary) ([]*unit, error) {
	var us []*unit
	if k.Seeds > 0 {
		blocks := min(20, k.Seeds)
		for i := range blocks {
			first := 1 + i*k.Seeds/blocks
			last := (i + 1) * k.Seeds / blocks
			us = append(us, &unit{bin: b, test: k.Run, first: first, n: last - first + 1})
		}
	} else {
		list := exec.CommandContext(ctx, b.exe, "-test.list", ".*")
		list.Dir = b.dir
		list.Env = c.workerEnv(k, 0)
		out, err := list.Output()
		if err != nil {
			return nil, fmt.Errorf("mutation: %s -test.list: %w\n%s", b.pkg, err, out)
		}
		for name := range strings.FieldsSeq(string(out)) {
			if strings.HasPrefix(name, "Test") || strings.HasPrefix(name, "Example") || strings.HasPrefix(name, "Fuzz") {
				us = append(us, &unit{bin: b, test: name})
			}
		}
	}
	dir := filepath.Join(c.Out, "reach", exeName(k.Name+"/"+b.pkg))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("mutation: %w", err)
	}
	// Seed blocks one at a time (the simulator uses every core); tests Workers at once
	// (as many as the mutants will run at once: the machine may be shared).
	par := c.Workers
	if k.Seeds > 0 {
		par = 1
	}
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	var seq atomic.Int64
	for i, u := range us {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var err error
			for try := 0; try < 2; try++ {
				file := filepath.Join(dir, fmt.Sprintf("%d.txt", seq.Add(1)))
				if err := os.Remove(file); err != nil && !os.IsNotExist(err) {
					mu.Lock()
					firstErr = cmp.Or(firstErr, fmt.Errorf("mutation: %w", err))
					mu.Unlock()
					return
				}
				env := append(c.workerEnv(k, i), SchemaReachVar+"="+file)
				var o Outcome
				var out []byte
				o, _, out, u.took, err = execBinary(ctx, u.bin, c.unitArgs(k, []*unit{u}, 10*time.Minute), env, 10*time.Minute)
				if err == nil && o != Passed {
					err = fmt.Errorf("mutation: the baseline of %s's %s on %s, unmutated (the schemata with none active), %s:\n%s", k.Name, u, u.bin.pkg, o, tail(out, 30))
				}
				if err == nil {
					u.reach, err = readReach(file, s.maxID)
					break
				}
				if ctx.Err() != nil {
					break
				}
			}
			if err != nil {
				mu.Lock()
				firstErr = cmp.Or(firstErr, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return us, firstErr
}

// readReach reads a reach file: a mutant number a line.
func readReach(path string, maxID int) ([]uint64, error) {
	set := make([]uint64, maxID/64+1)
	f, err := os.Open(path) //nolint:gosec // the file this run named
	if os.IsNotExist(err) {
		return set, nil // nothing reached
	}
	if err != nil {
		return nil, fmt.Errorf("mutation: %w", err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil || n < 1 || n > maxID {
			return nil, fmt.Errorf("mutation: %s: bad line %q (%d mutants)", path, sc.Text(), maxID)
		}
		set[n/64] |= 1 << (n % 64)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mutation: %w", err)
	}
	return set, nil
}

// unitArgs are the test binary's arguments that run units (all of one binary): the
// seed range of contiguous blocks, or the tests.
func (c *Config) unitArgs(k Killer, us []*unit, timeout time.Duration) []string {
	args := []string{"-test.count=1", "-test.timeout", timeout.String()}
	if us[0].seeded() {
		last := us[len(us)-1]
		args = append(args, "-test.run", k.Run, "-first", fmt.Sprint(us[0].first), "-schedules", fmt.Sprint(last.first+last.n-us[0].first))
		return append(args, k.Flags...)
	}
	names := make([]string, len(us))
	for i, u := range us {
		names[i] = regexp.QuoteMeta(u.test)
	}
	args = append(args, "-test.failfast", "-test.run", "^("+strings.Join(names, "|")+")$")
	return append(args, k.Flags...)
}

// workerEnv is the environment of a killer's runs on worker w (its moto).
func (c *Config) workerEnv(k Killer, w int) []string {
	env := os.Environ()
	if !k.AWS {
		return env
	}
	if len(c.WorkerAWSEnv) > 0 {
		return append(env, c.WorkerAWSEnv[w%len(c.WorkerAWSEnv)]...)
	}
	return append(env, c.AWSEnv...)
}

// execBinary runs a test binary in its package's directory.
func execBinary(ctx context.Context, b *binary, args, env []string, timeout time.Duration) (Outcome, string, []byte, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.exe, args...)
	cmd.Dir = b.dir
	cmd.Env = env
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	setProcessGroup(cmd)
	start := time.Now()
	runErr := cmd.Run()
	took := time.Since(start)
	out := buf.Bytes()
	o, detail, err := classify(out, runErr, ctx.Err(), timeout)
	if err != nil {
		return "", "", out, took, fmt.Errorf("mutation: %s %s: %w", b.exe, strings.Join(args, " "), err)
	}
	return o, detail, out, took, nil
}

// invocation is one run of one binary over some of a killer's units.
type invocation struct {
	plan  *splan
	bin   *binary
	units []*unit
	took  time.Duration // the units' baselines
}

// schedule orders the runs of a mutant over the units sel of each killer (sel[i] is
// plans[i]'s), cheapest first whatever the killer (a killer's order breaks ties), a run
// of the own killer counting ownBias times cheaper than its baseline: the first seed
// block a seeded killer selects alone (the simulator's kills come in its first seeds),
// then the rest of its blocks, contiguous ones in one run; tests by their baseline, in
// tiers (up to 0.5 s, up to 5 s, the rest), one run per binary and tier.
func schedule(plans []*splan, sel [][]*unit) []invocation {
	var out []invocation
	for i, pl := range plans {
		for _, inv := range invocations(sel[i]) {
			inv.plan = pl
			out = append(out, inv)
		}
	}
	cost := func(inv invocation) time.Duration {
		if inv.plan.Name == OwnKiller {
			return inv.took / ownBias
		}
		return inv.took
	}
	slices.SortStableFunc(out, func(a, b invocation) int { return cmp.Compare(cost(a), cost(b)) })
	return out
}

// ownBias is how much sooner the mutated package's own tests run than their baselines
// alone would put them: they are the likeliest to kill (425 of the 593 kills of the
// report of 2026-11-27: 72%, against 133 by the functions and 35 by the simulator), and
// a mutant they kill waited behind every cheaper run of the other killers (the functions'
// seven packages make up to 21 runs, each a process to start).
const ownBias = 4

// invocations groups one killer's selected units into runs (see schedule).
func invocations(us []*unit) []invocation {
	var out []invocation
	if len(us) == 0 {
		return nil
	}
	if us[0].seeded() {
		us = slices.Clone(us)
		slices.SortFunc(us, func(a, b *unit) int { return a.first - b.first })
		for _, u := range us {
			if n := len(out); n >= 2 { // out[0] is the first block, alone
				last := out[n-1].units[len(out[n-1].units)-1]
				if out[n-1].bin == u.bin && last.first+last.n == u.first {
					out[n-1].units = append(out[n-1].units, u)
					out[n-1].took += u.took
					continue
				}
			}
			out = append(out, invocation{bin: u.bin, units: []*unit{u}, took: u.took})
		}
		return out
	}
	us = slices.Clone(us)
	slices.SortStableFunc(us, func(a, b *unit) int { return cmp.Compare(a.took, b.took) })
	tier := func(d time.Duration) int {
		switch {
		case d <= 500*time.Millisecond:
			return 0
		case d <= 5*time.Second:
			return 1
		}
		return 2
	}
	for t := range 3 {
		var group []invocation
		for _, u := range us {
			if tier(u.took) != t {
				continue
			}
			i := slices.IndexFunc(group, func(inv invocation) bool { return inv.bin == u.bin })
			if i < 0 {
				group = append(group, invocation{bin: u.bin})
				i = len(group) - 1
			}
			group[i].units = append(group[i].units, u)
			group[i].took += u.took
		}
		out = append(out, group...)
	}
	return out
}

var failedSeed = regexp.MustCompile(`seed (\d+) failed`)

// schemaMutant runs one mutant through its target's killers.
func (c *Config) schemaMutant(ctx context.Context, w int, s *schemataRun, p *Package, r Result) (Result, error) {
	start := time.Now()
	id := s.ids[r.ID]
	why, fallback := s.fallback[r.ID]
	r.Build = "schema"
	var fb *fallbackBuild
	if fallback {
		r.Build = "overlay (" + why + ")"
		var err error
		if fb, err = c.newFallback(w, p, r); err != nil {
			return r, err
		}
	}
	r.Status = NotCovered
	plans := s.plans[p.ImportPath]
	sel := make([][]*unit, len(plans))
	for i, pl := range plans {
		for _, u := range pl.units {
			if !c.Coverage || s.always[r.ID] || u.reaches(id) {
				sel[i] = append(sel[i], u)
				r.Status = Survived
			}
		}
	}
	for _, inv := range schedule(plans, sel) {
		if err := c.runInvocation(ctx, w, id, fb, inv, &r); err != nil {
			return r, err
		}
		if r.Status != Survived {
			break
		}
	}
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

// runInvocation runs one invocation of a mutant and records it in r: Ran, and the
// status when it kills (a failure that fails again), times out or does not build.
func (c *Config) runInvocation(ctx context.Context, w, id int, fb *fallbackBuild, inv invocation, r *Result) error {
	pl := inv.plan
	bin := inv.bin
	if fb != nil {
		var detail string
		var err error
		if bin, detail, err = fb.binary(ctx, c, inv.bin); err != nil {
			return err
		}
		if bin == nil {
			r.Status, r.By, r.Detail = NotCompiled, pl.Name, detail
			return nil
		}
	}
	timeout := max(c.MinTimeout, time.Duration(c.TimeoutFactor*float64(inv.took))).Round(time.Second)
	env := append(c.workerEnv(pl.Killer, w), fmt.Sprintf("%s=%d", SchemaActiveVar, id))
	o, detail, out, took, err := execBinary(ctx, bin, c.unitArgs(pl.Killer, inv.units, timeout), env, timeout)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("mutation: %w", ctx.Err())
	}
	what := fmt.Sprintf("%s %s %.1fs", pl.Name, unitsText(inv.units), took.Seconds())
	switch o {
	case Failed:
		again, adetail, ok, flaky, seed, err := c.confirm(ctx, pl.Killer, bin, inv.units, out, env, timeout)
		if err != nil {
			return err
		}
		if !ok {
			r.Ran = append(r.Ran, what+" failed ("+detail+"), passed again alone: flaky, not counted")
			// The run stopped at that failure (-test.failfast, -maxfailed 1): what it
			// did not reach runs now, the flaky units left out.
			if rest := untried(inv.units, flaky, seed); len(rest) > 0 {
				return c.runInvocation(ctx, w, id, fb, invocation{plan: pl, bin: inv.bin, units: rest, took: inv.took}, r)
			}
			return nil
		}
		r.Ran = append(r.Ran, what+" failed", again)
		r.Status, r.By, r.Detail = Killed, pl.Name, adetail
	case TimedOut:
		r.Ran = append(r.Ran, what+" timed out")
		r.Status, r.By, r.Detail = TimedOutStatus, pl.Name, detail
	case BuildFailed:
		r.Status, r.By, r.Detail = NotCompiled, pl.Name, detail
	default:
		r.Ran = append(r.Ran, what)
	}
	return nil
}

func unitsText(us []*unit) string {
	if us[0].seeded() {
		last := us[len(us)-1]
		return fmt.Sprintf("seeds %d-%d", us[0].first, last.first+last.n-1)
	}
	if len(us) == 1 {
		return us[0].test
	}
	return fmt.Sprintf("%d tests", len(us))
}

// untried returns the units of a run that stopped at a failure which then passed alone
// (flaky: the failed tests, or the failed seed): for tests, every unit but the flaky
// ones; for seed blocks, the seeds after the failed one. Nothing when the failure named
// no test or seed (the whole run was tried again).
func untried(us, flaky []*unit, seed int) []*unit {
	var rest []*unit
	if len(us) == 0 || slices.Equal(us, flaky) {
		return nil
	}
	if us[0].seeded() {
		if seed == 0 {
			return nil
		}
		for _, u := range us {
			switch end := u.first + u.n - 1; {
			case end <= seed:
			case u.first > seed:
				rest = append(rest, u)
			default:
				tail := *u
				tail.first, tail.n = seed+1, end-seed
				rest = append(rest, &tail)
			}
		}
		return rest
	}
	for _, u := range us {
		if !slices.Contains(flaky, u) {
			rest = append(rest, u)
		}
	}
	return rest
}

// confirm runs a failure again: the failed tests alone, or the first failed seed. It
// reports the run and the detail, whether it failed again (or timed out), and what it
// ran again: the units, and the seed (0 for tests).
func (c *Config) confirm(ctx context.Context, k Killer, bin *binary, us []*unit, out []byte, env []string, timeout time.Duration) (string, string, bool, []*unit, int, error) {
	var again []*unit
	detail := ""
	seed := 0
	if us[0].seeded() {
		for _, m := range failedSeed.FindAllSubmatch(out, -1) {
			if n, err := strconv.Atoi(string(m[1])); err == nil && (seed == 0 || n < seed) {
				seed = n
			}
		}
		if seed > 0 {
			again = []*unit{{bin: bin, test: k.Run, first: seed, n: 1}}
			detail = fmt.Sprintf("%s: seed %d", strings.Trim(k.Run, "^$"), seed)
		}
	} else {
		var names []string
		for _, n := range failedTests(out) {
			if !strings.Contains(n, "/") {
				names = append(names, n)
			}
		}
		for _, u := range us {
			if slices.Contains(names, u.test) {
				again = append(again, u)
			}
		}
		detail = strings.Join(names, ", ")
	}
	if len(again) == 0 { // no test named (a crash): the same run again
		again, seed = us, 0
		detail = firstLines(out, 3)
	}
	o, d2, _, took, err := execBinary(ctx, bin, c.unitArgs(k, again, timeout), env, timeout)
	if err != nil {
		return "", "", false, nil, 0, err
	}
	run := fmt.Sprintf("again: %s %.1fs %s", unitsText(again), took.Seconds(), o)
	if detail == "" {
		detail = d2
	}
	return run, detail, o == Failed || o == TimedOut, again, seed, nil
}

// fallbackBuild is one mutant built without the schemata: the mutated file given to
// go test -c -overlay, once for each binary its runs need.
type fallbackBuild struct {
	overlay string
	dir     string
	bins    map[string]*binary
	failed  string
}

func (c *Config) newFallback(w int, p *Package, r Result) (*fallbackBuild, error) {
	dir := filepath.Join(c.Out, fmt.Sprintf("worker%d", w))
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("mutation: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("mutation: %w", err)
	}
	path := filepath.Join(c.Dir, filepath.FromSlash(r.File))
	mutated := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(mutated, r.Apply(p.Source(path)), 0o600); err != nil {
		return nil, fmt.Errorf("mutation: %w", err)
	}
	ov, err := json.Marshal(map[string]map[string]string{"Replace": {path: mutated}})
	if err != nil {
		return nil, fmt.Errorf("mutation: %w", err)
	}
	f := &fallbackBuild{overlay: filepath.Join(dir, "overlay.json"), dir: dir, bins: map[string]*binary{}}
	if err := os.WriteFile(f.overlay, ov, 0o600); err != nil {
		return nil, fmt.Errorf("mutation: %w", err)
	}
	return f, nil
}

// binary is the mutant's build of the schemata binary b; nil and the error's first
// lines when it does not build.
func (f *fallbackBuild) binary(ctx context.Context, c *Config, b *binary) (*binary, string, error) {
	if f.failed != "" {
		return nil, f.failed, nil
	}
	if fb, ok := f.bins[b.pkg]; ok {
		return fb, "", nil
	}
	fb := &binary{pkg: b.pkg, dir: b.dir, exe: filepath.Join(f.dir, exeName(b.pkg))}
	out, err := buildTest(ctx, c.Dir, f.overlay, b.pkg, fb.exe)
	if ctx.Err() != nil {
		return nil, "", fmt.Errorf("mutation: %w", ctx.Err())
	}
	if err != nil {
		f.failed = firstLines(out, 3)
		return nil, f.failed, nil //nolint:nilerr // a mutant that does not build is an outcome (not compiled), not an error
	}
	f.bins[b.pkg] = fb
	return fb, "", nil
}
