package adapt_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/internal/adapt"
)

func TestRewire(t *testing.T) {
	src := `package wiring

import (
	"example.com/m/functions/consumer/example"
	"example.com/m/functions/consumer/beta"
	"example.com/m/functions/consumer/alpha"
)

var Examples = []example.Example{alpha.Example{}, beta.Example{}}
`
	out, err := adapt.Rewire([]byte(src), "example.com/m", "beta")
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	if strings.Contains(got, "alpha") || !strings.Contains(got, "var Examples = []example.Example{beta.Example{}}") ||
		!strings.Contains(got, `"example.com/m/functions/consumer/example"`) || !strings.Contains(got, `"example.com/m/functions/consumer/beta"`) {
		t.Errorf("rewired:\n%s", got)
	}
	// A new package (not imported yet) gets its import.
	out, err = adapt.Rewire([]byte(src), "example.com/m", "gamma")
	if err != nil {
		t.Fatal(err)
	}
	got = string(out)
	if strings.Contains(got, "alpha") || strings.Contains(got, "beta") || !strings.Contains(got, "var Examples = []example.Example{gamma.Example{}}") ||
		strings.Count(got, `"example.com/m/functions/consumer/gamma"`) != 1 || !strings.Contains(got, `"example.com/m/functions/consumer/example"`) {
		t.Errorf("rewired to a new package:\n%s", got)
	}
	if _, err := adapt.Rewire([]byte("package wiring\n"), "example.com/m", "beta"); err == nil {
		t.Error("a wiring file without an Examples line was rewired")
	}
}

// TestCopyWorkTree: the copy holds the tracked files as the work tree has them and the
// new files git does not ignore (a package not committed yet), and leaves out ignored
// files and tracked files deleted from the work tree.
func TestCopyWorkTree(t *testing.T) {
	root, dst := t.TempDir(), t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", root, "-c", "user.email=t@example.com", "-c", "user.name=t"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	files := map[string]string{"tracked.go": "package a\n", "gone.go": "package a\n", ".gitignore": "ignored/\n"}
	for name, body := range files {
		write(t, filepath.Join(root, name), []byte(body))
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-qm", "first")
	write(t, filepath.Join(root, "tracked.go"), []byte("package a // edited\n"))
	if err := os.Remove(filepath.Join(root, "gone.go")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"new/pkg/new.go", "ignored/out.bin"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(root, name), []byte(name))
	}
	n, err := adapt.CopyWorkTree(root, dst)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(read(t, filepath.Join(dst, "tracked.go"))); got != "package a // edited\n" || n != 3 {
		t.Errorf("copied %d files, tracked.go %q; want 3 (tracked.go as edited, .gitignore, new/pkg/new.go)", n, got)
	}
	if got := string(read(t, filepath.Join(dst, "new/pkg/new.go"))); got != "new/pkg/new.go" {
		t.Errorf("the new file: %q", got)
	}
	for _, name := range []string{"gone.go", "ignored/out.bin"} {
		if _, err := os.Stat(filepath.Join(dst, name)); !os.IsNotExist(err) {
			t.Errorf("%s was copied (%v)", name, err)
		}
	}
}
