package mutation

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// block is a span of a coverage profile: from line.col to line.col of a file.
type block struct{ startLine, startCol, endLine, endCol int }

// Coverage is the union of go test -coverprofile files: for each file (by its import
// path, as the profile names it), the blocks run and the blocks not run.
type Coverage struct {
	run, notRun map[string][]block
}

// ReadCoverage reads a coverage profile written by go test -coverprofile.
func ReadCoverage(path string) (*Coverage, error) {
	f, err := os.Open(path) //nolint:gosec // the profile this tool asked go test to write
	if err != nil {
		return nil, fmt.Errorf("mutation: coverage: %w", err)
	}
	defer func() { _ = f.Close() }()
	c := &Coverage{run: map[string][]block{}, notRun: map[string][]block{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mode:") || line == "" {
			continue
		}
		// name.go:12.34,15.2 3 1
		file, rest, ok := strings.Cut(line, ":")
		fields := strings.Fields(rest)
		if !ok || len(fields) != 3 {
			return nil, fmt.Errorf("mutation: coverage %s: bad line %q", path, line)
		}
		var b block
		if _, err := fmt.Sscanf(fields[0], "%d.%d,%d.%d", &b.startLine, &b.startCol, &b.endLine, &b.endCol); err != nil {
			return nil, fmt.Errorf("mutation: coverage %s: bad line %q: %w", path, line, err)
		}
		count, err := strconv.Atoi(fields[2])
		if err != nil {
			return nil, fmt.Errorf("mutation: coverage %s: bad line %q: %w", path, line, err)
		}
		if count > 0 {
			c.run[file] = append(c.run[file], b)
		} else {
			c.notRun[file] = append(c.notRun[file], b)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mutation: coverage %s: %w", path, err)
	}
	return c, nil
}

func (b block) contains(line, col int) bool {
	if line < b.startLine || line > b.endLine {
		return false
	}
	if line == b.startLine && col < b.startCol {
		return false
	}
	return line != b.endLine || col < b.endCol
}

// Runs reports whether the profile saw the position (line, col) of file (its import path
// and base name, as in the profile) run: false when only blocks that did not run hold
// it; true when a block that ran holds it, or no block does (a package-level
// declaration, which every test binary that imports the package evaluates).
func (c *Coverage) Runs(file string, line, col int) bool {
	for _, b := range c.run[file] {
		if b.contains(line, col) {
			return true
		}
	}
	for _, b := range c.notRun[file] {
		if b.contains(line, col) {
			return false
		}
	}
	return true
}
