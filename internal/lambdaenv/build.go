package lambdaenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildFlags are the Makefile's flags for a Lambda bootstrap (LAMBDA_BUILD), without
// GOOS/GOARCH: Build compiles for the host so that the binary runs here.
var BuildFlags = []string{"-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w"}

// Build compiles the main package pkg (an import path, or a ./relative directory of the
// module in dir) into out/<base of pkg>/bootstrap with BuildFlags and CGO_ENABLED=0, for
// the host, running the go command in dir. It returns the binary's path.
func Build(ctx context.Context, dir, out, pkg string) (string, error) {
	bin := filepath.Join(out, filepath.Base(pkg), "bootstrap")
	args := append(append([]string{"build"}, BuildFlags...), "-o", bin, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("lambdaenv: build %s: %w\n%s", pkg, err, b)
	}
	return bin, nil
}

// BuildTemp builds each main package of pkgs, as Build does, into a new temporary
// directory, which it returns with the binaries' paths; the caller removes it. Tests
// use it to build their bootstraps once per test binary.
func BuildTemp(ctx context.Context, moduleDir string, pkgs ...string) (dir string, bins []string, err error) {
	if dir, err = os.MkdirTemp("", "lambdaenv-bootstraps"); err != nil {
		return "", nil, fmt.Errorf("lambdaenv: %w", err)
	}
	for _, pkg := range pkgs {
		bin, err := Build(ctx, moduleDir, dir, pkg)
		if err != nil {
			_ = os.RemoveAll(dir)
			return "", nil, err
		}
		bins = append(bins, bin)
	}
	return dir, bins, nil
}
