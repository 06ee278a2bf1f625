package mutation

import (
	"bytes"
	"fmt"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEnumerate: each operator's mutants of a small function, without type information.
func TestEnumerate(t *testing.T) {
	src := `package p

func f(xs []int, s string) (n int, err error) {
	for i := 0; i < len(xs); i++ {
		if xs[i] == 0 {
			continue
		}
		n += xs[i] * 2
		n = -n
	}
	if err != nil && s != "" {
		return 0, err
	}
	s = s + "x"
	g(n)
	return n, nil
}

func g(int) {}
`
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range Enumerate(fset, file, []byte(src), "p.go", nil, Operators) {
		got = append(got, fmt.Sprintf("%d %s %s -> %s", m.Line, m.Operator, m.Original, m.Mutated))
		if string(m.Apply([]byte(src))[m.Start:m.Start+len(m.Mutated)]) != m.Mutated {
			t.Errorf("%s: Apply does not put %q at %d", m.ID, m.Mutated, m.Start)
		}
	}
	want := []string{
		"4 conditionals-boundary < -> <=",
		"4 conditionals-negation < -> >=",
		"4 increment-decrement ++ -> --",
		"5 conditionals-negation == -> !=",
		"6 invert-loopctrl continue -> break",
		"8 remove-assignment n += xs[i] * 2 -> _ = xs[i] * 2",
		"8 arithmetic-base * -> /",
		"9 remove-assignment n = -n -> _ = -n",
		"9 invert-negatives - -> ",
		"11 remove-early-return err != nil && s != \"\" -> false && (err != nil && s != \"\")",
		"11 invert-logical && -> ||",
		"11 conditionals-negation != -> ==",
		"11 conditionals-negation != -> ==",
		"14 remove-assignment s = s + \"x\" -> _ = s + \"x\"",
		"15 remove-call g(n) -> _ = 0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("mutants:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestLogOnly: statements that only log are marked skipped, the others not.
func TestLogOnly(t *testing.T) {
	src := `package p

import "log/slog"

type h struct{ log *slog.Logger }

func (x *h) f(n int) int {
	if n > 1 {
		x.log.Info("big", "n", n)
	}
	attrs := []slog.Attr{}
	attrs = append(attrs, slog.Int("n", n))
	if n > 2 {
		n--
	}
	_ = attrs
	return n
}
`
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var skipped, run []string
	for _, m := range Enumerate(fset, file, []byte(src), "p.go", nil, Operators) {
		s := fmt.Sprintf("%d %s", m.Line, m.Operator)
		if m.SkipReason != "" {
			skipped = append(skipped, s)
		} else {
			run = append(run, s)
		}
	}
	wantSkipped := []string{"8 conditionals-boundary", "8 conditionals-negation", "9 remove-call", "12 remove-assignment"}
	wantRun := []string{"13 conditionals-boundary", "13 conditionals-negation", "14 increment-decrement"}
	if !slices.Equal(skipped, wantSkipped) || !slices.Equal(run, wantRun) {
		t.Errorf("skipped %v, want %v; run %v, want %v", skipped, wantSkipped, run, wantRun)
	}
}

// TestFixture runs the driver on testdata/fixture, whose mutants' fates are known: killed,
// survived (one equivalent, one untested), not covered, not compiled, skipped. A second
// run reuses every result.
func TestFixture(t *testing.T) { testFixture(t, false) }

// TestFixtureSchemata: the same with schemata (one build of the fixture's test binary,
// a run of it per mutant), which must reach the same fates; the mutants whose schema is
// refused (a constant where the language wants one) or cannot be written (an
// assignment in an if's init) fall back to an overlay build, and are killed there.
func TestFixtureSchemata(t *testing.T) { testFixture(t, true) }

func testFixture(t *testing.T, schemata bool) {
	out := t.TempDir()
	var log bytes.Buffer
	c := Config{
		Dir: filepath.Join("testdata", "fixture"), Packages: []string{"."}, Operators: Operators,
		Killers:       []Killer{{Name: "own", Packages: []string{"{target}"}}},
		TimeoutFactor: 3, MinTimeout: time.Minute, Out: out, Coverage: true, PerTest: true, Log: &log,
		Schemata: schemata,
	}
	rep, err := Run(t.Context(), c)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	got := map[string]Status{}
	for _, r := range rep.Mutants {
		got[fmt.Sprintf("%d %s", r.Line, r.Operator)] = r.Status
	}
	want := map[string]Status{
		"10 remove-assignment":     Survived,
		"16 remove-call":           Skipped,
		"18 conditionals-boundary": Survived,
		"18 conditionals-negation": Killed,
		"18 remove-early-return":   Killed,
		"27 remove-call":           NotCompiled,
		"32 conditionals-boundary": NotCovered,
		"32 conditionals-negation": NotCovered,
		"32 remove-early-return":   NotCovered,
		"33 invert-negatives":      NotCovered,
		"40 arithmetic-base":       Killed,
		"44 arithmetic-base":       Killed,
		"52 remove-assignment":     Killed,
		"52 remove-early-return":   Killed,
		"53 invert-negatives":      Killed,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %s, want %s", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d mutants %v, want %d", len(got), got, len(want))
	}
	s := Summarize(rep.Mutants)
	if s.Killed != 7 || s.Survived != 6 || s.NotCovered != 4 || s.NotCompiled != 1 || s.Skipped != 1 || fmt.Sprintf("%.1f", s.Score) != "53.8" {
		t.Errorf("summary %+v: want 7 killed, 6 survived (4 not covered), 1 not compiled, 1 skipped, score 53.8", s)
	}
	// Which mutants fall back to an overlay build: the constant's, and the assignment in
	// an if's init; every other runs in the schemata.
	fallback := map[string]string{"40 arithmetic-base": "refused in the schema", "52 remove-assignment": "a statement outside a statement list"}
	for _, r := range rep.Mutants {
		k := fmt.Sprintf("%d %s", r.Line, r.Operator)
		switch {
		case !schemata || r.Status == Skipped || r.Status == NotCompiled:
			if r.Build != "" {
				t.Errorf("%s: build %q, want none", k, r.Build)
			}
		case fallback[k] != "":
			if !strings.HasPrefix(r.Build, "overlay ("+fallback[k]) {
				t.Errorf("%s: build %q, want overlay (%s...)", k, r.Build, fallback[k])
			}
		case r.Build != "schema":
			t.Errorf("%s: build %q, want schema", k, r.Build)
		}
		if r.Status == Killed && (r.By != "own" || !strings.Contains(r.Detail, "Test")) {
			t.Errorf("%s killed by %q (%s), want own and the failed test", k, r.By, r.Detail)
		}
		// Per test: only TestMax runs the lines of Max, not TestNote.
		ranMax := "own (1 tests)"
		if schemata {
			ranMax = "own TestMax "
		}
		if r.Line == 18 && (len(r.Ran) < 1 || !strings.HasPrefix(r.Ran[0], ranMax)) {
			t.Errorf("%s ran %q, want own with the one test that runs line 18", r.ID, r.Ran)
		}
	}
	if schemata && !strings.Contains(log.String(), "built .'s test binary with the schemata") && !strings.Contains(log.String(), "test binary with the schemata") {
		t.Errorf("no schemata build in the log:\n%s", log.String())
	}
	md := rep.Markdown()
	if !strings.Contains(md, "| 53.8% | 15 | 7 | 0 | 6 | 4 | 1 | 1 | 0 |") {
		t.Errorf("the markdown report lacks the figures:\n%s", md)
	}

	// Again: every mutant decided, nothing runs.
	log.Reset()
	again, err := Run(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "0 to run now") || Summarize(again.Mutants) != s {
		t.Errorf("the second run did not reuse the report: %+v\n%s", Summarize(again.Mutants), log.String())
	}

	// The survivors again (after a new test would be written): the 6, and nothing else.
	log.Reset()
	c.RetrySurvivors, c.OnlySurvivors = true, true
	retry, err := Run(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	r := Summarize(retry.Mutants)
	r.Seconds = s.Seconds
	if !strings.Contains(log.String(), "6 to run now") || r != s {
		t.Errorf("the retry of the survivors: %+v, want %+v\n%s", r, s, log.String())
	}
}

// TestSchemataMatchesOverlay runs every mutant of testdata/fixture/schemata twice, built
// alone with go test -overlay and in the schemata, and wants the same fate of each: the
// package holds what a schema could get wrong (evaluation order and count, short
// circuits, break and continue, counters, a named boolean, an endless loop), and its
// mutants' fates are known (written beside its code).
func TestSchemataMatchesOverlay(t *testing.T) {
	if testing.Short() {
		t.Skip("two mutation runs, one with a 10 s time-out")
	}
	fates := map[bool]map[string]Result{}
	for _, schemata := range []bool{false, true} {
		var log bytes.Buffer
		c := Config{
			Dir: filepath.Join("testdata", "fixture"), Packages: []string{"./schemata"}, Operators: Operators,
			Killers:       []Killer{{Name: "own", Packages: []string{"{target}"}}},
			TimeoutFactor: 3, MinTimeout: 10 * time.Second, Out: t.TempDir(), Coverage: true, PerTest: true, Log: &log,
			Schemata: schemata,
		}
		rep, err := Run(t.Context(), c)
		if err != nil {
			t.Fatalf("schemata %v: %v\n%s", schemata, err, log.String())
		}
		fates[schemata] = map[string]Result{}
		for _, r := range rep.Mutants {
			fates[schemata][fmt.Sprintf("%d %s %s", r.Line, r.Operator, r.Mutated)] = r
		}
	}
	for k, o := range fates[false] {
		s, ok := fates[true][k]
		if !ok {
			t.Errorf("%s: %s without the schemata, not run with them", k, o.Status)
			continue
		}
		if s.Status != o.Status || s.By != o.By {
			t.Errorf("%s: %s by %q with the schemata (%s; %s), %s by %q without (%s)", k, s.Status, s.By, s.Build, s.Detail, o.Status, o.By, o.Detail)
		}
	}
	if len(fates[true]) != len(fates[false]) {
		t.Errorf("%d mutants with the schemata, %d without", len(fates[true]), len(fates[false]))
	}
	// The fates written beside the code, and the builds: the named boolean's mutant alone
	// falls back to an overlay build.
	count := map[Status]int{}
	for k, r := range fates[true] {
		count[r.Status]++
		want := "schema"
		if strings.HasPrefix(k, "70 conditionals-negation") {
			want = "overlay (its value is not a plain bool)"
		}
		if r.Build != want {
			t.Errorf("%s: build %q, want %q", k, r.Build, want)
		}
	}
	if count[Killed] != 19 || count[TimedOutStatus] != 1 || count[Survived] != 4 || count[NotCovered] != 2 {
		t.Errorf("fates %v: want 19 killed, 1 timed out (Spin's n++), 4 survived, 2 not covered", count)
	}
}

// TestUntriedAfterAFlakyFailure: a run stopped at a failure that passed alone goes on
// with what it had not reached: every test but the flaky one, or the seeds after the
// flaky seed.
func TestUntriedAfterAFlakyFailure(t *testing.T) {
	a, b, c := &unit{test: "TestA"}, &unit{test: "TestB"}, &unit{test: "TestC"}
	if got := untried([]*unit{a, b, c}, []*unit{b}, 0); !slices.Equal(got, []*unit{a, c}) {
		t.Errorf("tests: %v, want TestA and TestC", got)
	}
	if got := untried([]*unit{a, b}, []*unit{a, b}, 0); got != nil {
		t.Errorf("the whole run tried again: %v, want nothing", got)
	}
	blocks := []*unit{{test: "TestSim", first: 1, n: 100}, {test: "TestSim", first: 101, n: 100}, {test: "TestSim", first: 201, n: 100}}
	got := untried(blocks, []*unit{{test: "TestSim", first: 150, n: 1}}, 150)
	if len(got) != 2 || got[0].first != 151 || got[0].n != 50 || got[1] != blocks[2] || blocks[1].first != 101 {
		t.Errorf("seeds: %v, want 151-200 and 201-300 (the blocks unchanged)", got)
	}
	if got := untried(blocks, blocks, 0); got != nil {
		t.Errorf("no failed seed named: %v, want nothing", got)
	}
}

// TestPendingMutantsOfOtherFilesWait: a run over some files keeps the report's pending
// mutants of the others as they are, and does not run them (it has not loaded their
// package: running them crashed the driver).
func TestPendingMutantsOfOtherFilesWait(t *testing.T) {
	out := t.TempDir()
	var log bytes.Buffer
	c := Config{
		Dir: filepath.Join("testdata", "fixture"), Operators: Operators,
		Killers:       []Killer{{Name: "own", Packages: []string{"{target}"}}},
		TimeoutFactor: 3, MinTimeout: time.Minute, Out: out, Log: &log, DryRun: true,
	}
	count := func(pkg string, fresh bool) (Summary, string) {
		t.Helper()
		log.Reset()
		c.Packages, c.Fresh = []string{pkg}, fresh
		rep, err := Run(t.Context(), c)
		if err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
		return Summarize(rep.Mutants), log.String()
	}
	alone, _ := count("./schemata", true) // the schemata package's mutants, in a report of their own
	first, _ := count(".", true)          // the report now holds the fixture's, all pending
	both, l := count("./schemata", false)
	if want := fmt.Sprintf("%d to run now", alone.Pending); !strings.Contains(l, want) {
		t.Errorf("the run over ./schemata: want %q (its own mutants only), log:\n%s", want, l)
	}
	if both.Pending != first.Pending+alone.Pending {
		t.Errorf("%d pending in the report, want the fixture's %d kept and the schemata package's %d", both.Pending, first.Pending, alone.Pending)
	}
}

// TestScheduleTriesOwnTestsFirst: a mutant's runs go cheapest first, the simulator's
// first seed block alone before its other blocks, but the package's own tests count
// ownBias times cheaper: they kill most mutants.
func TestScheduleTriesOwnTestsFirst(t *testing.T) {
	sim, own, fns := &splan{Killer: Killer{Name: "sim", Seeds: 300}}, &splan{Killer: Killer{Name: OwnKiller}}, &splan{Killer: Killer{Name: "functions"}}
	simBin, ownBin, fnBin := &binary{exe: "sim"}, &binary{exe: "own"}, &binary{exe: "fn"}
	sel := [][]*unit{
		{{bin: simBin, test: "TestSim", first: 1, n: 100, took: time.Second}, {bin: simBin, test: "TestSim", first: 101, n: 100, took: time.Second},
			{bin: simBin, test: "TestSim", first: 201, n: 100, took: time.Second}},
		{{bin: ownBin, test: "TestOwnSlow", took: 3 * time.Second}},
		{{bin: fnBin, test: "TestFnQuick", took: 200 * time.Millisecond}, {bin: fnBin, test: "TestFnSlow", took: 2 * time.Second}},
	}
	var got []string
	for _, inv := range schedule([]*splan{sim, own, fns}, sel) {
		got = append(got, inv.plan.Name+" "+unitsText(inv.units))
	}
	want := []string{"functions TestFnQuick", "own TestOwnSlow", "sim seeds 1-100", "sim seeds 101-300", "functions TestFnSlow"}
	if !slices.Equal(got, want) {
		t.Errorf("order %q, want %q", got, want)
	}
}
