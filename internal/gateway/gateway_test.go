package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/internal/gateway"
)

// post sends body to the stand-in with key (none when empty) and returns the status, the
// answer and the error of the call.
func post(t *testing.T, ctx context.Context, url, key, body string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/transfers", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(gateway.KeyHeader, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close() //nolint:errcheck // test
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func start(t *testing.T, log io.Writer) *gateway.Server {
	t.Helper()
	s, err := gateway.Start("", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestAppliesEachKeyOnce: a key is applied once, and answered the same way when called
// again with the same body; another body under it is refused; a call without a key is
// refused. Every call is in the log, in the order it came, and in the JSON lines.
func TestAppliesEachKeyOnce(t *testing.T) {
	var lines bytes.Buffer
	s := start(t, &lines)
	ctx := context.Background()
	code, first, err := post(t, ctx, s.URL(), "k-1", `{"amount":1}`)
	if err != nil || code != http.StatusCreated || !strings.Contains(first, `"id":"tr_000001"`) {
		t.Fatalf("first call: %d %s %v", code, first, err)
	}
	code, again, err := post(t, ctx, s.URL(), "k-1", `{"amount":1}`)
	if err != nil || code != http.StatusOK || again != first {
		t.Fatalf("the same key again: %d %q %v, want 200 and the first answer %q", code, again, err, first)
	}
	if code, _, err := post(t, ctx, s.URL(), "k-1", `{"amount":2}`); err != nil || code != http.StatusUnprocessableEntity {
		t.Fatalf("the key with another body: %d %v, want 422", code, err)
	}
	if code, _, err := post(t, ctx, s.URL(), "", `{"amount":1}`); err != nil || code != http.StatusBadRequest {
		t.Fatalf("no key: %d %v, want 400", code, err)
	}
	if code, body, err := post(t, ctx, s.URL(), "k-2", `{"amount":1}`); err != nil || code != http.StatusCreated || !strings.Contains(body, "tr_000002") {
		t.Fatalf("another key: %d %s %v", code, body, err)
	}
	var outcomes []string
	for _, c := range s.Calls() {
		outcomes = append(outcomes, c.Outcome)
	}
	want := []string{gateway.Applied, gateway.Replayed, gateway.Conflict, gateway.NoKey, gateway.Applied}
	if strings.Join(outcomes, ",") != strings.Join(want, ",") {
		t.Errorf("outcomes %v, want %v", outcomes, want)
	}
	tally := gateway.Count(s.Calls())
	if tally.Calls != 4 || tally.Keys != 2 || tally.Applied != 2 || tally.Conflicts != 1 || tally.Repeated["k-1"] != 3 || len(tally.Repeated) != 1 {
		t.Errorf("tally %+v", tally)
	}
	if n := strings.Count(lines.String(), "\n"); n != 5 {
		t.Errorf("%d log lines, want 5:\n%s", n, lines.String())
	}
}

// TestFaults: a failure is answered 503 and applies nothing; a hang answers nothing
// until the caller gives up, and applies nothing; a lost answer applies the key and
// closes the connection, so the caller's retry with the key gets the first answer.
// Faults come from Inject and from a POST to FaultsPath; the log is read over HTTP.
func TestFaults(t *testing.T) {
	s := start(t, nil)
	ctx := context.Background()
	s.Inject(gateway.Faults{Fail: 1})
	if code, _, err := post(t, ctx, s.URL(), "k-1", `{}`); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("injected failure: %d %v, want 503", code, err)
	}
	b, _ := json.Marshal(gateway.Faults{Hang: 1, Lose: 1})
	resp, err := http.Post(s.URL()+gateway.FaultsPath, "application/json", bytes.NewReader(b))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST %s: %v %v", gateway.FaultsPath, resp, err)
	}
	_ = resp.Body.Close()
	hctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	_, _, err = post(t, hctx, s.URL(), "k-1", `{}`)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("hung call: %v after %s, want the caller's deadline", err, time.Since(start))
	}
	if _, _, err := post(t, ctx, s.URL(), "k-1", `{}`); err == nil {
		t.Fatal("lost answer: the call got an answer")
	}
	code, body, err := post(t, ctx, s.URL(), "k-1", `{}`)
	if err != nil || code != http.StatusOK || !strings.Contains(body, "tr_000001") {
		t.Fatalf("retry after the lost answer: %d %s %v, want the first answer", code, body, err)
	}
	calls, err := gateway.ReadCalls(ctx, http.DefaultClient, s.URL())
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, c := range calls {
		outcomes = append(outcomes, c.Outcome)
	}
	want := []string{gateway.Failed, gateway.Hung, gateway.Lost, gateway.Replayed}
	if strings.Join(outcomes, ",") != strings.Join(want, ",") {
		t.Errorf("outcomes %v, want %v", outcomes, want)
	}
	if tally := gateway.Count(calls); tally.Applied != 1 || tally.Faults != 3 || tally.Repeated["k-1"] != 4 {
		t.Errorf("tally %+v", tally)
	}
}

// TestLoopbackOnly: the stand-in refuses an address off the loopback interface.
func TestLoopbackOnly(t *testing.T) {
	if s, err := gateway.Start("0.0.0.0:0", nil); err == nil {
		_ = s.Close()
		t.Fatal("started on 0.0.0.0")
	}
}

// TestCloseEndsHungCalls: Close returns while a call hangs.
func TestCloseEndsHungCalls(t *testing.T) {
	s, err := gateway.Start("", nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Inject(gateway.Faults{Hang: 1})
	done := make(chan error, 1)
	go func() { _, _, err := post(t, context.Background(), s.URL(), "k", `{}`); done <- err }()
	for len(s.Calls()) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { _ = s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return while a call hung")
	}
	if err := <-done; err == nil {
		t.Error("the hung call got an answer")
	}
}

// get looks key up on the stand-in and returns the status and the answer.
func get(t *testing.T, url, key string) (int, string) {
	t.Helper()
	resp, err := http.Get(url + "/transfers?" + gateway.LookupParam + "=" + key)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() //nolint:errcheck // test
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestKeyWindowAndLookup: with a key window, a key is answered again within it and
// applied again, under a new id, once it is past, as a real service that forgot the key
// does. The lookup answers a key's last application, past the window too, and 404 for a
// key never applied; lookups are not calls.
func TestKeyWindowAndLookup(t *testing.T) {
	s := start(t, nil)
	var now atomic.Int64 // the clock, read by the server's goroutines
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s.SetKeyWindow(24*time.Hour, func() time.Time { return time.Unix(0, now.Load()) })
	ctx := context.Background()
	if code, _ := get(t, s.URL(), "k-1"); code != http.StatusNotFound {
		t.Fatalf("lookup of a key never called: %d, want 404", code)
	}
	_, first, _ := post(t, ctx, s.URL(), "k-1", `{}`)
	now.Add(int64(23 * time.Hour))
	if code, again, _ := post(t, ctx, s.URL(), "k-1", `{}`); code != http.StatusOK || again != first {
		t.Fatalf("within the window: %d %q, want 200 %q", code, again, first)
	}
	now.Add(int64(2 * time.Hour))
	code, late, _ := post(t, ctx, s.URL(), "k-1", `{}`)
	if code != http.StatusCreated || late == first || !strings.Contains(late, `"id":"tr_000002"`) {
		t.Fatalf("past the window: %d %q, want it applied again as tr_000002", code, late)
	}
	if code, found := get(t, s.URL(), "k-1"); code != http.StatusOK || found != late {
		t.Fatalf("lookup: %d %q, want 200 %q", code, found, late)
	}
	if n := len(s.Calls()); n != 3 {
		t.Errorf("%d calls logged, want the 3 POSTs", n)
	}
}
