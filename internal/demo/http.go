package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
)

// HTTPOptions is the demo's HTTP phase: some of the valid messages go through the
// ingress (functions/ingress) over real HTTP instead of straight to the queue, sent by
// clients that retry, duplicate, reuse a key with another body and race on a key's
// first request; at the end every accepted request must be completed, once.
type HTTPOptions struct {
	URL      string // the ingress's base URL (a local function URL, internal/funcurl)
	Requests int    // valid messages sent through it, each under its own Idempotency-Key
	// Clients is how many requests are in flight at once (default 8).
	Clients int
	// Sent reports how many messages the ingress had SQS accept (its Sent metric), for
	// the summary's count of messages sent.
	Sent func() int
	// ConsumerKey is the idempotency key the consumer sees for a request sent with the
	// Idempotency-Key key: the ingress keeps and sends a request under its caller's key
	// (ingressapp.Namespace, idem.CallerKey). nil: the key itself.
	ConsumerKey func(key string) string
}

// How the clients of the HTTP phase behave, one kind per request, in turn.
const (
	ClientPlain      = "plain"      // POST until accepted
	ClientRetry      = "retry"      // accepted, then the same POST again
	ClientImpatient  = "impatient"  // gives up before the answer, then retries
	ClientConcurrent = "concurrent" // four clients send the first request at once
	ClientMismatch   = "other body" // accepted, then the same key with another body
	concurrentCopies = 4            // clients of a ClientConcurrent request
	impatience       = 8 * time.Millisecond
)

// ClientKinds lists the kinds of clients, in the order they take the requests.
var ClientKinds = []string{ClientPlain, ClientRetry, ClientImpatient, ClientConcurrent, ClientMismatch}

// HTTPSummary is what the HTTP phase counted.
type HTTPSummary struct {
	Keys        int            // distinct requests (keys) sent through the ingress
	Kinds       map[string]int // requests by client kind
	Posts       int            // POSTs sent, retries included
	Codes       map[int]int    // POST answers by status code
	Timeouts    int            // POSTs the client gave up on before the answer (then retried)
	Mismatches  int            // POSTs of an accepted key with another body: each must be 422
	Accepted    int            // distinct keys answered 202 or 200
	Completed   int            // accepted keys whose status (GET /requests/{key}) is completed at the end
	NotDone     []string       // accepted keys whose status is not completed at the end: key=status
	IngressSent int            // messages the ingress had SQS accept
	Errors      []string       // answers no request should get (400, 404, 5xx but 503), and transport errors
}

// OK reports whether every request was accepted once and completed, and every other
// body refused.
func (h *HTTPSummary) OK() bool {
	return h.Accepted == h.Keys && h.Completed == h.Accepted && len(h.NotDone) == 0 &&
		h.Codes[http.StatusUnprocessableEntity] == h.Mismatches && len(h.Errors) == 0
}

// httpPhase sends reqs through the ingress, each by a client of its kind; decoys are
// the other bodies of the ClientMismatch requests (valid messages that must never be
// applied).
type httpPhase struct {
	o      *HTTPOptions
	client *http.Client
	mu     sync.Mutex
	s      HTTPSummary
	done   map[string]bool // keys accepted
}

func newHTTPPhase(o *HTTPOptions) *httpPhase {
	if o.Clients <= 0 {
		o.Clients = 8
	}
	return &httpPhase{o: o, client: &http.Client{Timeout: 30 * time.Second}, done: map[string]bool{},
		s: HTTPSummary{Kinds: map[string]int{}, Codes: map[int]int{}}}
}

// run sends every request, o.Clients at a time.
func (p *httpPhase) run(ctx context.Context, rng *rand.Rand, reqs, decoys []example.Message) {
	p.s.Keys = len(reqs)
	sem := make(chan struct{}, p.o.Clients)
	var wg sync.WaitGroup
	for i, m := range reqs {
		kind := ClientKinds[i%len(ClientKinds)]
		if kind == ClientMismatch && len(decoys) == 0 {
			kind = ClientRetry
		}
		var decoy example.Message
		if kind == ClientMismatch {
			decoy = decoys[i%len(decoys)]
		}
		p.s.Kinds[kind]++
		jitter := time.Duration(rng.IntN(20)) * time.Millisecond
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			time.Sleep(jitter)
			p.request(ctx, kind, m, decoy)
		})
	}
	wg.Wait()
}

// request plays one client of kind for the message m.
func (p *httpPhase) request(ctx context.Context, kind string, m example.Message, decoy example.Message) {
	switch kind {
	case ClientPlain:
		p.untilAccepted(ctx, m)
	case ClientRetry:
		if p.untilAccepted(ctx, m) {
			p.untilAccepted(ctx, m) // the retry: the same answer, or the final status
		}
	case ClientImpatient:
		impatient := &http.Client{Timeout: impatience}
		if _, _, err := p.post(ctx, impatient, m.Key, m.Body); err != nil {
			p.count(func(s *HTTPSummary) { s.Timeouts++ })
		}
		p.untilAccepted(ctx, m)
	case ClientConcurrent:
		var wg sync.WaitGroup
		for range concurrentCopies {
			wg.Go(func() { p.untilAccepted(ctx, m) })
		}
		wg.Wait()
	case ClientMismatch:
		if p.untilAccepted(ctx, m) {
			p.count(func(s *HTTPSummary) { s.Mismatches++ })
			if code, _, err := p.post(ctx, p.client, m.Key, decoy.Body); err == nil && code != http.StatusUnprocessableEntity {
				p.count(func(s *HTTPSummary) {
					s.Errors = append(s.Errors, fmt.Sprintf("%s with another body: %d, want 422", m.Key, code))
				})
			}
		}
	}
}

// untilAccepted POSTs m until it is answered 202 or 200, waiting Retry-After after a
// 409 or a 503; false when it gave up (ctx ended, or an answer no retry changes).
func (p *httpPhase) untilAccepted(ctx context.Context, m example.Message) bool {
	for ctx.Err() == nil {
		code, retry, err := p.post(ctx, p.client, m.Key, m.Body)
		switch {
		case err != nil:
			p.count(func(s *HTTPSummary) { s.Errors = append(s.Errors, fmt.Sprintf("%s: %v", m.Key, err)) })
			return false
		case code == http.StatusAccepted || code == http.StatusOK:
			p.count(func(*HTTPSummary) {
				if !p.done[m.Key] {
					p.done[m.Key] = true
					p.s.Accepted++
				}
			})
			return true
		case code == http.StatusConflict || code == http.StatusServiceUnavailable:
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
		default:
			p.count(func(s *HTTPSummary) { s.Errors = append(s.Errors, fmt.Sprintf("%s: %d", m.Key, code)) })
			return false
		}
	}
	return false
}

// post sends one POST /requests and counts its answer; a client timeout is an error.
func (p *httpPhase) post(ctx context.Context, client *http.Client, key, body string) (code int, retry time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.o.URL+"/requests", strings.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	p.count(func(s *HTTPSummary) { s.Posts++ })
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	p.count(func(s *HTTPSummary) { s.Codes[resp.StatusCode]++ })
	retry = time.Second
	if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n > 0 {
		retry = time.Duration(n) * time.Second
	}
	return resp.StatusCode, retry, nil
}

func (p *httpPhase) count(f func(*HTTPSummary)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.s)
}

// statuses reads the status of every accepted key; it returns the keys not completed
// yet, each with its status.
func (p *httpPhase) statuses(ctx context.Context) (completed int, notDone []string) {
	p.mu.Lock()
	keys := slices.Sorted(maps.Keys(p.done))
	p.mu.Unlock()
	for _, key := range keys {
		st := "?"
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.o.URL+"/requests/"+key, nil)
		if err == nil {
			var resp *http.Response
			if resp, err = p.client.Do(req); err == nil {
				var b bytes.Buffer
				_, _ = io.Copy(&b, resp.Body)
				_ = resp.Body.Close()
				var doc struct{ Status string }
				if json.Unmarshal(b.Bytes(), &doc) == nil && resp.StatusCode == http.StatusOK {
					st = doc.Status
				} else {
					st = strconv.Itoa(resp.StatusCode)
				}
			}
		}
		if st == "completed" {
			completed++
		} else {
			notDone = append(notDone, key+"="+st)
		}
	}
	return completed, notDone
}

// print writes the HTTP phase's lines of the summary.
func (h *HTTPSummary) print(line func(string, any), w io.Writer) {
	line("HTTP requests through the ingress (distinct keys)", h.Keys)
	for _, k := range ClientKinds {
		if h.Kinds[k] > 0 {
			fmt.Fprintf(w, "      %d × %s\n", h.Kinds[k], k)
		}
	}
	codes := slices.Sorted(maps.Keys(h.Codes))
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%d × %d", h.Codes[c], c)
	}
	line("  POSTs sent (retries included): answers", fmt.Sprintf("%d: %s", h.Posts, strings.Join(parts, ", ")))
	line("  client gave up before the answer, then retried", h.Timeouts)
	line("  same key, another body: refused with 422", fmt.Sprintf("%d (%d sent)", h.Codes[http.StatusUnprocessableEntity], h.Mismatches))
	line("  accepted (202 or 200) / completed (GET)", fmt.Sprintf("%d / %d", h.Accepted, h.Completed))
	for _, k := range h.NotDone {
		fmt.Fprintf(w, "      not completed: %s\n", k)
	}
	for _, e := range h.Errors {
		fmt.Fprintf(w, "      unexpected: %s\n", e)
	}
}

// IngressMetrics reads the ingress's EMF lines (its stdout, or its Metrics writer) and
// counts the messages it had SQS accept (its Sent metric). It is safe for concurrent
// use; lines may come in pieces.
type IngressMetrics struct {
	mu      sync.Mutex
	partial []byte
	sent    int
}

func (m *IngressMetrics) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.partial = append(m.partial, p...)
	for {
		i := bytes.IndexByte(m.partial, '\n')
		if i < 0 {
			break
		}
		line := m.partial[:i]
		if bytes.Contains(line, []byte(`"CloudWatchMetrics"`)) {
			var doc struct{ Sent float64 }
			if json.Unmarshal(line, &doc) == nil {
				m.sent += int(doc.Sent)
			}
		}
		m.partial = m.partial[i+1:]
	}
	return len(p), nil
}

// Sent is how many messages the ingress reported sent.
func (m *IngressMetrics) Sent() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sent
}
