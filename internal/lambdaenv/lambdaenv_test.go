package lambdaenv_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/internal/lambdaenv"
)

// fnBin is testdata/fn, built once for the whole test binary.
var fnBin string

func TestMain(m *testing.M) {
	dir, bins, err := lambdaenv.BuildTemp(context.Background(), ".", "./testdata/fn")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fnBin = bins[0]
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

type answer struct {
	PID        int               `json:"pid"`
	DeadlineMS int64             `json:"deadline_ms"`
	Env        map[string]string `json:"env"`
}

func newEnv(t *testing.T, timeout time.Duration, extra ...string) *lambdaenv.Environment {
	t.Helper()
	e, err := lambdaenv.New(lambdaenv.Function{
		Name: "fn", Bin: fnBin, Timeout: timeout, MemoryMB: 512, Env: append([]string{"GREETING=hello"}, extra...),
		Output: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Logf("fn: %s", p); return len(p), nil }

func invoke(t *testing.T, e *lambdaenv.Environment, ev string) (answer, error) {
	t.Helper()
	out, err := e.Invoke(context.Background(), []byte(ev))
	if err != nil {
		return answer{}, err
	}
	var a answer
	if err := json.Unmarshal(out, &a); err != nil {
		t.Fatalf("answer %s: %v", out, err)
	}
	return a, nil
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// The function sees the deadline header as its context's deadline, the template's
// memory and variables, and nothing of this process's environment; a second invocation
// is warm: same process, no new init.
func TestInvokeDeadlineEnvironmentWarm(t *testing.T) {
	e := newEnv(t, 7*time.Second)
	before := time.Now()
	a, err := invoke(t, e, `{"do":"ok"}`)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.UnixMilli(a.DeadlineMS)
	if lo, hi := before.Add(7*time.Second-time.Second), time.Now().Add(7*time.Second+time.Second); deadline.Before(lo) || deadline.After(hi) {
		t.Errorf("deadline %s, want about 7s after %s", deadline, before)
	}
	want := map[string]string{"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512", "AWS_LAMBDA_FUNCTION_NAME": "fn", "GREETING": "hello"}
	for k, v := range want {
		if a.Env[k] != v {
			t.Errorf("%s = %q, want %q", k, a.Env[k], v)
		}
	}
	if _, ok := a.Env["HOME"]; ok {
		t.Errorf("HOME leaked from the test process into the function")
	}
	b, err := invoke(t, e, `{"do":"ok"}`)
	if err != nil {
		t.Fatal(err)
	}
	if b.PID != a.PID || e.Inits() != 1 {
		t.Errorf("second invocation: pid %d (first %d), %d inits: want the same warm environment", b.PID, a.PID, e.Inits())
	}
}

// An invocation past its timeout is killed with its process; the next invocation gets
// a fresh init in a new process.
func TestTimeoutKillsAndReinits(t *testing.T) {
	e := newEnv(t, 2*time.Second)
	a, err := invoke(t, e, `{"do":"ok"}`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = invoke(t, e, `{"do":"sleep","sleep_ms":600000}`)
	if !errors.Is(err, lambdaenv.ErrTimeout) {
		t.Fatalf("stalled invocation: %v, want ErrTimeout", err)
	}
	if alive(a.PID) {
		t.Errorf("process %d still runs after the timeout", a.PID)
	}
	b, err := invoke(t, e, `{"do":"ok"}`)
	if err != nil {
		t.Fatal(err)
	}
	if b.PID == a.PID || e.Inits() != 2 {
		t.Errorf("after the timeout: pid %d (before %d), %d inits: want a fresh environment", b.PID, a.PID, e.Inits())
	}
}

// A function error keeps the environment; a panic (aws-lambda-go reports it, then
// exits) and a crash fail the invocation and the next one starts afresh.
func TestErrorsPanicsCrashes(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	a, err := invoke(t, e, `{"do":"ok"}`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = invoke(t, e, `{"do":"error"}`)
	var fe *lambdaenv.FunctionError
	if !errors.As(err, &fe) || fe.Message != "fn: asked to fail" {
		t.Fatalf("error: %v, want the function's error", err)
	}
	b, err := invoke(t, e, `{"do":"ok"}`)
	if err != nil || b.PID != a.PID {
		t.Fatalf("after a function error: pid %d (before %d), %v: want the same environment", b.PID, a.PID, err)
	}

	_, err = invoke(t, e, `{"do":"panic"}`)
	if !errors.As(err, &fe) || fe.Message != "fn: asked to panic" {
		t.Fatalf("panic: %v, want the function error aws-lambda-go reports", err)
	}
	c, err := invoke(t, e, `{"do":"ok"}`)
	if err != nil || c.PID == b.PID {
		t.Fatalf("after a panic: pid %d (before %d), %v: want a fresh environment", c.PID, b.PID, err)
	}

	_, err = invoke(t, e, `{"do":"exit"}`)
	var xe *lambdaenv.ExitError
	if !errors.As(err, &xe) {
		t.Fatalf("crash: %v, want an ExitError", err)
	}
	d, err := invoke(t, e, `{"do":"ok"}`)
	if err != nil || d.PID == c.PID {
		t.Fatalf("after a crash: pid %d (before %d), %v: want a fresh environment", d.PID, c.PID, err)
	}
	if e.Inits() != 3 {
		t.Errorf("%d inits, want 3 (first, after the panic, after the crash)", e.Inits())
	}
}

// An init that fails is reported as Lambda reports it: the error the runtime posted to
// /runtime/init/error, or Runtime.ExitError for a process that exits without a word.
func TestInitErrors(t *testing.T) {
	for _, tc := range []struct{ mode, wantType, wantMessage string }{
		{"post", "ConfigError", "fn: FAIL_INIT is set"},
		{"exit", "Runtime.ExitError", ""},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			e := newEnv(t, 10*time.Second, "FAIL_INIT="+tc.mode)
			for range 2 { // every invocation tries a fresh init
				_, err := invoke(t, e, `{"do":"ok"}`)
				var ie *lambdaenv.InitError
				if !errors.As(err, &ie) || ie.Type != tc.wantType || (tc.wantMessage != "" && ie.Message != tc.wantMessage) {
					t.Fatalf("got %v, want an init error %s %q", err, tc.wantType, tc.wantMessage)
				}
			}
			if e.Inits() != 2 {
				t.Errorf("%d inits, want 2", e.Inits())
			}
		})
	}
}

// The deadline of ctx, when earlier than the timeout, is the invocation's deadline: a
// timeout, ErrTimeout, as the runner counts it.
func TestContextDeadline(t *testing.T) {
	e := newEnv(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := e.Invoke(ctx, []byte(`{"do":"sleep","sleep_ms":600000}`))
	if !errors.Is(err, lambdaenv.ErrTimeout) {
		t.Fatalf("stalled invocation: %v, want ErrTimeout", err)
	}
	if e.Inits() != 1 {
		t.Errorf("%d inits, want 1", e.Inits())
	}
	if _, err := invoke(t, e, `{"do":"ok"}`); err != nil || e.Inits() != 2 {
		t.Errorf("after the deadline: %v, %d inits; want a fresh environment", err, e.Inits())
	}
}

// A ctx whose deadline has passed when the invocation (or the init before it) waits:
// its Done and the invocation's timer are both ready, and select takes either. Both are
// the timeout: ErrTimeout each time, never ctx's error (with which the runner, under
// load, missed a timeout now and then).
func TestContextDeadlinePassedIsATimeout(t *testing.T) {
	e := newEnv(t, time.Minute)
	if _, err := invoke(t, e, `{"do":"ok"}`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	for i := range 20 { // the first waits for the answer of a warm process, the others for an init
		if _, err := e.Invoke(ctx, []byte(`{"do":"ok"}`)); !errors.Is(err, lambdaenv.ErrTimeout) {
			t.Fatalf("invocation %d past the caller's deadline: %v, want ErrTimeout", i, err)
		}
	}
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if _, err := e.Invoke(cctx, []byte(`{"do":"ok"}`)); !errors.Is(err, context.Canceled) || errors.Is(err, lambdaenv.ErrTimeout) {
		t.Errorf("invocation with a cancelled ctx: %v, want ctx's error", err)
	}
}

// Build writes the bootstrap where Lambda expects it: <out>/<function>/bootstrap.
func TestBuildPath(t *testing.T) {
	if filepath.Base(fnBin) != "bootstrap" || filepath.Base(filepath.Dir(fnBin)) != "fn" {
		t.Errorf("built %s, want .../fn/bootstrap", fnBin)
	}
}

// Kill ends the process of a running invocation at once: the invocation fails as a
// crash, and the next one starts afresh.
func TestKill(t *testing.T) {
	e := newEnv(t, time.Minute)
	if _, err := invoke(t, e, `{"do":"ok"}`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.Invoke(context.Background(), []byte(`{"do":"sleep","sleep_ms":600000}`))
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // Kill is for a running invocation; before it runs, it kills the idle process, which fails it the same way
	e.Kill()
	var xe *lambdaenv.ExitError
	if err := <-done; !errors.As(err, &xe) {
		t.Fatalf("killed invocation: %v, want an ExitError", err)
	}
	if _, err := invoke(t, e, `{"do":"ok"}`); err != nil || e.Inits() != 2 {
		t.Errorf("after Kill: %v, %d inits; want a fresh environment", err, e.Inits())
	}
}
