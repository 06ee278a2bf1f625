package mutation

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Status is what became of a mutant.
type Status string

// The statuses. Killed and TimedOutStatus count as killed in the score; Survived and
// NotCovered as survived; NotCompiled and Skipped are left out of it.
const (
	Killed         Status = "killed"
	TimedOutStatus Status = "timed-out"
	Survived       Status = "survived"
	NotCovered     Status = "not-covered" // no killer's baseline ran its line: survived, without running
	NotCompiled    Status = "not-compiled"
	Skipped        Status = "skipped" // logging only
)

// Result is a mutant and what became of it.
type Result struct {
	Mutant
	Status Status `json:"status"`
	// By is the killer that killed it (or whose build failed).
	By string `json:"by,omitempty"`
	// Detail: the failed tests, the build error, or the timeout.
	Detail string `json:"detail,omitempty"`
	// Ran lists the killers run, with their seconds.
	Ran []string `json:"ran,omitempty"`
	// Build: "schema" (a run of the schemata binaries), "overlay (why)" (built alone,
	// its site not in the schemata), "" (without schemata).
	Build   string  `json:"build,omitempty"`
	Seconds float64 `json:"seconds"`
}

// KillerReport is one killer's baseline over one target package.
type KillerReport struct {
	Killer          string   `json:"killer"`
	Target          string   `json:"target"`
	Packages        []string `json:"packages"`
	Args            []string `json:"args,omitempty"`
	BaselineSeconds float64  `json:"baseline_seconds"`
	Timeout         string   `json:"timeout"`
}

// Report is the machine-readable report (mutation.json); mutation.md is written from it.
type Report struct {
	Module    string         `json:"module"`
	Targets   []string       `json:"targets"`
	Files     string         `json:"files,omitempty"`
	Operators []Operator     `json:"operators"`
	Killers   []KillerReport `json:"killers"`
	Updated   time.Time      `json:"updated"`
	Summary   Summary        `json:"summary"`
	Mutants   []Result       `json:"mutants"`
}

// Summary counts the statuses and gives the score.
type Summary struct {
	Total       int `json:"total"`
	Killed      int `json:"killed"` // time-outs included
	TimedOut    int `json:"timed_out"`
	Survived    int `json:"survived"` // not covered included
	NotCovered  int `json:"not_covered"`
	NotCompiled int `json:"not_compiled"`
	Skipped     int `json:"skipped"`
	Pending     int `json:"pending"`
	// Score is Killed / (Killed + Survived), in percent.
	Score float64 `json:"score"`
	// Seconds is the time spent on the mutants run (not reused from an earlier run).
	Seconds float64 `json:"seconds"`
}

// Summarize counts results.
func Summarize(rs []Result) Summary {
	var s Summary
	for _, r := range rs {
		s.Total++
		s.Seconds += r.Seconds
		switch r.Status {
		case Killed:
			s.Killed++
		case TimedOutStatus:
			s.Killed++
			s.TimedOut++
		case Survived:
			s.Survived++
		case NotCovered:
			s.Survived++
			s.NotCovered++
		case NotCompiled:
			s.NotCompiled++
		case Skipped:
			s.Skipped++
		default:
			s.Pending++
		}
	}
	if s.Killed+s.Survived > 0 {
		s.Score = 100 * float64(s.Killed) / float64(s.Killed+s.Survived)
	}
	return s
}

// decided reports whether a status is final for a mutant of the same file content.
func decided(s Status, retrySurvivors bool) bool {
	switch s {
	case Killed, TimedOutStatus, NotCompiled:
		return true
	case Survived, NotCovered:
		return !retrySurvivors
	}
	return false
}

// ReadReport reads a mutation.json; a missing file is an empty report.
func ReadReport(path string) (*Report, error) {
	data, err := os.ReadFile(path) //nolint:gosec // the report this tool writes
	if errors.Is(err, fs.ErrNotExist) {
		return &Report{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("mutation: %w", err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("mutation: %s: %w", path, err)
	}
	return &r, nil
}

// Write writes the report as dir/mutation.json and dir/mutation.md, each through a
// temporary file renamed over the old one.
func (r *Report) Write(dir string) error {
	r.Summary = Summarize(r.Mutants)
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("mutation: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, "mutation.json"), append(data, '\n')); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, "mutation.md"), []byte(r.Markdown()))
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("mutation: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("mutation: %w", err)
	}
	return nil
}

// Markdown is the report as a page: the figures, the killers, the survivors, then every
// mutant run.
func (r *Report) Markdown() string {
	s := Summarize(r.Mutants)
	var b strings.Builder
	fmt.Fprintf(&b, "# Mutation report\n\n")
	short := func(pkgs []string) string {
		out := make([]string, len(pkgs))
		for i, p := range pkgs {
			out[i] = strings.TrimPrefix(strings.TrimPrefix(p, r.Module), "/")
		}
		return strings.Join(out, " ")
	}
	fmt.Fprintf(&b, "Module %s. Targets: %s", r.Module, short(r.Targets))
	if r.Files != "" {
		fmt.Fprintf(&b, " (files matching `%s`)", r.Files)
	}
	fmt.Fprintf(&b, ". Operators: %s. Updated %s.\n\n", joinOps(r.Operators), r.Updated.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "| score | mutants | killed | of them timed out | survived | of them not covered | not compiled | skipped (logging) | pending | seconds run | seconds a mutant |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|\n")
	ran := s.Killed + s.Survived - s.NotCovered + s.NotCompiled
	per := 0.0
	if ran > 0 {
		per = s.Seconds / float64(ran)
	}
	fmt.Fprintf(&b, "| %.1f%% | %d | %d | %d | %d | %d | %d | %d | %d | %.0f | %.1f |\n\n",
		s.Score, s.Total, s.Killed, s.TimedOut, s.Survived, s.NotCovered, s.NotCompiled, s.Skipped, s.Pending, s.Seconds, per)
	b.WriteString("Score = killed (time-outs included) / (killed + survived (not covered included)); not compiled and skipped are left out.\n\n")
	b.WriteString("## Killers (baselines, unmutated)\n\n| target | killer | packages | args | baseline s | timeout |\n|---|---|---|---|---|---|\n")
	for _, k := range r.Killers {
		args := "(each test's coverage: a mutant runs those that run its line)"
		if len(k.Args) > 0 {
			args = "`" + strings.Join(k.Args, " ") + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f | %s |\n", short([]string{k.Target}), k.Killer, short(k.Packages), args, k.BaselineSeconds, k.Timeout)
	}
	sorted := slices.Clone(r.Mutants)
	slices.SortStableFunc(sorted, func(a, b Result) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		return a.Start - b.Start
	})
	b.WriteString("\n## Survivors\n\n")
	table(&b, sorted, func(r Result) bool { return r.Status == Survived || r.Status == NotCovered })
	b.WriteString("\n## Every mutant run\n\n")
	table(&b, sorted, func(r Result) bool { return r.Status != Skipped && r.Status != "" })
	if s.Skipped > 0 {
		fmt.Fprintf(&b, "\n%d mutants in statements that only log were skipped (see mutation.json, skip_reason).\n", s.Skipped)
	}
	return b.String()
}

func table(b *strings.Builder, rs []Result, keep func(Result) bool) {
	b.WriteString("| id | where | func | operator | original | mutated | status | by | detail | ran | s |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	n := 0
	for _, r := range rs {
		if !keep(r) {
			continue
		}
		n++
		fmt.Fprintf(b, "| %s | %s:%d:%d | %s | %s | %s | %s | %s | %s | %s | %s | %.1f |\n", r.ID, r.File, r.Line, r.Col, r.Func, r.Operator,
			cell(r.Original), cell(r.Mutated), r.Status, r.By, cellText(r.Detail), strings.Join(r.Ran, ", "), r.Seconds)
	}
	if n == 0 {
		b.WriteString("| none | | | | | | | | | | |\n")
	}
}

// cell shows code in a table cell: one line, at most 80 characters, pipes escaped.
func cell(s string) string {
	if s == "" {
		return "(nothing)"
	}
	return "`" + cellText(s) + "`"
}

func cellText(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 80 {
		s = string(r[:77]) + "..."
	}
	return strings.ReplaceAll(s, "|", `\|`)
}

func joinOps(ops []Operator) string {
	ss := make([]string, len(ops))
	for i, o := range ops {
		ss[i] = string(o)
	}
	return strings.Join(ss, ", ")
}
