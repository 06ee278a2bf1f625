package demo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// FaultProxy is the fault injection of StallCommits and CrashAt for functions that run
// in other processes (Lambda execution environments, see internal/lambdaenv): their AWS
// endpoint is this reverse proxy in front of the real one, which sees their DynamoDB
// calls (by X-Amz-Target and the request's expressions, as PhaseOf) and stalls or
// crashes them there. Safe for concurrent use.
type FaultProxy struct {
	// Stall delays every completion transaction this long before it is sent (0: none),
	// announcing the first with StallMarker on Out.
	Stall time.Duration
	// StallCount, when positive, stalls only the first StallCount commits.
	StallCount int
	// CrashPhase and CrashAfter: after the CrashAfter-th successful call of the phase,
	// Crash is called before the answer goes back (the caller never sees it); for
	// PhaseStepCalled, at the CrashAfter-th call that records a step, before it is sent.
	// Crash is expected to kill the callers.
	CrashPhase string
	CrashAfter int
	Crash      func()
	Out        io.Writer

	proxy   *httputil.ReverseProxy
	seen    atomic.Int64
	stalled atomic.Int64
	once    sync.Once
}

// NewFaultProxy returns a FaultProxy that forwards to endpoint (an AWS endpoint URL).
func NewFaultProxy(endpoint string) (*FaultProxy, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("demo: fault proxy: endpoint %q is not a URL", endpoint)
	}
	return &FaultProxy{proxy: httputil.NewSingleHostReverseProxy(u)}, nil
}

// Stalled is how many commits have been stalled so far.
func (f *FaultProxy) Stalled() int {
	n := int(f.stalled.Load())
	if f.StallCount > 0 {
		n = min(n, f.StallCount)
	}
	return n
}

// ServeHTTP forwards r, stalling or crashing DynamoDB calls as configured.
func (f *FaultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	phase := ""
	if target := r.Header.Get("X-Amz-Target"); strings.HasPrefix(target, "DynamoDB_") {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var in struct{ UpdateExpression, ConditionExpression string }
		_ = json.Unmarshal(body, &in)
		phase = PhaseOf(target[strings.IndexByte(target, '.')+1:], in.UpdateExpression, in.ConditionExpression)
	}
	if phase == PhaseCommit && f.Stall > 0 && (f.stalled.Add(1) <= int64(f.StallCount) || f.StallCount <= 0) {
		f.once.Do(func() { fmt.Fprintln(f.Out, StallMarker) })
		select {
		case <-time.After(f.Stall):
		case <-r.Context().Done():
			return
		}
	}
	request, before := crashPoint(f.CrashPhase)
	if phase == "" || phase != request || f.Crash == nil {
		f.proxy.ServeHTTP(w, r)
		return
	}
	if before {
		if f.seen.Add(1) == int64(f.CrashAfter) {
			fmt.Fprintf(f.Out, "%s %s\n", CrashMarker, f.CrashPhase)
			f.Crash()
			return
		}
		f.proxy.ServeHTTP(w, r)
		return
	}
	rec := &held{header: http.Header{}}
	f.proxy.ServeHTTP(rec, r)
	if rec.status == http.StatusOK && f.seen.Add(1) == int64(f.CrashAfter) {
		fmt.Fprintf(f.Out, "%s %s\n", CrashMarker, phase)
		f.Crash()
		return
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes())
}

// held is a response kept back until the proxy decides whether to pass it on.
type held struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (h *held) Header() http.Header { return h.header }
func (h *held) Write(b []byte) (int, error) {
	if h.status == 0 {
		h.status = http.StatusOK
	}
	return h.body.Write(b)
}
func (h *held) WriteHeader(status int) { h.status = status }
