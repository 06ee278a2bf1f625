package localfn_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/internal/faults"
	"github.com/idemgo/sqs-lambda-consumer/internal/funcurl"
	"github.com/idemgo/sqs-lambda-consumer/internal/gateway"
	"github.com/idemgo/sqs-lambda-consumer/internal/localfn"
)

// TestEveryLoopbackServerRefusesForeignHostsAndCrossSiteWrites (issue 38, finding 8 and
// the argued point on the fault proxy and ServeLoopback): idemctl serve's function URL,
// idemctl gateway, the fault proxy and localfn.ServeLoopback answer 421 to a Host that is
// not their own (a DNS-rebinding page reading every call's key and body), and 403 to a
// browser's cross-site POST (a page injecting faults with text/plain, which needs no
// preflight). Their own clients (an SDK, the functions: no Origin, no Sec-Fetch-Site)
// and a same-origin page are served.
func TestEveryLoopbackServerRefusesForeignHostsAndCrossSiteWrites(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	upstream := httptest.NewServer(ok)
	t.Cleanup(upstream.Close)

	g, err := gateway.Start("", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	proxy, err := faults.NewHTTPErrors(upstream.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	fn, stopFn, err := localfn.ServeLoopback(ok)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopFn)
	serve, stopServe, err := funcurl.Listen("127.0.0.1:0", ok)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopServe)

	for name, base := range map[string]string{"gateway": g.URL(), "fault proxy": proxy.URL(), "localfn.ServeLoopback": fn, "idemctl serve": serve} {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		port := u.Port()
		for _, c := range []struct {
			what, method, host, path string
			header                   map[string]string
			want                     int
		}{
			{"a call of its own client", http.MethodPost, u.Host, gateway.FaultsPath, map[string]string{"Content-Type": "application/json"}, 0},
			{"a call to localhost", http.MethodGet, "localhost:" + port, gateway.CallsPath, nil, 0},
			{"a same-origin page's POST", http.MethodPost, u.Host, gateway.FaultsPath, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": base}, 0},
			{"a rebound page's read", http.MethodGet, "attacker.example:" + port, gateway.CallsPath, nil, http.StatusMisdirectedRequest},
			{"another port", http.MethodGet, "127.0.0.1:1" + port, gateway.CallsPath, nil, http.StatusMisdirectedRequest},
			{"a cross-site text/plain POST", http.MethodPost, u.Host, gateway.FaultsPath,
				map[string]string{"Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site", "Origin": "https://attacker.example"}, http.StatusForbidden},
			{"a cross-site POST from an older browser (Origin only)", http.MethodPost, u.Host, gateway.FaultsPath,
				map[string]string{"Content-Type": "text/plain", "Origin": "https://attacker.example"}, http.StatusForbidden},
		} {
			req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(`{"fail":1}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Host = c.host
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			refused := resp.StatusCode == http.StatusMisdirectedRequest || resp.StatusCode == http.StatusForbidden
			if c.want == 0 && refused || c.want != 0 && resp.StatusCode != c.want {
				t.Errorf("%s, %s: %d, want %s", name, c.what, resp.StatusCode, map[bool]string{true: "it served", false: http.StatusText(c.want)}[c.want == 0])
			}
		}
	}
}
