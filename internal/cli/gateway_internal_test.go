package cli

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/gateway"
)

// TestGatewayStandsInForEachService (issue 39): `idemctl gateway` for an example that
// calls two services serves one stand-in per service, each at its own URL, exported in its
// own variable; each counts only its own calls, and the shared log names the service of
// each call.
func TestGatewayStandsInForEachService(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	var log, stderr exampletest.Buffer
	done := make(chan int, 1)
	go func() {
		defer stdoutW.Close() //nolint:errcheck // test
		done <- serveGateway(ctx, []string{"CARRIER_URL", "WAREHOUSE_URL"}, []string{"127.0.0.1:0", "127.0.0.1:0"}, &log, stdoutW, &stderr)
	}()
	urls := map[string]string{}
	lines := bufio.NewScanner(stdoutR)
	for len(urls) < 2 && lines.Scan() {
		name, url, ok := strings.Cut(strings.TrimPrefix(lines.Text(), "export "), "=")
		if !ok {
			t.Fatalf("stdout line %q is no export line", lines.Text())
		}
		urls[name] = strings.Trim(url, "'")
	}
	go func() { _, _ = io.Copy(io.Discard, stdoutR) }()
	if len(urls) != 2 || urls["CARRIER_URL"] == urls["WAREHOUSE_URL"] {
		t.Fatalf("exported %v, want two services at two URLs", urls)
	}
	calls := map[string][]string{"CARRIER_URL": {"k-1"}, "WAREHOUSE_URL": {"k-1", "k-2"}}
	for name, keys := range calls {
		for _, key := range keys {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, urls[name]+"/x", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(gateway.KeyHeader, key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("%s %s: %s", name, key, resp.Status)
			}
		}
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
	for _, want := range []string{
		"CARRIER_URL: 1 calls for 1 keys, 1 applied",
		"WAREHOUSE_URL: 2 calls for 2 keys, 2 applied",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr has no %q:\n%s", want, stderr.String())
		}
	}
	if got := strings.Count(log.String(), `"service":"WAREHOUSE_URL"`); got != 2 {
		t.Errorf("the log names WAREHOUSE_URL in %d calls, want 2:\n%s", got, log.String())
	}
}

// TestGatewayAddrs: the stand-ins listen at --addr and the ports after it, or each on a
// free port with port 0; a range past the last port is refused.
func TestGatewayAddrs(t *testing.T) {
	for _, c := range []struct {
		addr string
		n    int
		want string
	}{
		{"127.0.0.1:8090", 3, "127.0.0.1:8090 127.0.0.1:8091 127.0.0.1:8092"},
		{"127.0.0.1:0", 2, "127.0.0.1:0 127.0.0.1:0"},
		{"localhost:65535", 1, "localhost:65535"},
	} {
		got, err := gatewayAddrs(c.addr, c.n)
		if err != nil || strings.Join(got, " ") != c.want {
			t.Errorf("gatewayAddrs(%q, %d) = %v, %v; want %s", c.addr, c.n, got, err, c.want)
		}
	}
	for _, addr := range []string{"127.0.0.1:65535", "127.0.0.1", "127.0.0.1:x"} {
		if got, err := gatewayAddrs(addr, 2); err == nil {
			t.Errorf("gatewayAddrs(%q, 2) = %v, want an error", addr, got)
		}
	}
}

// TestGatewayLogIsPrivate (issue 38, argued point): `idemctl gateway --log FILE` writes
// every call's key and body; the file is its owner's alone (0600), a new one and one that
// was there, readable by all, before.
func TestGatewayLogIsPrivate(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "old.log")
	if err := os.WriteFile(existing, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "new.log"), existing} {
		f, err := createPrivate(path)
		if err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if mode := fi.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s: mode %v, want 0600", path, mode)
		}
	}
}
