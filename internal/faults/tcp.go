package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	zlog "github.com/rs/zerolog/log"
)

// Stream is the direction of the traffic a toxic applies to.
type Stream string

const (
	// Downstream is the traffic from the emulator to the client: responses.
	Downstream Stream = "downstream"
	// Upstream is the traffic from the client to the emulator: requests.
	Upstream Stream = "upstream"
)

// ErrClosed is returned by the methods of a TCP that was closed.
var ErrClosed = errors.New("faults: proxy is closed")

var proxySeq atomic.Int64

var silenceGlobalLog sync.Once

// TCP is an in-process toxiproxy listening on a free loopback port in front of an
// upstream host:port. Toxics are named; each applies to one Stream, to a share of the
// TCP connections given by its toxicity (0 to 1, drawn once per connection, also for
// the connections already open when the toxic is added). moto closes the connection
// after every answer, so in front of moto a connection is one request. Its methods are
// safe for concurrent use.
type TCP struct {
	mu     sync.Mutex
	proxy  *toxiproxy.Proxy
	addr   string
	closed bool
}

// NewTCP starts a proxy in front of upstream, a host:port or a URL such as
// "http://127.0.0.1:5000" (only its host:port is used). Close it when done.
func NewTCP(upstream string) (*TCP, error) {
	hostport, err := hostPort(upstream)
	if err != nil {
		return nil, err
	}
	// The toxics log through zerolog's global logger (a trace line per interrupted
	// bandwidth stall, on stdout): silence it, as the server's own logger is.
	silenceGlobalLog.Do(func() { zlog.Logger = zerolog.Nop() })
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	name := fmt.Sprintf("faults-%d", proxySeq.Add(1))
	proxy := toxiproxy.NewProxy(server, name, "127.0.0.1:0", hostport)
	if err := proxy.Start(); err != nil {
		return nil, fmt.Errorf("faults: start proxy to %s: %w", hostport, err)
	}
	proxy.Lock()
	addr := proxy.Listen // the address it listens on, port included, once started
	proxy.Unlock()
	return &TCP{proxy: proxy, addr: addr}, nil
}

// hostPort returns the host:port of a host:port or of a URL.
func hostPort(upstream string) (string, error) {
	hp := upstream
	if strings.Contains(upstream, "://") {
		u, err := url.Parse(upstream)
		if err != nil {
			return "", fmt.Errorf("faults: upstream %q: %w", upstream, err)
		}
		if u.Hostname() == "" {
			return "", fmt.Errorf("faults: upstream %q has no host", upstream)
		}
		hp = u.Host
		if u.Port() == "" {
			switch u.Scheme {
			case "http":
				hp = net.JoinHostPort(u.Hostname(), "80")
			case "https":
				hp = net.JoinHostPort(u.Hostname(), "443")
			}
		}
	}
	if _, _, err := net.SplitHostPort(hp); err != nil {
		return "", fmt.Errorf("faults: upstream %q is not a host:port or a URL with a host: %w", upstream, err)
	}
	return hp, nil
}

// Addr returns the host:port the proxy listens on.
func (p *TCP) Addr() string { return p.addr }

// URL returns the proxy's address as an http URL: the endpoint to give SDK clients.
func (p *TCP) URL() string { return "http://" + p.addr }

// Latency delays every chunk of data on stream s by latency ± jitter (toxiproxy's
// resolution is a millisecond). Downstream latency adds about latency to every
// request/response exchange; latency on both streams adds about twice as much.
func (p *TCP) Latency(name string, s Stream, latency, jitter time.Duration, toxicity float64) error {
	if latency < 0 || jitter < 0 {
		return fmt.Errorf("faults: latency toxic %q: negative latency %s or jitter %s", name, latency, jitter)
	}
	return p.Add(name, "latency", s, toxicity, map[string]int64{"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds()})
}

// ResetPeer resets the connection (TCP RST on the connections opened after the toxic
// was added, a plain close on those already open) timeout after the first data on
// stream s arrives; 0 resets at once. On Upstream the request is never forwarded.
func (p *TCP) ResetPeer(name string, s Stream, timeout time.Duration, toxicity float64) error {
	if timeout < 0 {
		return fmt.Errorf("faults: reset_peer toxic %q: negative timeout %s", name, timeout)
	}
	return p.Add(name, "reset_peer", s, toxicity, map[string]int64{"timeout": timeout.Milliseconds()})
}

// Timeout drops all data on stream s and closes the connection after timeout; with
// timeout 0 the connection stays open and silent until the toxic is removed (the client
// waits for its own timeout or context). On Upstream the request never reaches the
// emulator. On Downstream the emulator applies the request and the answer is dropped,
// but moto closes its connection after every answer (Connection: close), which reaches
// the client as an EOF at once: a black hole needs Upstream.
func (p *TCP) Timeout(name string, s Stream, timeout time.Duration, toxicity float64) error {
	if timeout < 0 {
		return fmt.Errorf("faults: timeout toxic %q: negative timeout %s", name, timeout)
	}
	return p.Add(name, "timeout", s, toxicity, map[string]int64{"timeout": timeout.Milliseconds()})
}

// Bandwidth limits stream s to kbps kilobytes per second.
func (p *TCP) Bandwidth(name string, s Stream, kbps int64, toxicity float64) error {
	if kbps < 0 {
		return fmt.Errorf("faults: bandwidth toxic %q: negative rate %d", name, kbps)
	}
	return p.Add(name, "bandwidth", s, toxicity, map[string]int64{"rate": kbps})
}

// Slicer cuts the data on stream s into pieces of about averageSize ± sizeVariation
// bytes, delay apart (microsecond resolution): partial reads and writes.
func (p *TCP) Slicer(name string, s Stream, averageSize, sizeVariation int, delay time.Duration, toxicity float64) error {
	if averageSize <= 0 || sizeVariation < 0 || sizeVariation >= averageSize || delay < 0 {
		return fmt.Errorf("faults: slicer toxic %q: need 0 <= size variation (%d) < average size (%d) and delay >= 0 (%s)", name, sizeVariation, averageSize, delay)
	}
	return p.Add(name, "slicer", s, toxicity, map[string]int64{
		"average_size": int64(averageSize), "size_variation": int64(sizeVariation), "delay": delay.Microseconds(),
	})
}

// Add adds a toxic of any toxiproxy type (typ: "latency", "bandwidth", "slow_close",
// ...) with its attributes as toxiproxy's JSON API takes them.
func (p *TCP) Add(name, typ string, s Stream, toxicity float64, attributes any) error {
	if name == "" {
		return fmt.Errorf("faults: %s toxic: empty name", typ)
	}
	if s != Upstream && s != Downstream {
		return fmt.Errorf("faults: toxic %q: stream %q is neither %q nor %q", name, s, Upstream, Downstream)
	}
	if toxicity < 0 || toxicity > 1 {
		return fmt.Errorf("faults: toxic %q: toxicity %v is not between 0 and 1", name, toxicity)
	}
	body, err := json.Marshal(map[string]any{
		"name": name, "type": typ, "stream": string(s), "toxicity": toxicity, "attributes": attributes,
	})
	if err != nil {
		return fmt.Errorf("faults: toxic %q: encode: %w", name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if _, err := p.proxy.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		return fmt.Errorf("faults: add %s toxic %q on %s: %w", typ, name, s, err)
	}
	return nil
}

// Remove removes the toxic called name.
func (p *TCP) Remove(name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if err := p.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
		return fmt.Errorf("faults: remove toxic %q: %w", name, err)
	}
	return nil
}

// Toxics returns the names of the toxics in place.
func (p *TCP) Toxics() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	if p.closed {
		return names
	}
	for _, t := range p.proxy.Toxics.GetToxicArray() {
		if w, ok := t.(*toxics.ToxicWrapper); ok {
			names = append(names, w.Name)
		}
	}
	return names
}

// Clear removes every toxic.
func (p *TCP) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.proxy.Toxics.ResetToxics(context.Background())
	}
}

// Disable stops the proxy: it closes its listener and every open connection, so
// clients get "connection refused" until Enable.
func (p *TCP) Disable() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.proxy.Stop()
	}
}

// Enable starts a disabled proxy again on the same address.
func (p *TCP) Enable() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.proxy.Lock()
	enabled := p.proxy.Enabled
	p.proxy.Unlock()
	if enabled {
		return nil
	}
	if err := p.proxy.Start(); err != nil {
		return fmt.Errorf("faults: restart proxy on %s: %w", p.addr, err)
	}
	return nil
}

// Close removes the toxics, stops the proxy and closes its connections. It is safe to
// call more than once.
func (p *TCP) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.proxy.Toxics.ResetToxics(context.Background())
	p.proxy.Stop()
	return nil
}
