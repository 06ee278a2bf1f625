package adapt_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
	"github.com/idemgo/sqs-lambda-consumer/internal/adapt"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// TestMain: a moto of the package's own under make test (awstest.MainOwn), which the
// copy's suites and demo share: they load moto as much as the reliability suite does.
func TestMain(m *testing.M) { os.Exit(awstest.MainOwn(m)) }

// swapTo is the example the test wires in place of the default: the last of the
// build's examples (payouts: a read, a refusal before an outside call, a step, a write
// and an outbound message, the shape furthest from the default's).
func swapTo(t *testing.T) example.Example {
	t.Helper()
	if len(wiring.Examples) < 2 {
		t.Skip("the build carries one example: nothing to swap to")
	}
	return wiring.Examples[len(wiring.Examples)-1]
}

// TestSwapTheWiredExample is what README.md's "Adapting it to your own messages" promises:
// from a clean copy of the repository, another example is wired by changing only
// functions/consumer/wiring/wiring.go and the template block of template.yaml. Then the
// build, the template lint, the fast suites (reliability, demo, consumer) and
// `idemctl demo` must pass in the copy, on the new example.
//
// idemctl is built once in the copy, after the rewiring, and runs both `idemctl wire` and
// the demo; the suites and the demo run side by side against the shared moto (each
// creates its own resources), as the build and the template lint do.
func TestSwapTheWiredExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and tests a copy of the repository")
	}
	ex := swapTo(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	n, err := adapt.CopyWorkTree(root, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("copied %d files (tracked, and new ones git does not ignore) to %s", n, dir)
	module := goList(t, dir, "list", "-m")

	// 1. The wiring file: the new example alone.
	wiringPath := filepath.Join(dir, "functions", "consumer", "wiring", "wiring.go")
	src := read(t, wiringPath)
	rewired, err := adapt.Rewire(src, module, ex.Name())
	if err != nil {
		t.Fatal(err)
	}
	write(t, wiringPath, rewired)
	// 2. The template block: the example's, in place of the default's, written by
	// `idemctl wire` (the new default) as README.md says.
	idemctl := filepath.Join(dir, ".aws-sam", "idemctl")
	run(t, dir, 10*time.Minute, nil, "go", "build", "-o", idemctl, "./cmd/idemctl")
	run(t, dir, time.Minute, []string{"EXAMPLE="}, idemctl, "wire")
	tplPath := filepath.Join(dir, "template.yaml")
	swapped := read(t, tplPath)
	if want, err := example.SwapBlock(read(t, filepath.Join(root, "template.yaml")), ex.Template()); err != nil || !bytes.Equal(swapped, want) {
		t.Fatalf("idemctl wire did not write the %s block in place of the default's (%v)", ex.Name(), err)
	}
	if got, err := example.BlockExample(swapped); err != nil || got != ex.Name() {
		t.Fatalf("the swapped template carries example %q (%v), want %s", got, err, ex.Name())
	}
	changed := gitChanged(t, root, dir)
	if want := []string{"functions/consumer/wiring/wiring.go", "template.yaml"}; strings.Join(changed, " ") != strings.Join(want, " ") {
		t.Fatalf("the swap changed %v, want exactly %v", changed, want)
	}

	// 3. Build and lint the copy (the test runs below type-check its tests).
	t.Run("build", func(t *testing.T) {
		t.Run("go build", func(t *testing.T) {
			t.Parallel()
			run(t, dir, 10*time.Minute, nil, "go", "build", "./...")
		})
		t.Run("cfn-lint", func(t *testing.T) {
			t.Parallel()
			if _, err := exec.LookPath("cfn-lint"); err != nil {
				t.Skip("cfn-lint not on PATH: template lint skipped")
			}
			run(t, dir, 5*time.Minute, nil, "cfn-lint", "template.yaml")
		})
	})
	if t.Failed() {
		return
	}
	// 4. The fast suites, on the wired example (EXAMPLE unset: the default): the consumer's
	// and the example's own tests, the demo's, and the reliability scenarios whose outcome
	// depends most on the example (the duplicate storm and crash injection, each ending with
	// the example's check; side by side, as make test runs them). Fencing, store faults,
	// timeouts and the single-transaction variants test the machinery the same way for
	// every example; make test runs them on the default example, and
	// `EXAMPLE=<name> go test ./internal/reliability/` on any.
	// 5. The demo (without its crashed consumer, which waits 30 s for its messages to come
	// back: crash injection above kills consumers on this example), on bootstraps built in
	// the copy: idemctl's default bootstrap directory is shared by every idemctl on the
	// machine.
	// The reliability scenarios run beside the packages' tests, then the demo: all at once
	// asked the one moto they share for more than it serves (crash injection's consumers
	// then missed their deadlines and SQS moved messages to the DLQ).
	env := []string{"AWS_ENDPOINT_URL=" + awstest.Endpoint(t), "EXAMPLE=", awstest.OwnMotoVar + "="}
	t.Run("suites", func(t *testing.T) {
		t.Run("reliability", func(t *testing.T) {
			t.Parallel()
			t.Logf("in the copy:\n%s", run(t, dir, 15*time.Minute, env, "go", "test", "-count=1",
				"-run", "^(TestDuplicateStorm|TestCrashInjection)$", "./internal/reliability/"))
		})
		t.Run("consumer, example, demo", func(t *testing.T) {
			t.Parallel()
			t.Logf("in the copy:\n%s", run(t, dir, 15*time.Minute, env, "go", "test", "-count=1",
				"./internal/demo/", "./functions/consumer/consumerapp/", "./functions/consumer/"+ex.Name()+"/"))
			demo := run(t, dir, 10*time.Minute, append(env, "IDEMCTL_BOOTSTRAPS="+filepath.Join(dir, ".aws-sam", "bootstraps")), idemctl, "demo",
				"--messages", "200", "--groups", "8", "--consumers", "2", "--seed", "7", "--no-crash")
			for _, want := range []string{ex.Name() + " check: tables = what the applied messages leave OK", "demo: OK"} {
				if !strings.Contains(demo, want) {
					t.Errorf("idemctl demo in the copy: no line %q:\n%s", want, demo)
				}
			}
			t.Logf("idemctl demo in the copy:\n%s", demo)
		})
	})
}

// TestTemplateCarriesTheDefaultBlock: template.yaml holds the default example's block as
// the example's package has it, so editing one without the other fails here.
func TestTemplateCarriesTheDefaultBlock(t *testing.T) {
	tpl := read(t, filepath.Join("..", "..", "template.yaml"))
	ex := wiring.Default()
	if name, err := example.BlockExample(tpl); err != nil || name != ex.Name() {
		t.Fatalf("template.yaml carries example %q (%v), want the default %s", name, err, ex.Name())
	}
	wired, err := example.SwapBlock(tpl, ex.Template())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(wired, tpl) {
		t.Errorf("template.yaml's example regions differ from functions/consumer/%s/template.yaml: run go run ./cmd/idemctl wire", ex.Name())
	}
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func goList(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// run runs a command in dir with env added and returns its output; a failure fails the
// test with the output.
func run(t *testing.T, dir string, limit time.Duration, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	out, took, err := adapt.Run(ctx, dir, env, name, args...)
	t.Logf("%s %s: %s", name, strings.Join(args, " "), took.Round(time.Millisecond))
	if err != nil {
		t.Fatalf("%s %s in the copy: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// gitChanged lists the files that differ between the repository's tracked files and the
// copy.
func gitChanged(t *testing.T, root, dir string) []string {
	t.Helper()
	files, err := adapt.Files(root)
	if err != nil {
		t.Fatal(err)
	}
	var changed []string
	for _, rel := range files {
		a, errA := os.ReadFile(filepath.Join(root, rel))
		b, errB := os.ReadFile(filepath.Join(dir, rel))
		if os.IsNotExist(errA) {
			continue
		}
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			changed = append(changed, rel)
		}
	}
	return changed
}
