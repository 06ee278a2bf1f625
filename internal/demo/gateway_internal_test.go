package demo

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/internal/gateway"
)

// TestGatewayCheck: the demo's check of an outside service's calls passes a key called
// again by a new attempt, and names each thing exactly-once forbids: a key called more
// often than its record has attempts, a refused message's key called, a key the service
// applied whose message was not applied, an applied message the service never saw, a
// key reused with another body.
func TestGatewayCheck(t *testing.T) {
	g, err := gateway.Start("", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close() //nolint:errcheck // test
	call := func(key, body string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, g.URL()+"/x", strings.NewReader(body))
		req.Header.Set(gateway.KeyHeader, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	msg := func(key string) example.Message { return example.Message{ID: key, Key: key} }
	// ok: once; again: twice over two attempts; beyond: twice in one attempt; late: twice,
	// its record replaced after its TTL; refused: a bad message's key; stray: applied but
	// not a message; missing: applied by nobody; conflict: another body.
	for _, k := range []string{"ok", "again", "again", "beyond", "beyond", "late", "late", "refused", "stray", "conflict"} {
		call(k, "{}")
	}
	call("conflict", `{"other":1}`)
	attempts := map[string]int{"ok": 1, "again": 2, "beyond": 1, "late": 1, "conflict": 1}
	applicable := []example.Message{msg("ok"), msg("again"), msg("beyond"), msg("late"), msg("missing"), msg("conflict")}
	bads := []example.Bad{{Message: msg("refused")}, {Message: msg("ok")}} // a bad with a valid key (a payload mismatch) is not a refusal
	s, err := gatewayCheck(context.Background(), "URL", g.URL(), applicable, nil, bads, map[string]int{"late": 1}, func(k string) int { return attempts[k] })
	if err != nil {
		t.Fatal(err)
	}
	if s.OK() || s.Calls != 11 || s.Keys != 7 || s.Repeated != 4 || s.Conflicts != 1 ||
		!slices.Equal(s.BeyondAttempts, []string{"beyond (2 calls, 1 attempts)"}) || !slices.Equal(s.Refused, []string{"refused"}) ||
		!slices.Equal(s.NotApplied, []string{"stray"}) || !slices.Equal(s.Missing, []string{"missing"}) {
		t.Errorf("summary %+v", s)
	}
	ok, err := gatewayCheck(context.Background(), "URL", g.URL(), applicable[:2], []example.Message{msg("beyond"), msg("late"), msg("conflict"), msg("stray"), msg("refused")},
		nil, nil, func(k string) int { return max(attempts[k], 2) })
	if err != nil || ok.OK() != (ok.Conflicts == 0) || len(ok.BeyondAttempts)+len(ok.Refused)+len(ok.NotApplied)+len(ok.Missing) != 0 {
		t.Errorf("every call accounted for: %+v, %v", ok, err)
	}
}
