package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/internal/loopback"
)

// Kind is a fault HTTPErrors injects.
type Kind string

const (
	// Throttling answers HTTP 400 ThrottlingException without forwarding the request.
	Throttling Kind = "ThrottlingException"
	// ThroughputExceeded answers HTTP 400 ProvisionedThroughputExceededException (a
	// DynamoDB table or index over its capacity) without forwarding the request.
	ThroughputExceeded Kind = "ProvisionedThroughputExceededException"
	// InternalError answers HTTP 500 InternalServerError without forwarding the request.
	InternalError Kind = "InternalServerError"
	// Unavailable answers HTTP 503 ServiceUnavailable without forwarding the request.
	Unavailable Kind = "ServiceUnavailable"
	// Dropped closes the connection without forwarding the request or answering.
	Dropped Kind = "Dropped"
	// LostResponse forwards the request, so the emulator applies it, then answers HTTP
	// 500 InternalServerError instead of the emulator's response. The SDK retries the
	// same request; for TransactWriteItems it carries the same ClientRequestToken, which
	// DynamoDB honours (success, nothing applied twice) but moto ignores (the
	// transaction runs again).
	LostResponse Kind = "LostResponse"
	// LostConnection forwards the request, so the emulator applies it, then closes the
	// connection without answering.
	LostConnection Kind = "LostConnection"
)

// Kinds lists every Kind.
func Kinds() []Kind {
	return []Kind{Throttling, ThroughputExceeded, InternalError, Unavailable, Dropped, LostResponse, LostConnection}
}

// Forwarded reports whether a request that gets this fault reaches the upstream.
func (k Kind) Forwarded() bool { return k == LostResponse || k == LostConnection }

// status returns the HTTP status and AWS error code of an error answer, 0 for none.
func (k Kind) status() (int, string) {
	switch k {
	case Throttling, ThroughputExceeded:
		return http.StatusBadRequest, string(k)
	case InternalError, LostResponse:
		return http.StatusInternalServerError, "InternalServerError"
	case Unavailable:
		return http.StatusServiceUnavailable, "ServiceUnavailable"
	}
	return 0, ""
}

func (k Kind) valid() bool {
	for _, v := range Kinds() {
		if k == v {
			return true
		}
	}
	return false
}

// Rule says which requests get a fault.
type Rule struct {
	// Kind is the fault.
	Kind Kind
	// Share is the probability (0 to 1) that a matching request gets the fault.
	Share float64
	// Limit caps the faults this rule injects; 0 means no limit. With Share 1 and Limit
	// n, exactly the next n matching requests get the fault.
	Limit int64
	// Targets restricts the rule to requests whose X-Amz-Target header is one of these
	// (for example "DynamoDB_20120810.TransactWriteItems"); a value ending in "*"
	// matches by prefix ("DynamoDB_20120810.*"). Empty: every request.
	Targets []string
}

func (r Rule) matches(target string) bool {
	if len(r.Targets) == 0 {
		return true
	}
	for _, t := range r.Targets {
		if p, ok := strings.CutSuffix(t, "*"); ok && strings.HasPrefix(target, p) || t == target {
			return true
		}
	}
	return false
}

// Stats counts what an HTTPErrors did.
type Stats struct {
	Requests  int64          // requests received
	Forwarded int64          // requests sent to the upstream: they reached the emulator
	Injected  map[Kind]int64 // faults injected, by kind
}

// Faults returns the number of faults injected, of every kind.
func (s Stats) Faults() int64 {
	var n int64
	for _, v := range s.Injected {
		n += v
	}
	return n
}

// HTTPErrors is an HTTP reverse proxy on a free loopback port in front of an AWS-protocol
// endpoint that answers a share of the requests with AWS errors (see Kind), following
// rules that can change at any time. It is safe for concurrent use.
type HTTPErrors struct {
	addr     string
	server   *http.Server
	proxy    *httputil.ReverseProxy
	tr       *http.Transport
	served   chan struct{}
	requests atomic.Int64
	fwd      atomic.Int64

	mu       sync.Mutex
	rules    []Rule
	fired    []int64 // faults injected by each rule
	injected map[Kind]int64
	closed   bool
}

// errLostConnection makes the proxy's error handler close the client's connection.
var errLostConnection = errors.New("faults: lost connection injected")

type afterKey struct{}

// NewHTTPErrors starts a proxy in front of upstream, an http URL such as awstest's
// endpoint or a TCP's URL. It injects nothing until rules are set. Close it when done.
func NewHTTPErrors(upstream string) (*HTTPErrors, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("faults: upstream %q: %w", upstream, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("faults: upstream %q is not an http(s) URL", upstream)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faults: listen: %w", err)
	}
	base, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		base = &http.Transport{}
	}
	tr := base.Clone()
	tr.MaxIdleConnsPerHost = 128
	tr.DisableCompression = true // pass the bytes through as they are
	h := &HTTPErrors{addr: l.Addr().String(), tr: tr, served: make(chan struct{}), injected: map[Kind]int64{}}
	h.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host // what the client signed
		},
		Transport:      tr,
		ModifyResponse: h.modifyResponse,
		ErrorHandler:   h.errorHandler,
	}
	h.server = &http.Server{Handler: loopback.Guard(l, h), ReadHeaderTimeout: 30 * time.Second}
	go func() {
		defer close(h.served)
		_ = h.server.Serve(l) // returns http.ErrServerClosed after Close
	}()
	return h, nil
}

// Addr returns the host:port the proxy listens on.
func (h *HTTPErrors) Addr() string { return h.addr }

// URL returns the proxy's address as an http URL: the endpoint to give SDK clients.
func (h *HTTPErrors) URL() string { return "http://" + h.addr }

// Set replaces the rules (and restarts their limits). For each request the rules are
// tried in order, each drawing on its own, and the first that fires decides the fault
// (with shares a then b, the second fires on (1-a)*b of the requests both match); when
// none fires the request is forwarded untouched.
func (h *HTTPErrors) Set(rules ...Rule) error {
	for i, r := range rules {
		if !r.Kind.valid() {
			return fmt.Errorf("faults: rule %d: unknown kind %q", i, r.Kind)
		}
		if r.Share < 0 || r.Share > 1 {
			return fmt.Errorf("faults: rule %d (%s): share %v is not between 0 and 1", i, r.Kind, r.Share)
		}
		if r.Limit < 0 {
			return fmt.Errorf("faults: rule %d (%s): negative limit %d", i, r.Kind, r.Limit)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rules = make([]Rule, len(rules))
	for i, r := range rules {
		r.Targets = append([]string(nil), r.Targets...)
		h.rules[i] = r
	}
	h.fired = make([]int64, len(rules))
	return nil
}

// Inject sets one rule: a share (0 to 1) of the requests whose X-Amz-Target is one of
// targets (every request when none is given) get the fault kind.
func (h *HTTPErrors) Inject(kind Kind, share float64, targets ...string) error {
	return h.Set(Rule{Kind: kind, Share: share, Targets: targets})
}

// InjectNext sets one rule: the next n requests whose X-Amz-Target is one of targets
// (every request when none is given) get the fault kind, and no request after them.
func (h *HTTPErrors) InjectNext(kind Kind, n int64, targets ...string) error {
	if n <= 0 {
		return fmt.Errorf("faults: InjectNext(%s, %d): n must be positive", kind, n)
	}
	return h.Set(Rule{Kind: kind, Share: 1, Limit: n, Targets: targets})
}

// Clear removes every rule: requests are forwarded untouched.
func (h *HTTPErrors) Clear() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rules, h.fired = nil, nil
}

// Stats returns the counts since the start or the last ResetStats.
func (h *HTTPErrors) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Stats{Requests: h.requests.Load(), Forwarded: h.fwd.Load(), Injected: maps.Clone(h.injected)}
}

// ResetStats sets every count to zero (the rules' limits are not reset: Set does that).
func (h *HTTPErrors) ResetStats() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests.Store(0)
	h.fwd.Store(0)
	h.injected = map[Kind]int64{}
}

// Close stops the proxy and closes its connections. It is safe to call more than once.
func (h *HTTPErrors) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.mu.Unlock()
	err := h.server.Close()
	<-h.served
	h.tr.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("faults: close proxy on %s: %w", h.addr, err)
	}
	return nil
}

// pick returns the fault for a request with this X-Amz-Target, if a rule fires.
func (h *HTTPErrors) pick(target string) (Kind, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, r := range h.rules {
		if !r.matches(target) || r.Limit > 0 && h.fired[i] >= r.Limit {
			continue
		}
		if r.Share >= 1 || rand.Float64() < r.Share {
			h.fired[i]++
			return r.Kind, true
		}
	}
	return "", false
}

func (h *HTTPErrors) count(k Kind) {
	h.mu.Lock()
	h.injected[k]++
	h.mu.Unlock()
}

// ServeHTTP handles one request: forwarded, answered with an error, or both.
func (h *HTTPErrors) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.requests.Add(1)
	target := r.Header.Get("X-Amz-Target")
	kind, inject := h.pick(target)
	switch {
	case !inject:
	case kind == Dropped:
		h.count(kind)
		closeConn(w)
		return
	case !kind.Forwarded():
		_, _ = io.Copy(io.Discard, r.Body) // keep the connection reusable
		h.count(kind)
		writeError(w, kind, target)
		return
	default:
		r = r.WithContext(context.WithValue(r.Context(), afterKey{}, kind))
	}
	h.fwd.Add(1)
	h.proxy.ServeHTTP(w, r)
}

// modifyResponse replaces the emulator's response when the request carries an
// after-forwarding fault.
func (h *HTTPErrors) modifyResponse(resp *http.Response) error {
	kind, ok := resp.Request.Context().Value(afterKey{}).(Kind)
	if !ok {
		return nil
	}
	_, _ = io.Copy(io.Discard, resp.Body) // the emulator's answer is read, then lost
	_ = resp.Body.Close()
	h.count(kind)
	if kind == LostConnection {
		return errLostConnection
	}
	status, _ := kind.status()
	body := errorBody(kind, resp.Request.Header.Get("X-Amz-Target"))
	resp.StatusCode = status
	resp.Status = fmt.Sprintf("%d %s", status, http.StatusText(status))
	resp.Header = http.Header{}
	setErrorHeaders(resp.Header, body)
	resp.ContentLength = int64(len(body))
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	return nil
}

func (h *HTTPErrors) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errLostConnection) {
		closeConn(w)
		return
	}
	// The upstream did not answer: what a load balancer says in that case.
	w.WriteHeader(http.StatusBadGateway)
}

// closeConn closes the client's connection without an answer.
func closeConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): an error answer is the closest thing.
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	_ = conn.Close()
}

// writeError writes an AWS JSON error answer for kind.
func writeError(w http.ResponseWriter, kind Kind, target string) {
	status, _ := kind.status()
	body := errorBody(kind, target)
	setErrorHeaders(w.Header(), body)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// setErrorHeaders sets the headers of an AWS JSON error answer. X-Amz-Crc32 is what
// DynamoDB sends: its SDK client checks every response body against it (and, without
// the header, against 0, logging a checksum warning for each error answer).
func setErrorHeaders(h http.Header, body []byte) {
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
}

// errorBody is the AWS JSON error document: __type is the error code qualified by the
// service's namespace, as DynamoDB and SQS send it.
func errorBody(kind Kind, target string) []byte {
	_, code := kind.status()
	ns := ""
	switch {
	case strings.HasPrefix(target, "DynamoDB_20120810."):
		ns = "com.amazonaws.dynamodb.v20120810#"
	case strings.HasPrefix(target, "AmazonSQS."):
		ns = "com.amazonaws.sqs#"
	}
	b, err := json.Marshal(map[string]string{"__type": ns + code, "message": "injected by internal/faults: " + string(kind)})
	if err != nil { // cannot happen with string values
		return []byte(`{"__type":"` + code + `"}`)
	}
	return b
}
