package funcurl_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemgo/sqs-lambda-consumer/internal/funcurl"
)

// echo is a function that answers with what its event held, for the test to read.
func echo(ctx context.Context, payload []byte) ([]byte, error) {
	var ev events.LambdaFunctionURLRequest
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, err
	}
	switch ev.RawPath {
	case "/fail":
		return nil, errors.New("function error")
	case "/plain":
		return []byte(`{"just":"json"}`), nil
	}
	body, _ := json.Marshal(ev)
	return json.Marshal(events.LambdaFunctionURLResponse{StatusCode: 201, Headers: map[string]string{"X-Echo": "1"},
		Body: base64.StdEncoding.EncodeToString(body), IsBase64Encoded: true})
}

func serve(t *testing.T, s *funcurl.Server) string {
	t.Helper()
	url, stop, err := funcurl.Listen("127.0.0.1:0", s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}

// answer is an HTTP response, read.
type answer struct {
	StatusCode int
	Header     http.Header
}

func call(t *testing.T, req *http.Request) (answer, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header}, b
}

// TestEvent: the function gets the event a function URL builds (lower-case header names,
// repeated headers joined with commas, the path as received, a text body as text and a
// binary one in base64, the IAM caller), and its answer becomes the HTTP response.
func TestEvent(t *testing.T) {
	url := serve(t, &funcurl.Server{Invoke: funcurl.Pool(echo, echo), Caller: funcurl.LocalCaller("AKIDLOCAL")})
	for _, c := range []struct {
		name, contentType, body string
		base64                  bool
	}{
		{"json", "application/json", `{"a":1}`, false},
		{"binary", "application/octet-stream", "\xff\x00", true},
		{"invalid UTF-8 said to be JSON", "application/json", "{\"a\":\"\xff\"}", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, url+"/requests/a%3Ab?x=1", strings.NewReader(c.body))
			req.Header.Set("Content-Type", c.contentType)
			req.Header.Add("Idempotency-Key", "k1")
			req.Header.Add("Idempotency-Key", "k2")
			resp, b := call(t, req)
			if resp.StatusCode != 201 || resp.Header.Get("X-Echo") != "1" {
				t.Fatalf("%d %v", resp.StatusCode, resp.Header)
			}
			var ev events.LambdaFunctionURLRequest
			if err := json.Unmarshal(b, &ev); err != nil {
				t.Fatal(err)
			}
			body := ev.Body
			if ev.IsBase64Encoded {
				d, _ := base64.StdEncoding.DecodeString(ev.Body)
				body = string(d)
			}
			if ev.Version != "2.0" || ev.RawPath != "/requests/a%3Ab" || ev.RawQueryString != "x=1" || ev.RequestContext.HTTP.Method != "POST" ||
				ev.Headers["idempotency-key"] != "k1,k2" || ev.IsBase64Encoded != c.base64 || body != c.body ||
				ev.RequestContext.Authorizer == nil || ev.RequestContext.Authorizer.IAM.AccessKey != "AKIDLOCAL" {
				t.Errorf("event %+v", ev)
			}
		})
	}
}

// TestAnswers: a function error is a 502, an answer without statusCode a 200 with the
// answer as body, a request over Lambda's payload limit a 413; a server is refused on
// anything but loopback.
func TestAnswers(t *testing.T) {
	url := serve(t, &funcurl.Server{Invoke: echo})
	for path, code := range map[string]int{"/fail": 502, "/plain": 200} {
		req, _ := http.NewRequest(http.MethodGet, url+path, nil)
		if resp, b := call(t, req); resp.StatusCode != code || (code == 200 && string(b) != `{"just":"json"}`) {
			t.Errorf("%s: %d %s, want %d", path, resp.StatusCode, b, code)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/big", strings.NewReader(strings.Repeat("x", funcurl.MaxPayloadBytes)))
	if resp, _ := call(t, req); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a request over 6 MB: %d", resp.StatusCode)
	}
	if _, _, err := funcurl.Listen("0.0.0.0:0", &funcurl.Server{Invoke: echo}); err == nil {
		t.Error("served on every interface")
	}
}

// TestOnlyItsOwnHost (issue 28, finding 4): the local URL answers requests whose Host is
// the address and port it listens on, and 421 to any other: a web page whose name
// re-resolves to 127.0.0.1 (DNS rebinding) sends its own name, and the function is never
// invoked for it.
func TestOnlyItsOwnHost(t *testing.T) {
	invoked := 0
	base := serve(t, &funcurl.Server{Invoke: func(ctx context.Context, p []byte) ([]byte, error) { invoked++; return echo(ctx, p) }})
	own := strings.TrimPrefix(base, "http://")
	_, port, _ := strings.Cut(own, ":")
	for host, want := range map[string]int{own: 201, "attacker.example:" + port: http.StatusMisdirectedRequest,
		"127.0.0.1": http.StatusMisdirectedRequest, "localhost:" + port: 201, "localhost.attacker.example:" + port: http.StatusMisdirectedRequest,
		"localhost:1" + port: http.StatusMisdirectedRequest, "": http.StatusMisdirectedRequest} {
		before := invoked
		req, _ := http.NewRequest(http.MethodGet, base+"/x", nil)
		req.Host = host
		if host == "" {
			req.Host = " " // no usable Host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("Host %q: %v", host, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want || (want != 201) != (invoked == before) {
			t.Errorf("Host %q: %d (invoked %v), want %d", host, resp.StatusCode, invoked != before, want)
		}
	}
	// Listening as localhost, that name is its own too.
	url, stop, err := funcurl.Listen("localhost:0", &funcurl.Server{Invoke: echo})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	_, port, _ = strings.Cut(strings.TrimPrefix(url, "http://"), ":")
	req, _ := http.NewRequest(http.MethodGet, url+"/x", nil)
	req.Host = "localhost:" + port
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Errorf("Host localhost:%s on a server listening as localhost: %d", port, resp.StatusCode)
	}
}

// TestSigV4Caller: a request signed with SigV4 comes from the IAM identity of its access
// key (as a function URL reports the signer, unverified here); an unsigned one from the
// default caller.
func TestSigV4Caller(t *testing.T) {
	def := funcurl.LocalCaller("test")
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/x", nil)
	if got := funcurl.SigV4Caller(req, def); got != def {
		t.Errorf("unsigned: %+v, want the default caller", got)
	}
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIAEXAMPLE/20260101/us-east-1/lambda/aws4_request, SignedHeaders=host, Signature=abc")
	got := funcurl.SigV4Caller(req, def)
	if got == def || got.AccessKey != "AKIAEXAMPLE" || got.UserARN != "arn:aws:iam::"+funcurl.LocalAccount+":user/AKIAEXAMPLE" || got.AccountID != funcurl.LocalAccount {
		t.Errorf("signed: %+v", got)
	}
	req.Header.Set("Authorization", "Bearer x")
	if got := funcurl.SigV4Caller(req, def); got != def {
		t.Errorf("not SigV4: %+v, want the default caller", got)
	}
}
