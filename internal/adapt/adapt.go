package adapt

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Run runs name with args in dir (a copy of the repository), with env added to this
// process's environment, until it exits or ctx ends (its pipes get 10 s more to close).
// It returns the command's output, stdout and stderr interleaved, and how long it ran.
func Run(ctx context.Context, dir string, env []string, name string, args ...string) (string, time.Duration, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env, cmd.WaitDelay = dir, append(append(os.Environ(), trimpath()), env...), 10*time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	return out.String(), time.Since(start), err
}

// trimpath is GOFLAGS with -trimpath added: a copy lives in a folder of its own, and a
// build that records that folder in what it compiles finds nothing of it in the build
// cache, from the last run or from another copy. Built with -trimpath, each package of
// the copy that is the same as before is a cache hit.
func trimpath() string {
	flags := os.Getenv("GOFLAGS")
	if !strings.Contains(flags, "-trimpath") {
		flags = strings.TrimSpace(flags + " -trimpath")
	}
	return "GOFLAGS=" + flags
}

// Files lists the files of the repository at root as a user's work tree has them: those
// git tracks and the new ones it does not ignore (a package not yet committed), paths
// relative to root, each once. A tracked file deleted from the work tree is listed too.
func Files(root string) ([]string, error) {
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--deduplicate").Output()
	if err != nil {
		return nil, fmt.Errorf("adapt: git ls-files in %s: %w", root, err)
	}
	var files []string
	for _, rel := range bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0}) {
		if len(rel) > 0 {
			files = append(files, string(rel))
		}
	}
	return files, nil
}

// CopyWorkTree copies the files of Files (their content in the work tree, so uncommitted
// edits and new files are copied too; files deleted from the work tree are left out) into
// dst: a clean copy, without build output or ignored files.
func CopyWorkTree(root, dst string) (int, error) {
	files, err := Files(root)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, rel := range files {
		src := filepath.Join(root, rel)
		info, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return n, err
		}
		if !info.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return n, err
		}
		to := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return n, err
		}
		if err := os.WriteFile(to, data, info.Mode().Perm()); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

var examplesLine = regexp.MustCompile(`(?m)^var Examples = \[\]example\.Example\{.*\}$`)

// Rewire returns the wiring file src with only the example whose package is pkg
// (functions/consumer/pkg; its type is pkg.Example) in Examples, its import added when
// missing and the imports of the others dropped: what a user does to wire their own
// example.
func Rewire(src []byte, module, pkg string) ([]byte, error) {
	if !examplesLine.Match(src) {
		return nil, fmt.Errorf("adapt: the wiring file has no line %q", examplesLine)
	}
	out := examplesLine.ReplaceAll(src, []byte("var Examples = []example.Example{"+pkg+".Example{}}"))
	prefix := "\t\"" + module + "/functions/consumer/"
	imports := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(prefix) + `([a-z0-9]+)"\n`)
	out = imports.ReplaceAllFunc(out, func(line []byte) []byte {
		switch string(imports.FindSubmatch(line)[1]) {
		case "example":
			if !bytes.Contains(out, []byte(prefix+pkg+"\"\n")) {
				return []byte(string(line) + prefix + pkg + "\"\n")
			}
			return line
		case pkg:
			return line
		}
		return nil
	})
	return out, nil
}
