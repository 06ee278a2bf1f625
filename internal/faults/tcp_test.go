package faults_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/faults"
)

func newTCP(t *testing.T) *faults.TCP {
	t.Helper()
	p, err := faults.NewTCP(awstest.Endpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// getItemTimes times n GetItem calls, one after another.
func getItemTimes(t *testing.T, c *dynamodb.Client, tbl string, n int) []time.Duration {
	t.Helper()
	var d []time.Duration
	for range n {
		start := time.Now()
		if _, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(tbl), Key: key("x")}); err != nil {
			t.Fatal(err)
		}
		d = append(d, time.Since(start))
	}
	return d
}

// TestLatency: a latency toxic adds at least its delay to every call, once per stream it
// is on; removing it restores the plain round trip.
func TestLatency(t *testing.T) {
	tbl := table(t)
	p := newTCP(t)
	if !strings.HasPrefix(p.URL(), "http://127.0.0.1:") || p.Addr() == "" {
		t.Fatalf("URL %q, Addr %q", p.URL(), p.Addr())
	}
	c, _ := ddbVia(t, p.URL(), 3)
	base := slices.Min(getItemTimes(t, c, tbl, 3))

	const lat = 40 * time.Millisecond
	if err := p.Latency("down", faults.Downstream, lat, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := p.Latency("down", faults.Downstream, lat, 0, 1); err == nil {
		t.Fatal("a second toxic with the same name was accepted")
	}
	down := getItemTimes(t, c, tbl, 4)
	if m := slices.Min(down); m < lat {
		t.Fatalf("downstream latency %s: fastest call took %s (base %s)", lat, m, base)
	}
	if err := p.Latency("up", faults.Upstream, lat, 0, 1); err != nil {
		t.Fatal(err)
	}
	if got := p.Toxics(); len(got) != 2 {
		t.Fatalf("toxics %v, want down and up", got)
	}
	both := getItemTimes(t, c, tbl, 3)
	if m := slices.Min(both); m < 2*lat {
		t.Fatalf("latency on both streams: fastest call took %s, want >= %s", m, 2*lat)
	}
	p.Clear()
	if err := p.Remove("up"); err == nil {
		t.Fatal("Remove of a cleared toxic succeeded")
	}
	// With a toxic left, no call can take less than lat; on a loaded machine a call
	// without one can take more, so a few more calls get their chance.
	after := slices.Min(getItemTimes(t, c, tbl, 3))
	for i := 0; i < 6 && after >= lat; i++ {
		after = min(after, slices.Min(getItemTimes(t, c, tbl, 3)))
	}
	if after >= lat {
		t.Fatalf("after Clear the fastest of up to 21 calls took %s", after)
	}
	t.Logf("GetItem: base %s, +%s downstream %s, both streams %s, cleared %s", base, lat, slices.Min(down), slices.Min(both), after)
}

// TestResetPeer: with every connection reset, each SDK attempt fails with a connection
// error, the SDK retries it (3 attempts) and gives up; removing the toxic heals.
func TestResetPeer(t *testing.T) {
	tbl := table(t)
	p := newTCP(t)
	c, calls := ddbVia(t, p.URL(), 3)
	for _, s := range []faults.Stream{faults.Upstream, faults.Downstream} {
		if err := p.ResetPeer("reset", s, 0, 1); err != nil {
			t.Fatal(err)
		}
		_, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(tbl), Key: key("x")})
		var send *smithyhttp.RequestSendError
		var maxErr *retry.MaxAttemptsError
		if !errors.As(err, &send) || !errors.As(err, &maxErr) {
			t.Fatalf("%s: error %v (%T), want a RequestSendError after the maximum attempts", s, err, err)
		}
		if n := calls.Total(); n != 3 {
			t.Fatalf("%s: %d attempts, want 3", s, n)
		}
		t.Logf("%s reset: %v", s, err)
		if err := p.Remove("reset"); err != nil {
			t.Fatal(err)
		}
		calls.Reset()
		getItemTimes(t, c, tbl, 1)
		calls.Reset()
	}
	// Partial toxicity: moto closes the connection after each answer, so each attempt is
	// a new connection and half of them are reset; the SDK retries them on new ones. The
	// client has enough attempts that every call gets through.
	if err := p.ResetPeer("half", faults.Downstream, 0, 0.5); err != nil {
		t.Fatal(err)
	}
	c2, calls2 := ddbVia(t, p.URL(), 30)
	getItemTimes(t, c2, tbl, 20)
	if calls2.Total() <= 20 { // p = 2^-20 by chance
		t.Fatalf("toxicity 0.5: %d attempts for 20 calls, want retries", calls2.Total())
	}
	t.Logf("toxicity 0.5: %d attempts for 20 calls", calls2.Total())
}

// TestTimeoutAndDisable: a silent connection holds the call until the caller's deadline;
// a disabled proxy refuses connections until enabled again.
func TestTimeoutAndDisable(t *testing.T) {
	tbl := table(t)
	p := newTCP(t)
	c, calls := ddbVia(t, p.URL(), 3)
	if err := p.Timeout("silent", faults.Upstream, 0, 1); err != nil {
		t.Fatal(err)
	}
	start := time.Now() // before the deadline is set: a pause in between made it look early
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(tbl), Key: key("x")})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("after %s: %v, want the deadline", time.Since(start), err)
	}
	if err := p.Remove("silent"); err != nil {
		t.Fatal(err)
	}

	p.Disable()
	calls.Reset()
	_, err = c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(tbl), Key: key("x")})
	if err == nil || !strings.Contains(err.Error(), "connection refused") || calls.Total() != 3 {
		t.Fatalf("disabled: %v after %d attempts, want connection refused after 3", err, calls.Total())
	}
	if err := p.Enable(); err != nil {
		t.Fatal(err)
	}
	getItemTimes(t, c, tbl, 1)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Latency("late", faults.Downstream, time.Millisecond, 0, 1); !errors.Is(err, faults.ErrClosed) {
		t.Fatalf("toxic on a closed proxy: %v", err)
	}
}

func TestTCPArguments(t *testing.T) {
	for _, up := range []string{"", "nohost", "http://"} {
		if p, err := faults.NewTCP(up); err == nil {
			_ = p.Close()
			t.Errorf("NewTCP(%q) accepted", up)
		}
	}
	p := newTCP(t)
	for name, err := range map[string]error{
		"stream":   p.Latency("a", "sideways", time.Millisecond, 0, 1),
		"toxicity": p.Latency("b", faults.Downstream, time.Millisecond, 0, 1.5),
		"negative": p.ResetPeer("c", faults.Upstream, -time.Second, 1),
		"noname":   p.Bandwidth("", faults.Upstream, 10, 1),
		"slicer":   p.Slicer("d", faults.Upstream, 10, 10, 0, 1),
		"type":     p.Add("e", "no_such_toxic", faults.Upstream, 1, nil),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if got := p.Toxics(); len(got) != 0 {
		t.Errorf("toxics after refused adds: %v", got)
	}
}
