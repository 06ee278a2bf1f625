// Package gateway is a stand-in for an outside HTTP service that a handler calls in a
// recorded step with the idempotency key forwarded (a payment gateway, a webhook
// endpoint): a real HTTP server on loopback, for the tests, the demo and idemctl.
//
// It behaves as such a service must for the handler to be safe: it applies each key
// once. A POST with a new Idempotency-Key is applied and answered 201 with the id it got;
// the same key with the same body again gets that answer again (200, Idempotent-Replayed:
// true) and applies nothing; the same key with another body gets 422. It records every
// call (key, time, body, what it did), which is what the suites count: how many times
// each key was called. On request it fails (503, nothing applied), hangs (no answer until
// the caller gives up, nothing applied) or loses its answer (applied, then the connection
// closed without an answer): Inject, or a POST of Faults to FaultsPath.
//
// Like a real service it may forget keys: with a key window (SetKeyWindow), a call with
// a key applied longer ago than that is applied again, under a new id. Its own records it
// keeps for good: a GET of a service path with ?idempotency_key=KEY (LookupParam) answers
// 200 with the last application of that key, as the POST did, or 404 when there is none.
//
// Its log and its faults are reachable over HTTP too (CallsPath, FaultsPath), so a
// process that did not start it (the demo's check, a person with curl) reads what it saw.
//
// It is test support (docs/tooling.md): the consumer's own tests use it, and it imports
// nothing of the development tooling. The consumer's production code never imports it.
package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/internal/loopback"
)

// KeyHeader is the header that carries the idempotency key.
const KeyHeader = "Idempotency-Key"

// ReplayedHeader is set on an answer given again for a key applied before.
const ReplayedHeader = "Idempotent-Replayed"

// LookupParam is the query parameter of a lookup: a GET of a service path with it.
const LookupParam = "idempotency_key"

// Paths of the stand-in's own endpoints; every other path is the service.
const (
	CallsPath  = "/_gateway/calls"  // GET: every call so far, as a JSON array of Call
	FaultsPath = "/_gateway/faults" // POST: a JSON Faults, added to those pending
)

// Outcomes of a call.
const (
	Applied  = "applied"  // a new key: applied, answered 201 with its id
	Replayed = "replayed" // a key applied before, with the same body: its answer again, nothing applied
	Conflict = "conflict" // a key applied before with another body: 422, nothing applied
	NoKey    = "no key"   // no Idempotency-Key header: 400, nothing applied
	Failed   = "failed"   // an injected failure: 503, nothing applied
	Hung     = "hung"     // an injected hang: no answer before the caller gave up, nothing applied
	Lost     = "lost"     // an injected lost answer: applied, the connection closed without an answer
)

// Call is one request the stand-in received.
type Call struct {
	Key     string    `json:"key"`
	Method  string    `json:"method"`
	Path    string    `json:"path"`
	Body    string    `json:"body"`
	At      time.Time `json:"at"`
	Outcome string    `json:"outcome"`
	Status  int       `json:"status"`       // the status answered; 0: none (hung, lost)
	ID      string    `json:"id,omitempty"` // the id the key was applied under
	// Service is the name the stand-in was started for (StartFor): which of several
	// stand-ins logging to one writer took the call. "": unnamed.
	Service string `json:"service,omitempty"`
}

// Faults are injected into the next calls, in this order: the next Fail calls are
// answered 503, the Hang calls after them get no answer (for HangFor, default until the
// caller gives up), the Lose calls after those are applied and their answer lost.
type Faults struct {
	Fail    int           `json:"fail"`
	Hang    int           `json:"hang"`
	HangFor time.Duration `json:"hang_for"`
	Lose    int           `json:"lose"`
}

// Server is the stand-in. Its methods are safe for concurrent use.
type Server struct {
	url  string
	srv  *http.Server
	stop context.CancelFunc
	done chan struct{}
	log  io.Writer // each call as a JSON line; nil: none
	name string    // Call.Service of its calls

	mu      sync.Mutex
	calls   []Call
	applied map[string]Call // key -> the call that last applied it
	ids     int             // applications so far: the next id
	faults  Faults
	window  time.Duration    // how long a key is kept; 0: for ever
	now     func() time.Time // the clock of the key window
}

// Start serves the stand-in on addr (host:port; "" is 127.0.0.1 on a free port), which
// must be a loopback address. log, when not nil, gets each call as a JSON line.
func Start(addr string, log io.Writer) (*Server, error) { return StartFor("", addr, log) }

// StartFor is Start for the service named service: each of its calls says so
// (Call.Service), in Calls and in the log.
func StartFor(service, addr string, log io.Writer) (*Server, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("gateway: address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("gateway: address %q is not on the loopback interface", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	base, stop := context.WithCancel(context.Background())
	s := &Server{
		url: "http://" + ln.Addr().String(), stop: stop, done: make(chan struct{}), log: log, name: service,
		applied: map[string]Call{}, now: time.Now,
	}
	s.srv = &http.Server{
		Handler:           loopback.Guard(ln, s),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln) // ErrServerClosed once Close is called
	}()
	return s, nil
}

// URL is the stand-in's base URL, http://127.0.0.1:PORT.
func (s *Server) URL() string { return s.url }

// Close stops the stand-in: hung calls end, open connections are closed.
func (s *Server) Close() error {
	s.stop()
	err := s.srv.Close()
	<-s.done
	return err
}

// Inject adds f to the faults pending for the next calls.
func (s *Server) Inject(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.Fail += max(f.Fail, 0)
	s.faults.Hang += max(f.Hang, 0)
	s.faults.Lose += max(f.Lose, 0)
	if f.HangFor > 0 {
		s.faults.HangFor = f.HangFor
	}
}

// SetKeyWindow makes the stand-in forget a key d after it applied it (0: never), and
// read the time from now (nil: time.Now): a call with a forgotten key is applied again.
func (s *Server) SetKeyWindow(d time.Duration, now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now == nil {
		now = time.Now
	}
	s.window, s.now = max(d, 0), now
}

// Calls returns every call so far, in the order they arrived.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// ServeHTTP answers the service's calls and the stand-in's own endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case CallsPath:
		if r.Method != http.MethodGet {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Calls())
		return
	case FaultsPath:
		var f Faults
		if r.Method != http.MethodPost || json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&f) != nil {
			http.Error(w, `POST a JSON object {"fail":N,"hang":N,"hang_for":NANOSECONDS,"lose":N}`, http.StatusBadRequest)
			return
		}
		s.Inject(f)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if key := r.URL.Query().Get(LookupParam); r.Method == http.MethodGet && key != "" {
		s.lookup(w, key)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	c := Call{Key: r.Header.Get(KeyHeader), Method: r.Method, Path: r.URL.Path, Body: string(body), At: s.clock(), Service: s.name}
	fault, hangFor := s.take(c.Key != "")
	switch {
	case c.Key == "":
		c.Outcome, c.Status = NoKey, http.StatusBadRequest
		s.record(c)
		http.Error(w, "no "+KeyHeader+" header", c.Status)
	case fault == Failed:
		c.Outcome, c.Status = Failed, http.StatusServiceUnavailable
		s.record(c)
		http.Error(w, "injected failure: try again", c.Status)
	case fault == Hung:
		c.Outcome = Hung
		s.record(c)
		s.hang(r.Context(), hangFor)
		closeWithoutAnswer(w)
	default:
		var answer []byte
		c, answer = s.apply(c)
		if fault == Lost && c.Outcome == Applied {
			c.Outcome, c.Status = Lost, 0
			s.record(c)
			closeWithoutAnswer(w)
			return
		}
		s.record(c)
		w.Header().Set("Content-Type", "application/json")
		if c.Outcome == Replayed {
			w.Header().Set(ReplayedHeader, "true")
		}
		w.WriteHeader(c.Status)
		_, _ = w.Write(answer)
	}
}

// take consumes the next pending fault for a call (none for a call without a key).
func (s *Server) take(keyed bool) (string, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !keyed:
		return "", 0
	case s.faults.Fail > 0:
		s.faults.Fail--
		return Failed, 0
	case s.faults.Hang > 0:
		s.faults.Hang--
		return Hung, s.faults.HangFor
	case s.faults.Lose > 0:
		s.faults.Lose--
		return Lost, 0
	}
	return "", 0
}

// answer is the body of a 200 or 201.
type answer struct {
	ID     string `json:"id"`
	Key    string `json:"key"`
	Status string `json:"status"`
}

// clock is the stand-in's time.
func (s *Server) clock() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now()
}

// lookup answers what became of the calls with key: its last application (200, the
// answer its call got), or 404.
func (s *Server) lookup(w http.ResponseWriter, key string) {
	s.mu.Lock()
	c, ok := s.applied[key]
	s.mu.Unlock()
	if !ok {
		http.Error(w, "no call applied under that key", http.StatusNotFound)
		return
	}
	b, _ := json.Marshal(answer{ID: c.ID, Key: c.Key, Status: "applied"}) // strings always marshal
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// apply applies c's key once while the key is kept: a new key (or one applied longer
// ago than the key window) gets an id; the key again with the same body gets the first
// answer; with another body, a conflict.
func (s *Server) apply(c Call) (Call, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if first, ok := s.applied[c.Key]; ok && (s.window == 0 || c.At.Sub(first.At) < s.window) {
		if first.Body != c.Body {
			c.Outcome, c.Status = Conflict, http.StatusUnprocessableEntity
			return c, []byte(`{"error":"the key was used with another body"}` + "\n")
		}
		c.Outcome, c.Status, c.ID = Replayed, http.StatusOK, first.ID
	} else {
		s.ids++
		c.Outcome, c.Status, c.ID = Applied, http.StatusCreated, fmt.Sprintf("tr_%06d", s.ids)
		s.applied[c.Key] = c
	}
	b, _ := json.Marshal(answer{ID: c.ID, Key: c.Key, Status: "applied"}) // strings always marshal
	return c, append(b, '\n')
}

func (s *Server) record(c Call) {
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	if s.log != nil {
		b, _ := json.Marshal(c) // strings, ints and a time always marshal
		_, _ = s.log.Write(append(b, '\n'))
	}
}

// hang waits until the caller gives up, the stand-in closes, or d (when positive) passes.
func (s *Server) hang(ctx context.Context, d time.Duration) {
	if d <= 0 {
		<-ctx.Done()
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// closeWithoutAnswer closes the call's connection without writing a response: the caller
// sees the connection end (EOF), as when a service's answer is lost. (The stand-in serves
// HTTP/1.1, whose connections can always be taken over; if one could not, the caller gets
// a 502 instead, which it retries the same way.)
func closeWithoutAnswer(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	http.Error(w, "answer lost", http.StatusBadGateway)
}

// ReadCalls reads the calls a stand-in at baseURL received (its CallsPath).
func ReadCalls(ctx context.Context, client *http.Client, baseURL string) ([]Call, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+CallsPath, nil)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("gateway: read the calls of %s: %w", baseURL, err)
	}
	defer resp.Body.Close() //nolint:errcheck // read only
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("gateway: read the calls of %s: %s (is it the stand-in, internal/gateway?)", baseURL, resp.Status)
	}
	var calls []Call
	if err := json.NewDecoder(resp.Body).Decode(&calls); err != nil {
		return nil, fmt.Errorf("gateway: read the calls of %s: %w", baseURL, err)
	}
	return calls, nil
}

// Tally is what the calls show, key by key.
type Tally struct {
	Calls     int            // calls with a key
	Keys      int            // distinct keys called
	Applied   int            // keys applied (once each, by construction)
	Repeated  map[string]int // keys called more than once -> their calls
	Conflicts int            // calls that reused a key with another body
	Faults    int            // calls failed, hung or lost on request
}

// Count tallies calls.
func Count(calls []Call) Tally {
	t := Tally{Repeated: map[string]int{}}
	per := map[string]int{}
	applied := map[string]bool{}
	for _, c := range calls {
		if c.Key == "" {
			continue
		}
		t.Calls++
		per[c.Key]++
		switch c.Outcome {
		case Applied, Lost:
			applied[c.Key] = true
		case Conflict:
			t.Conflicts++
		}
		if c.Outcome == Failed || c.Outcome == Hung || c.Outcome == Lost {
			t.Faults++
		}
	}
	for k, n := range per {
		if n > 1 {
			t.Repeated[k] = n
		}
	}
	t.Keys, t.Applied = len(per), len(applied)
	return t
}

// RepeatedKeys returns the keys called more than once, sorted.
func (t Tally) RepeatedKeys() []string {
	keys := make([]string, 0, len(t.Repeated))
	for k := range t.Repeated {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
