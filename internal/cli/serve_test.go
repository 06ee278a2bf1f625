package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/cli"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/funcurl"
)

// TestServe plays the README's flow: `idemctl serve` runs the ingress's bootstrap as
// Lambda execution environments behind a loopback port, a client POSTs a message with
// an Idempotency-Key (202, the status accepted), `idemctl run` beside it consumes the
// queue, and the status is then completed, with the consumer's response. Ctrl-C stops
// serve cleanly.
func TestServe(t *testing.T) {
	ex := exampletest.Example(t)
	m := exampletest.Traffic(t, ex).Traffic(rand.New(rand.NewPCG(21, 21)), "serve"+awstest.RunID(), 1, 1)[0]
	e := upStack(t)
	if err := example.Prepare(context.Background(), ex, awstest.DynamoDB(t), e.lookup, []example.Message{m}); err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, e, "--template", templatePath, "--instances", "2")
	call := func(method, path, key, body string) (int, string) {
		t.Helper()
		return srv.call("", "", method, path, key, body)
	}
	key := "serve-" + awstest.RunID()
	if code, body := call(http.MethodPost, "/requests", key, m.Body); code != http.StatusAccepted {
		t.Fatalf("POST: %d %s", code, body)
	}
	status := func() ingressapp.Status {
		t.Helper()
		code, body := call(http.MethodGet, "/requests/"+key, "", "")
		var st ingressapp.Status
		if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
			t.Fatalf("GET: %d %s", code, body)
		}
		return st
	}
	if st := status(); st.Status != ingressapp.StatusAccepted {
		t.Errorf("before the consumer: %+v", st)
	}
	if r := idemctl(t, e, "run", "--template", templatePath, "--until-idle", "2s", "--wait", "1s", "--no-reaper"); r.code != 0 ||
		!strings.Contains(r.stderr, "1 deleted") {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	if st := status(); st.Status != ingressapp.StatusCompleted || len(st.Response) == 0 {
		t.Errorf("after the consumer: %+v, want completed with the response", st)
	}
	// The operator finds the request's record, and its log lines, from the client's key
	// and the caller the ingress logged.
	caller := funcurl.LocalCaller("").UserARN
	if r := idemctl(t, e, "inspect", "--http-caller", caller, key); r.code != 0 || !strings.Contains(r.stdout, "COMPLETED") ||
		!strings.Contains(r.stdout, stackKeys(t, e).LogHash(idem.CallerKey("caller:"+caller, key))) {
		t.Errorf("inspect --http-caller: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if c := srv.stop(); c != 0 || !strings.Contains(srv.stderr.String(), "serve: stopped") {
		t.Errorf("serve: exit %d\n%s", c, srv.stderr.String())
	}
	if !strings.Contains(srv.stdout.String(), `"msg":"ingress request"`) {
		t.Errorf("serve's stdout lacks the function's log lines: %.300s", srv.stdout.String())
	}
	if r := idemctl(t, e, "serve", "--addr", "0.0.0.0:0", "--in-process"); r.code != 1 || !strings.Contains(r.stderr, "not a loopback address") {
		t.Errorf("serve on every interface: exit %d\n%s", r.code, r.stderr)
	}
}

// TestServeKeepsCallersApart (issue 28, findings 1 and 4), as an attacker with a second
// IAM identity against `idemctl serve`: each request's caller is the access key that
// signed it (SigV4 Authorization, as a function URL reports the signer in
// requestContext.authorizer.iam; unverified locally), and the ingress keeps each
// caller's keys apart. Mallory cannot read Alice's request (404), learn that her key is
// in use (her own body is accepted, not 422) or take a key before her (Alice's request
// under it is accepted). And serve answers no request whose Host is not the address it
// listens on: a page whose name re-resolves to 127.0.0.1 (DNS rebinding) gets 421.
func TestServeKeepsCallersApart(t *testing.T) {
	ex := exampletest.Example(t)
	ms := exampletest.Traffic(t, ex).Traffic(rand.New(rand.NewPCG(28, 28)), "apart"+awstest.RunID(), 3, 3)
	e := upStack(t)
	if err := example.Prepare(context.Background(), ex, awstest.DynamoDB(t), e.lookup, ms); err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, e, "--in-process")
	call := srv.call
	port := srv.port
	const alice, mallory = "AKIAALICE0000000", "AKIAMALLORY00000"
	read, block := "apart-read-"+awstest.RunID(), "apart-block-"+awstest.RunID()
	for _, c := range []struct {
		what, who, method, key, body string
		want                         int
	}{
		{"alice's request", alice, http.MethodPost, read, ms[0].Body, http.StatusAccepted},
		{"mallory reads alice's key", mallory, http.MethodGet, read, "", http.StatusNotFound},
		{"mallory probes alice's key with another body", mallory, http.MethodPost, read, ms[1].Body, http.StatusAccepted},
		{"mallory takes a key first", mallory, http.MethodPost, block, ms[1].Body, http.StatusAccepted},
		{"alice's request under the key mallory took", alice, http.MethodPost, block, ms[2].Body, http.StatusAccepted},
		{"alice reads her request", alice, http.MethodGet, read, "", http.StatusOK},
	} {
		path := ingressapp.RequestsPath
		key := c.key
		if c.method == http.MethodGet {
			path, key = path+"/"+c.key, ""
		}
		if code, body := call(c.who, "", c.method, path, key, c.body); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.what, code, body, c.want)
		}
	}
	for _, host := range []string{"rebound.example.com:" + strconv.Itoa(port), "localhost.example:" + strconv.Itoa(port), "127.0.0.1"} {
		if code, body := call(alice, host, http.MethodGet, ingressapp.RequestsPath+"/"+read, "", ""); code != http.StatusMisdirectedRequest {
			t.Errorf("Host %s: %d %s, want 421", host, code, body)
		}
	}
	if c := srv.stop(); c != 0 {
		t.Errorf("serve: exit %d\n%s", c, srv.stderr.String())
	}
}

// served is `idemctl serve` running in the test, on a loopback port of its own.
type served struct {
	t              *testing.T
	port           int
	stdout, stderr *bytes.Buffer
	stop           func() int // Ctrl-C, then serve's exit status
}

// startServe runs `idemctl serve --addr 127.0.0.1:PORT args...` with e's environment and
// waits until it answers.
func startServe(t *testing.T, e env, args ...string) *served {
	t.Helper()
	port, err := awstest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := &served{t: t, port: port, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, append([]string{"serve", "--addr", fmt.Sprintf("127.0.0.1:%d", port)}, args...), s.stdout, s.stderr, e.lookup)
	}()
	s.stop = func() int { cancel(); return <-done }
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if code, _ := s.call("", "", http.MethodGet, "/requests/probe", "", ""); code != 0 {
			return s
		}
		select {
		case c := <-done:
			t.Fatalf("serve exited %d:\n%s", c, s.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("serve never listened")
		}
	}
}

// call sends one request to serve and returns its status code and body (0 and the error
// when it got no answer): signed by accessKey as SigV4 names a signer ("" unsigned), with
// host as its Host ("" the address), with key as its Idempotency-Key ("" none).
func (s *served) call(accessKey, host, method, path, key, body string) (int, string) {
	s.t.Helper()
	req, err := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", s.port, path), strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if host != "" {
		req.Host = host
	}
	if accessKey != "" {
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+accessKey+"/20260101/us-east-1/lambda/aws4_request, SignedHeaders=host, Signature=0")
	}
	if key != "" {
		req.Header.Set(ingressapp.KeyHeader, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
