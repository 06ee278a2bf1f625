package lambdaenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/internal/coldstart"
)

// Function is what Lambda knows of a function: its bootstrap and its configuration.
type Function struct {
	Name     string        // AWS_LAMBDA_FUNCTION_NAME
	Bin      string        // the bootstrap
	Env      []string      // NAME=value: the function's variables, AWS region, credentials, endpoint
	Timeout  time.Duration // each invocation's limit (default 3s, Lambda's)
	MemoryMB int           // AWS_LAMBDA_FUNCTION_MEMORY_SIZE (default 128, Lambda's); not enforced
	ARN      string        // Lambda-Runtime-Invoked-Function-Arn (default a local ARN)
	Region   string        // for the default ARN (default us-east-1)
	Output   io.Writer     // the process's stdout and stderr (nil: discarded)
}

// Environment is one execution environment of a Function: at most one process at a
// time, started on the first invocation and after every reset.
type Environment struct {
	fn Function

	mu      sync.Mutex // one invocation at a time
	proc    *process
	inits   int
	current atomic.Pointer[process] // proc, for Kill, which does not wait for mu
}

type process struct {
	api    *coldstart.RuntimeAPI
	cmd    *exec.Cmd
	exited chan struct{} // closed when Wait returns; err is set then
	err    error

	invocations int64 // handed to this process

}

// New returns an Environment of fn; no process runs until the first Invoke.
func New(fn Function) (*Environment, error) {
	if fn.Bin == "" || fn.Name == "" {
		return nil, errors.New("lambdaenv: function without a name or a bootstrap")
	}
	if fn.Timeout <= 0 {
		fn.Timeout = 3 * time.Second
	}
	if fn.MemoryMB <= 0 {
		fn.MemoryMB = 128
	}
	if fn.Region == "" {
		fn.Region = "us-east-1"
	}
	if fn.ARN == "" {
		fn.ARN = "arn:aws:lambda:" + fn.Region + ":000000000000:function:" + fn.Name
	}
	if fn.Output == nil {
		fn.Output = io.Discard
	}
	return &Environment{fn: fn}, nil
}

// Inits is how many processes the environment has started (fresh inits).
func (e *Environment) Inits() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inits
}

// Invoke hands payload to the function and returns its response. The deadline is the
// function's timeout from now, or ctx's deadline if that is earlier; at the deadline the
// process is killed and the error is ErrTimeout. Errors: ErrTimeout, *FunctionError,
// *ExitError, *InitError, or ctx's error (the process is killed then too).
func (e *Environment) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	deadline := time.Now().Add(e.fn.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	if e.proc == nil {
		if err := e.start(ctx, timer.C); err != nil {
			return nil, err
		}
	}
	p := e.proc
	p.invocations++
	id := requestID()
	result, err := p.api.Enqueue(coldstart.Invocation{RequestID: id, Payload: payload, Deadline: deadline, FunctionARN: e.fn.ARN})
	if err != nil {
		e.reset()
		return nil, fmt.Errorf("lambdaenv: %s: %w", e.fn.Name, err)
	}
	select {
	case res := <-result:
		if res.Error {
			// aws-lambda-go exits after it reports a panic: wait until the runtime asks for
			// the next event or exits, so that the next invocation finds a live process.
			for p.api.Polls() <= p.invocations && e.proc == p {
				select {
				case <-p.api.Polled():
				case <-p.exited:
					e.reset()
				case <-timer.C:
					e.reset()
				}
			}
			return nil, functionError(res)
		}
		return res.Body, nil
	case <-p.exited:
		err := p.err
		e.reset()
		return nil, &ExitError{Err: err}
	case <-timer.C:
		e.reset()
		return nil, fmt.Errorf("%w after %s (%s, request %s)", ErrTimeout, e.fn.Timeout, e.fn.Name, id)
	case <-ctx.Done():
		e.reset()
		if pastDeadline(ctx) {
			return nil, fmt.Errorf("%w at the caller's deadline (%s, request %s)", ErrTimeout, e.fn.Name, id)
		}
		return nil, fmt.Errorf("lambdaenv: %s: %w", e.fn.Name, ctx.Err())
	}
}

// pastDeadline reports whether ctx ended at its deadline. Invoke's deadline is the
// earlier of the timeout's and ctx's, so ctx's is then the invocation's: its Done and
// Invoke's timer fire together, in either order (under load, Done first as often as
// not), and either way the invocation timed out.
func pastDeadline(ctx context.Context) bool { return errors.Is(ctx.Err(), context.DeadlineExceeded) }

// start runs a new process and waits for the end of its init: its first GET /next.
func (e *Environment) start(ctx context.Context, deadline <-chan time.Time) error {
	api, err := coldstart.NewRuntimeAPI()
	if err != nil {
		return err
	}
	cmd := exec.Command(e.fn.Bin)
	cmd.Env = e.environ(api.Addr())
	cmd.Dir = filepath.Dir(e.fn.Bin)
	out := &lineWriter{w: e.fn.Output}
	cmd.Stdout, cmd.Stderr = out, out
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		_ = api.Close()
		return fmt.Errorf("lambdaenv: start %s: %w", e.fn.Bin, err)
	}
	p := &process{api: api, cmd: cmd, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); out.flush(); close(p.exited) }()
	e.proc, e.inits = p, e.inits+1
	e.current.Store(p)
	select {
	case <-api.Ready():
		return nil
	case res := <-api.InitError():
		e.reset()
		fe := functionError(res)
		return &InitError{Type: fe.Type, Message: fe.Message}
	case <-p.exited:
		// The runtime may have posted its init error just before exiting.
		select {
		case res := <-api.InitError():
			e.reset()
			fe := functionError(res)
			return &InitError{Type: fe.Type, Message: fe.Message}
		default:
		}
		err := p.err
		e.reset()
		return &InitError{Type: "Runtime.ExitError", Message: fmt.Sprintf("the process exited before its init was done: %v", err)}
	case <-deadline:
		e.reset()
		return fmt.Errorf("%w during init (%s)", ErrTimeout, e.fn.Name)
	case <-ctx.Done():
		e.reset()
		if pastDeadline(ctx) {
			return fmt.Errorf("%w during init, at the caller's deadline (%s)", ErrTimeout, e.fn.Name)
		}
		return fmt.Errorf("lambdaenv: %s init: %w", e.fn.Name, ctx.Err())
	}
}

// reset kills the process, if any, and forgets it: the next invocation starts afresh.
func (e *Environment) reset() {
	p := e.proc
	if p == nil {
		return
	}
	e.proc = nil
	e.current.CompareAndSwap(p, nil)
	_ = p.cmd.Process.Kill() // SIGKILL on Unix
	<-p.exited
	_ = p.api.Close()
}

// Kill sends SIGKILL to the environment's process, if one runs, without waiting for
// the invocation in progress: that invocation fails with an *ExitError, as a crash.
func (e *Environment) Kill() {
	if p := e.current.Load(); p != nil {
		_ = p.cmd.Process.Kill()
	}
}

// Close kills the environment's process, if one runs.
func (e *Environment) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reset()
	return nil
}

// environ is the environment Lambda gives a provided.al2023 function, then the
// function's own variables; nothing is inherited from this process
// (https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime).
func (e *Environment) environ(runtimeAPI string) []string {
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin:/opt/bin",
		"LANG=en_US.UTF-8",
		"TZ=:UTC",
		"LAMBDA_TASK_ROOT=" + filepath.Dir(e.fn.Bin),
		"LAMBDA_RUNTIME_DIR=/var/runtime",
		"_HANDLER=bootstrap",
		"AWS_REGION=" + e.fn.Region,
		"AWS_DEFAULT_REGION=" + e.fn.Region,
		"AWS_LAMBDA_FUNCTION_NAME=" + e.fn.Name,
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=" + strconv.Itoa(e.fn.MemoryMB),
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_INITIALIZATION_TYPE=on-demand",
		"AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/" + e.fn.Name,
		"AWS_LAMBDA_LOG_STREAM_NAME=local/[$LATEST]" + requestID()[:8],
	}
	env = append(env, e.fn.Env...)
	return append(env, "AWS_LAMBDA_RUNTIME_API="+runtimeAPI)
}

// functionError reads Lambda's error document {"errorMessage", "errorType"}.
func functionError(res coldstart.Result) *FunctionError {
	var doc struct {
		Message string `json:"errorMessage"`
		Type    string `json:"errorType"`
	}
	_ = json.Unmarshal(res.Body, &doc)
	fe := &FunctionError{Type: doc.Type, Message: doc.Message}
	if fe.Type == "" {
		fe.Type = res.ErrorType
	}
	if fe.Message == "" {
		fe.Message = strings.TrimSpace(string(res.Body))
	}
	return fe
}

func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
