// Package coldstart measures the cold start of a Lambda bootstrap on the host: the time
// from process start until the process asks the Lambda Runtime API for its first event
// (its init is done), and until it posts the response to that event.
//
// RuntimeAPI is Lambda's process interface (the Runtime API the bootstrap polls, see
// https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html), served on loopback for
// one process: it is not an AWS data-plane API, and the function's own AWS calls go to
// the endpoint in its environment. Measure starts a bootstrap against a fresh RuntimeAPI
// and feeds it one event. The measurement itself is TestColdStart, gated by
// IDEM_COLDSTART=1.
package coldstart

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// APIVersion is the Runtime API version aws-lambda-go calls.
const APIVersion = "2018-06-01"

// Header names of the Runtime API's next-invocation response.
const (
	HeaderRequestID   = "Lambda-Runtime-Aws-Request-Id"
	HeaderDeadlineMS  = "Lambda-Runtime-Deadline-Ms"
	HeaderFunctionARN = "Lambda-Runtime-Invoked-Function-Arn"
	HeaderTraceID     = "Lambda-Runtime-Trace-Id"
	HeaderErrorType   = "Lambda-Runtime-Function-Error-Type"
)

// Invocation is one event handed to the function.
type Invocation struct {
	RequestID   string
	Payload     []byte
	Deadline    time.Time
	FunctionARN string
}

// Result is what the function posted for an invocation, or for its init.
type Result struct {
	RequestID string
	// At is when the post was received in full.
	At time.Time
	// Body is the response, or the error document when Error is set.
	Body []byte
	// Error is set for a post to .../error or /runtime/init/error.
	Error bool
	// ErrorType is the Lambda-Runtime-Function-Error-Type header or trailer, if any.
	ErrorType string
}

// RuntimeAPI serves the Lambda Runtime API for one function process on loopback: GET
// /runtime/invocation/next hands out queued invocations (blocking until there is one),
// POST /runtime/invocation/{id}/response and /error and POST /runtime/init/error record
// the function's answers. It notes when the first GET /next arrived: the end of init.
type RuntimeAPI struct {
	ln  net.Listener
	srv *http.Server

	queue  chan Invocation
	ready  chan struct{} // closed at the first GET /next
	polled chan struct{} // signalled (without blocking) at every GET /next
	polls  atomic.Int64  // GET /next requests so far
	done   chan struct{} // closed by Close
	once   sync.Once

	mu        sync.Mutex
	readyAt   time.Time
	waiting   map[string]chan Result
	initError chan Result
}

// NewRuntimeAPI starts a RuntimeAPI on a free loopback port.
func NewRuntimeAPI() (*RuntimeAPI, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("coldstart: listen: %w", err)
	}
	a := &RuntimeAPI{
		ln: ln, queue: make(chan Invocation, 16), ready: make(chan struct{}), polled: make(chan struct{}, 1), done: make(chan struct{}),
		waiting: map[string]chan Result{}, initError: make(chan Result, 1),
	}
	mux := http.NewServeMux()
	prefix := "/" + APIVersion + "/runtime/"
	mux.HandleFunc("GET "+prefix+"invocation/next", a.next)
	mux.HandleFunc("POST "+prefix+"invocation/{id}/response", a.post(false))
	mux.HandleFunc("POST "+prefix+"invocation/{id}/error", a.post(true))
	mux.HandleFunc("POST "+prefix+"init/error", a.initErr)
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = a.srv.Serve(ln) }()
	return a, nil
}

// Addr is the value of AWS_LAMBDA_RUNTIME_API for the function: host:port.
func (a *RuntimeAPI) Addr() string { return a.ln.Addr().String() }

// Ready is closed when the function first asks for an event.
func (a *RuntimeAPI) Ready() <-chan struct{} { return a.ready }

// Polled receives a value after a GET /next arrived; one value stands for any number
// of them since the last receive.
func (a *RuntimeAPI) Polled() <-chan struct{} { return a.polled }

// Polls is the number of GET /next requests so far: after the function has answered n
// invocations, Polls() > n means it is waiting for the next one.
func (a *RuntimeAPI) Polls() int64 { return a.polls.Load() }

// ReadyAt is when the first GET /next arrived (zero before).
func (a *RuntimeAPI) ReadyAt() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.readyAt
}

// InitError delivers the function's post to /runtime/init/error, if it makes one.
func (a *RuntimeAPI) InitError() <-chan Result { return a.initError }

// Enqueue queues inv for the function and returns a channel that receives its result.
func (a *RuntimeAPI) Enqueue(inv Invocation) (<-chan Result, error) {
	if inv.RequestID == "" {
		return nil, errors.New("coldstart: invocation without a request id")
	}
	ch := make(chan Result, 1)
	a.mu.Lock()
	if _, dup := a.waiting[inv.RequestID]; dup {
		a.mu.Unlock()
		return nil, fmt.Errorf("coldstart: request id %s already queued", inv.RequestID)
	}
	a.waiting[inv.RequestID] = ch
	a.mu.Unlock()
	select {
	case a.queue <- inv:
		return ch, nil
	default:
		return nil, errors.New("coldstart: invocation queue full")
	}
}

// Close stops the server; a GET /next still waiting is answered with an error.
func (a *RuntimeAPI) Close() error {
	a.once.Do(func() { close(a.done) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := a.srv.Shutdown(ctx); err != nil {
		return a.srv.Close()
	}
	return nil
}

func (a *RuntimeAPI) next(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	a.mu.Lock()
	if a.readyAt.IsZero() {
		a.readyAt = now
		close(a.ready)
	}
	a.mu.Unlock()
	a.polls.Add(1)
	select {
	case a.polled <- struct{}{}:
	default:
	}
	select {
	case inv := <-a.queue:
		h := w.Header()
		h.Set(HeaderRequestID, inv.RequestID)
		h.Set(HeaderDeadlineMS, strconv.FormatInt(inv.Deadline.UnixMilli(), 10))
		h.Set(HeaderFunctionARN, inv.FunctionARN)
		h.Set(HeaderTraceID, "Root=1-00000000-000000000000000000000000;Parent=0000000000000000;Sampled=0")
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(inv.Payload)
	case <-r.Context().Done():
	case <-a.done:
		http.Error(w, "runtime API closed", http.StatusInternalServerError)
	}
}

func (a *RuntimeAPI) post(isError bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		res := Result{RequestID: r.PathValue("id"), At: time.Now(), Body: body, Error: isError, ErrorType: errorType(r)}
		a.mu.Lock()
		ch, ok := a.waiting[res.RequestID]
		delete(a.waiting, res.RequestID)
		a.mu.Unlock()
		if !ok {
			http.Error(w, "unknown request id", http.StatusBadRequest)
			return
		}
		ch <- res
		w.WriteHeader(http.StatusAccepted)
	}
}

func (a *RuntimeAPI) initErr(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	select {
	case a.initError <- Result{At: time.Now(), Body: body, Error: true, ErrorType: errorType(r)}:
	default:
	}
	w.WriteHeader(http.StatusAccepted)
}

// errorType is the function's error type, from the header or, as aws-lambda-go sends
// it when the response stream fails, the trailer.
func errorType(r *http.Request) string {
	if t := r.Header.Get(HeaderErrorType); t != "" {
		return t
	}
	return r.Trailer.Get(HeaderErrorType)
}

// Sample is one cold start.
type Sample struct {
	// Ready is the time from process start to its first GET /next: the init.
	Ready time.Duration
	// FirstResponse is the time from process start to its response to the first event
	// (init, then the event's processing).
	FirstResponse time.Duration
	// Response is the body of that response.
	Response []byte
}

// Measure starts the bootstrap bin with env (AWS_LAMBDA_RUNTIME_API is added) against a
// new RuntimeAPI, hands it event once it asks, and stops it after its response. The
// process's stdout and stderr go to output (nil: discarded). A function error, an init
// error or an exit before the response is an error, with what the function reported.
func Measure(ctx context.Context, bin string, env []string, event []byte, deadline time.Duration, output io.Writer) (Sample, error) {
	api, err := NewRuntimeAPI()
	if err != nil {
		return Sample{}, err
	}
	defer func() { _ = api.Close() }()
	// Queued before the start, so the first GET /next is answered at once.
	id := fmt.Sprintf("coldstart-%d", time.Now().UnixNano())
	result, err := api.Enqueue(Invocation{
		RequestID: id, Payload: event, Deadline: time.Now().Add(deadline),
		FunctionARN: "arn:aws:lambda:us-east-1:123456789012:function:coldstart",
	})
	if err != nil {
		return Sample{}, err
	}
	if output == nil {
		output = io.Discard
	}
	cmd := newCommand(bin, append(env[:len(env):len(env)], "AWS_LAMBDA_RUNTIME_API="+api.Addr()), output)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Sample{}, fmt.Errorf("coldstart: start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// stop kills the process and returns its exit status, which only says it was killed.
	stop := func() error {
		_ = cmd.Process.Kill()
		return <-exited
	}
	select {
	case res := <-result:
		_ = stop()
		s := Sample{Ready: api.ReadyAt().Sub(start), FirstResponse: res.At.Sub(start), Response: res.Body}
		if res.Error {
			return s, fmt.Errorf("coldstart: %s: function error %s: %s", bin, res.ErrorType, strings.TrimSpace(string(res.Body)))
		}
		return s, nil
	case res := <-api.InitError():
		_ = stop()
		return Sample{}, fmt.Errorf("coldstart: %s: init error %s: %s", bin, res.ErrorType, strings.TrimSpace(string(res.Body)))
	case err := <-exited:
		return Sample{}, fmt.Errorf("coldstart: %s exited before its first response: %w", bin, err)
	case <-ctx.Done():
		_ = stop()
		return Sample{}, fmt.Errorf("coldstart: %s: %w", bin, ctx.Err())
	}
}
