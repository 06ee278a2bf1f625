// Package rename rewrites the module path of a copy of this template: `make rename
// MODULE=example.com/orders`, the offline equivalent of gonew for a clone.
//
// The old path is read from go.mod, so a repository can be renamed again. Every file
// git lists (tracked, and new files it does not ignore) is rewritten where it names the
// module or one of its packages: go.mod's module line, import paths, strings and
// comments in Go files, and the other text files. Two forms are references to the
// upstream template and are kept: a path after a slash (a URL such as
// https://github.com/owner/repo or https://pkg.go.dev/owner/repo) and the module path
// followed by @ (a published version, as in the gonew command). Changed Go files are
// formatted as gofmt does (imports sorted). Nothing is written unless every file could
// be rewritten.
package rename

import (
	"bytes"
	"errors"
	"fmt"
	"go/format"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Options is what Rename does.
type Options struct {
	Dir    string // the module root, where go.mod is
	Module string // the new module path
	Force  bool   // rename despite uncommitted changes, or outside a git work tree
}

// Result is what Rename changed.
type Result struct {
	Old, New string
	GoFiles  []string // changed Go files (formatted), slash paths relative to Dir
	Other    []string // other changed files, go.mod included
	Replaced int      // occurrences of the old path rewritten
	Kept     []string // files that still hold the old path in a kept form (URL, path@version)
}

// Changed is the number of files rewritten.
func (r *Result) Changed() int { return len(r.GoFiles) + len(r.Other) }

// ErrDirty is returned when the work tree has uncommitted changes and Force is off.
var ErrDirty = errors.New("the work tree has uncommitted changes")

// Rename rewrites the module path of the module in o.Dir to o.Module.
func Rename(o Options) (*Result, error) {
	gomod, err := os.ReadFile(filepath.Join(o.Dir, "go.mod"))
	if err != nil {
		return nil, fmt.Errorf("run it at the module root: %w", err)
	}
	old, err := ModulePath(gomod)
	if err != nil {
		return nil, err
	}
	if err := CheckPath(o.Module); err != nil {
		return nil, err
	}
	if o.Module == old {
		return nil, fmt.Errorf("the module path is already %s", old)
	}
	for _, dep := range requires(gomod) {
		if o.Module == dep || strings.HasPrefix(dep, o.Module+"/") || strings.HasPrefix(o.Module, dep+"/") {
			return nil, fmt.Errorf("%s would clash with the dependency %s in go.mod (an import could resolve to either module)", o.Module, dep)
		}
	}
	files, err := listFiles(o.Dir, o.Force)
	if err != nil {
		return nil, err
	}

	res := &Result{Old: old, New: o.Module}
	type change struct {
		path string
		data []byte
	}
	var changes []change
	for _, name := range files {
		path := filepath.Join(o.Dir, filepath.FromSlash(name))
		fi, err := os.Lstat(path)
		if err != nil || !fi.Mode().IsRegular() {
			continue // listed by git but deleted, or a symbolic link: not rewritten
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if bytes.IndexByte(src, 0) >= 0 {
			continue // binary
		}
		out, replaced, kept := Replace(src, old, o.Module)
		if kept > 0 {
			res.Kept = append(res.Kept, name)
		}
		if replaced == 0 {
			continue
		}
		if strings.HasSuffix(name, ".go") {
			if out, err = format.Source(out); err != nil {
				return nil, fmt.Errorf("%s: formatting the rewritten file: %w", name, err)
			}
			res.GoFiles = append(res.GoFiles, name)
		} else {
			res.Other = append(res.Other, name)
		}
		res.Replaced += replaced
		changes = append(changes, change{path, out})
	}
	for _, c := range changes {
		// WriteFile keeps the mode of an existing file (scripts stay executable).
		if err := os.WriteFile(c.path, c.data, 0o644); err != nil {
			return res, fmt.Errorf("%w (some files are already rewritten: git checkout . undoes it)", err)
		}
	}
	gomod, err = os.ReadFile(filepath.Join(o.Dir, "go.mod"))
	if err != nil {
		return res, err
	}
	if got, err := ModulePath(gomod); err != nil {
		return res, fmt.Errorf("go.mod after the rename: %w", err)
	} else if got != o.Module {
		return res, fmt.Errorf("go.mod's module line is %q after the rename, want %q", got, o.Module)
	}
	return res, nil
}

// ModulePath returns the path of go.mod's module directive.
func ModulePath(gomod []byte) (string, error) {
	for line := range strings.Lines(string(gomod)) {
		line, _, _ = strings.Cut(line, "//")
		f := strings.Fields(line)
		if len(f) != 2 || f[0] != "module" {
			continue
		}
		p := f[1]
		if p[0] == '"' || p[0] == '`' {
			var err error
			if p, err = strconv.Unquote(p); err != nil {
				return "", fmt.Errorf("go.mod: bad module path %s", f[1])
			}
		}
		return p, nil
	}
	return "", errors.New("go.mod has no module line")
}

// requires returns the module paths of go.mod's require directives.
func requires(gomod []byte) []string {
	var deps []string
	block := false
	for line := range strings.Lines(string(gomod)) {
		line, _, _ = strings.Cut(line, "//")
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case block && f[0] == ")":
			block = false
		case block:
			deps = append(deps, strings.Trim(f[0], "\"`"))
		case f[0] == "require" && len(f) == 2 && f[1] == "(":
			block = true
		case f[0] == "require" && len(f) >= 3:
			deps = append(deps, strings.Trim(f[1], "\"`"))
		}
	}
	return deps
}

// Replace rewrites the occurrences of the module path old in src to new: old itself or
// followed by /package, and not part of a longer path (example.com/app-two is not
// example.com/app). Occurrences after a slash (URLs) and followed by @ (a version of the
// upstream module) are kept and counted in kept.
func Replace(src []byte, old, new string) (out []byte, replaced, kept int) {
	var b bytes.Buffer
	o := []byte(old)
	last := 0
	for i := 0; ; {
		j := bytes.Index(src[i:], o)
		if j < 0 {
			break
		}
		start, end := i+j, i+j+len(o)
		i = start + 1
		if start > 0 && pathByte(src[start-1]) {
			continue // inside a longer path or word
		}
		// A dot after the path ends it if no path character follows: a sentence's full stop.
		fullStop := end < len(src) && src[end] == '.' && (end+1 == len(src) || !pathByte(src[end+1]))
		if end < len(src) && pathByte(src[end]) && !fullStop {
			continue
		}
		if start > 0 && src[start-1] == '/' || end < len(src) && src[end] == '@' {
			kept++
			continue
		}
		b.Write(src[last:start])
		b.WriteString(new)
		last, i = end, end
		replaced++
	}
	if replaced == 0 {
		return src, 0, kept
	}
	b.Write(src[last:])
	return b.Bytes(), replaced, kept
}

// pathByte reports whether c can be part of a path element.
func pathByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// listFiles returns the files to look at, slash paths relative to dir: what git lists
// (tracked, and untracked that .gitignore does not exclude), after checking that the
// work tree is clean unless force; outside a git work tree, with force only, every file
// under dir but .git and the build output.
func listFiles(dir string, force bool) ([]string, error) {
	if _, err := exec.LookPath("git"); err != nil {
		if !force {
			return nil, errors.New("git is not installed, so uncommitted changes cannot be told apart from the rename: set FORCE=1 (make) or -force to rename anyway")
		}
		return walk(dir)
	}
	if out, err := git(dir, "rev-parse", "--is-inside-work-tree"); err != nil || strings.TrimSpace(out) != "true" {
		if !force {
			return nil, fmt.Errorf("%s is not in a git work tree, so uncommitted changes cannot be told apart from the rename: commit it to git first, or set FORCE=1 (make) or -force to rename anyway", dir)
		}
		return walk(dir)
	}
	if !force {
		status, err := git(dir, "status", "--porcelain", "--", ".")
		if err != nil {
			return nil, err
		}
		if status != "" {
			lines := strings.Split(strings.TrimRight(status, "\n"), "\n")
			if len(lines) > 5 {
				lines = append(lines[:5], fmt.Sprintf("... and %d more", len(lines)-5))
			}
			return nil, fmt.Errorf("%w (git status):\n  %s\ncommit or stash them first so that the rename is one diff of its own, or set FORCE=1 (make) or -force to rename anyway", ErrDirty, strings.Join(lines, "\n  "))
		}
	}
	out, err := git(dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return nil, err
	}
	var files []string
	seen := map[string]bool{}
	for f := range strings.SplitSeq(out, "\x00") {
		if f != "" && !seen[f] { // a file with merge conflicts is listed once per stage
			seen[f] = true
			files = append(files, f)
		}
	}
	sort.Strings(files)
	return files, nil
}

func walk(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".aws-sam") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(dir, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	return files, err
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
