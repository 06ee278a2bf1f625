package demo

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/gateway"
)

// GatewaySummary is what the stand-in of one of the example's outside services
// (example.Caller, internal/gateway) saw, checked against the idempotency records.
type GatewaySummary struct {
	Var     string // the variable that holds its URL
	Calls   int    // calls with a key
	Keys    int    // distinct keys called
	Applied int    // keys it applied (once each)
	Faults  int    // calls it failed, hung or lost on request
	// Repeated are the keys called more than once: each a holder that died, timed out
	// or failed between the call and the recording of its step, taken over by a new
	// attempt that called again with the same key.
	Repeated int
	// BeyondAttempts are keys called more often than their record has attempts (a
	// faulty call excepted): a call repeated within one attempt. None expected.
	BeyondAttempts []string
	// Refused are keys of bad messages that were called: a message refused (or
	// invalid) must be refused before the call. None expected.
	Refused []string
	// NotApplied are keys the stand-in applied whose message was not applied and is not
	// parked: an outside effect without its commit. None expected.
	NotApplied []string
	// Missing are applied messages whose key the stand-in never applied: a commit
	// without its outside effect. None expected.
	Missing   []string
	Conflicts int // calls that reused a key with another body; none expected
}

// OK reports whether the calls are what exactly-once asks of a step's outside call.
func (g GatewaySummary) OK() bool {
	return len(g.BeyondAttempts) == 0 && len(g.Refused) == 0 && len(g.NotApplied) == 0 && len(g.Missing) == 0 && g.Conflicts == 0
}

// gatewayCheck reads the calls of the stand-in at url (variable name) and checks them:
// applicable are the messages applied, parked those SQS parked unapplied, bads the bad
// messages; late counts the deliveries of a key after its record's TTL or deletion
// (each starts its attempts again); attempts reads a key's record's attempts.
func gatewayCheck(ctx context.Context, name, url string, applicable, parked []example.Message, bads []example.Bad,
	late map[string]int, attempts func(key string) int,
) (GatewaySummary, error) {
	calls, err := gateway.ReadCalls(ctx, http.DefaultClient, url)
	if err != nil {
		return GatewaySummary{}, fmt.Errorf("demo: %s: %w", name, err)
	}
	t := gateway.Count(calls)
	g := GatewaySummary{Var: name, Calls: t.Calls, Keys: t.Keys, Applied: t.Applied, Faults: t.Faults, Repeated: len(t.Repeated), Conflicts: t.Conflicts}
	applied := map[string]bool{}
	answered := map[string]int{} // calls that got an answer, per key
	for _, c := range calls {
		if c.Outcome == gateway.Applied || c.Outcome == gateway.Lost {
			applied[c.Key] = true
		}
		if c.Outcome == gateway.Applied || c.Outcome == gateway.Replayed {
			answered[c.Key]++
		}
	}
	for _, key := range t.RepeatedKeys() {
		if answered[key] > attempts(key)+late[key] {
			g.BeyondAttempts = append(g.BeyondAttempts, fmt.Sprintf("%s (%d calls, %d attempts)", key, answered[key], attempts(key)))
		}
	}
	valid := map[string]bool{}
	for _, m := range applicable {
		valid[m.Key] = true
		if !applied[m.Key] {
			g.Missing = append(g.Missing, m.Key)
		}
	}
	for _, m := range parked {
		valid[m.Key] = true
	}
	for _, b := range bads {
		if b.Key != "" && !valid[b.Key] && countOf(calls, b.Key) > 0 && !slices.Contains(g.Refused, b.Key) {
			g.Refused = append(g.Refused, b.Key)
		}
	}
	for key := range applied {
		if !valid[key] && !slices.Contains(g.Refused, key) {
			g.NotApplied = append(g.NotApplied, key)
		}
	}
	slices.Sort(g.NotApplied)
	return g, nil
}

func countOf(calls []gateway.Call, key string) int {
	n := 0
	for _, c := range calls {
		if c.Key == key {
			n++
		}
	}
	return n
}

// recordAttempts returns how many attempts the record of key had (0 when there is none).
func recordAttempts(ctx context.Context, store persistence.Store, scope string) func(key string) int {
	return func(key string) int {
		pk, err := idem.RecordKey(scope, key, false)
		if err != nil {
			return 0
		}
		rec, err := store.Get(ctx, pk, time.Now())
		if err != nil {
			return 0
		}
		return rec.Attempt
	}
}

func (g GatewaySummary) print(line func(string, any), w io.Writer) {
	line("outside service "+g.Var+" (its stand-in)", fmt.Sprintf("%d calls for %d keys, %d applied once each", g.Calls, g.Keys, g.Applied))
	line("  keys called again (crash between call and record)", fmt.Sprintf("%d (each within its record's attempts)", g.Repeated-len(g.BeyondAttempts)))
	if g.Faults > 0 {
		line("  calls it failed, hung or lost on request", g.Faults)
	}
	line("  calls beyond a key's attempts / for refused keys", fmt.Sprintf("%d / %d", len(g.BeyondAttempts), len(g.Refused)))
	line("  applied without a commit / commits without it", fmt.Sprintf("%d / %d", len(g.NotApplied), len(g.Missing)))
	for _, l := range []struct {
		what string
		keys []string
	}{{"called beyond its attempts", g.BeyondAttempts}, {"refused, yet called", g.Refused}, {"applied by the service, not committed", g.NotApplied}, {"committed, not applied by the service", g.Missing}} {
		if len(l.keys) > 0 {
			fmt.Fprintf(w, "      %s: %s\n", l.what, strings.Join(l.keys[:min(len(l.keys), 10)], ", "))
		}
	}
	if g.Conflicts > 0 {
		fmt.Fprintf(w, "      %d calls reused a key with another body\n", g.Conflicts)
	}
}
