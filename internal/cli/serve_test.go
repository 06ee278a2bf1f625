package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/cli"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
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
	port, err := awstest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, []string{"serve", "--template", templatePath, "--addr", fmt.Sprintf("127.0.0.1:%d", port), "--instances", "2"},
			&stdout, &stderr, e.lookup)
	}()
	call := func(method, path, key, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
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
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _ := call(http.MethodGet, "/requests/probe", "", ""); code != 0 {
			break
		}
		select {
		case c := <-done:
			t.Fatalf("serve exited %d:\n%s", c, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("serve never listened")
		}
		time.Sleep(100 * time.Millisecond)
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
	cancel()
	if c := <-done; c != 0 || !strings.Contains(stderr.String(), "serve: stopped") {
		t.Errorf("serve: exit %d\n%s", c, stderr.String())
	}
	if !strings.Contains(stdout.String(), `"msg":"ingress request"`) {
		t.Errorf("serve's stdout lacks the function's log lines: %.300s", stdout.String())
	}
	if r := idemctl(t, e, "serve", "--addr", "0.0.0.0:0", "--in-process"); r.code != 1 || !strings.Contains(r.stderr, "not a loopback address") {
		t.Errorf("serve on every interface: exit %d\n%s", r.code, r.stderr)
	}
}
