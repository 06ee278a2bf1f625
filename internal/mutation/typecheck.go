package mutation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Package is a target package: its non-test Go files, parsed, and what type-checks a
// mutated copy of one of them.
type Package struct {
	ImportPath string
	Dir        string
	Files      []string // absolute paths of the non-test .go files the build uses
	fset       *token.FileSet
	parsed     map[string]*ast.File
	src        map[string][]byte
	exports    map[string]string // import path -> export data file
	imp        types.Importer    // over exports, shared by every check (it caches)
	info       *types.Info
	mu         sync.Mutex // the importer and the file set's growth
}

type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
	Deps       []string
	Standard   bool
	Error      *struct{ Err string }
}

// goList runs go list -json with args in dir and decodes its stream of packages.
func goList(ctx context.Context, dir string, args ...string) ([]listed, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("mutation: go list %v: %w\n%s", args, err, stderr.Bytes())
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("mutation: decode go list: %w", err)
		}
		pkgs = append(pkgs, p)
	}
}

// modulePath is the path of the module at dir.
func modulePath(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("mutation: go list -m: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// LoadPackages lists the packages matching patterns in the module at dir, parses their
// non-test files and type-checks them against their dependencies' export data (go list
// -export builds those once, through the build cache).
func LoadPackages(ctx context.Context, dir string, patterns []string) ([]*Package, error) {
	targets, err := goList(ctx, dir, patterns...)
	if err != nil {
		return nil, err
	}
	// The dependencies' export data, and that of the packages the schemata's helper file
	// imports (schemaImports), which a target may not import itself.
	deps, err := goList(ctx, dir, append(append([]string{"-export", "-deps"}, patterns...), schemaImports...)...)
	if err != nil {
		return nil, err
	}
	exports := map[string]string{}
	for _, d := range deps {
		if d.Error != nil {
			return nil, fmt.Errorf("mutation: %s: %s", d.ImportPath, d.Error.Err)
		}
		exports[d.ImportPath] = d.Export
	}
	var out []*Package
	for _, t := range targets {
		if t.Error != nil {
			return nil, fmt.Errorf("mutation: %s: %s", t.ImportPath, t.Error.Err)
		}
		p := &Package{ImportPath: t.ImportPath, Dir: t.Dir, fset: token.NewFileSet(), parsed: map[string]*ast.File{}, src: map[string][]byte{}, exports: exports}
		for _, f := range t.GoFiles {
			path := filepath.Join(t.Dir, f)
			src, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("mutation: %w", err)
			}
			file, err := parser.ParseFile(p.fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				return nil, fmt.Errorf("mutation: %w", err)
			}
			p.Files = append(p.Files, path)
			p.parsed[path] = file
			p.src[path] = src
		}
		p.imp = importer.ForCompiler(p.fset, "gc", p.lookup)
		p.info = &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
		if err := p.check(p.fileList(""), p.info); err != nil {
			return nil, fmt.Errorf("mutation: %s does not type-check as it is: %w", t.ImportPath, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func (p *Package) fileList(replace string, with ...*ast.File) []*ast.File {
	files := make([]*ast.File, 0, len(p.Files))
	for _, f := range p.Files {
		if f == replace {
			files = append(files, with...)
			continue
		}
		files = append(files, p.parsed[f])
	}
	return files
}

func (p *Package) lookup(path string) (io.ReadCloser, error) {
	f, ok := p.exports[path]
	if !ok || f == "" {
		return nil, fmt.Errorf("no export data for %s", path)
	}
	return os.Open(f) //nolint:gosec // a file go list -export named
}

func (p *Package) check(files []*ast.File, info *types.Info) error {
	var first error
	conf := types.Config{Importer: p.imp, Error: func(err error) {
		if first == nil {
			first = err
		}
	}}
	_, _ = conf.Check(p.ImportPath, p.fset, files, info)
	return first
}

// Mutants lists the mutants of the package's file path (absolute), with rel its slash
// path from the module root.
func (p *Package) Mutants(path, rel string, ops []Operator) []Mutant {
	return Enumerate(p.fset, p.parsed[path], p.src[path], rel, p.info, ops)
}

// Source is the content of one of the package's files as it was loaded.
func (p *Package) Source(path string) []byte { return p.src[path] }

// CompileError type-checks the package with the file at path replaced by src: "", or
// the first error (what the compiler would refuse, "declared and not used" included).
func (p *Package) CompileError(path string, src []byte) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	file, err := parser.ParseFile(p.fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return err.Error()
	}
	if err := p.check(p.fileList(path, file), nil); err != nil {
		return err.Error()
	}
	return ""
}
