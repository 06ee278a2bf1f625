package demo

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/dedupgroup"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/gateway"
)

// TestChildLogCounts: a consumer process's record lines count as received messages,
// its "applied" lines as applied, and a line cut short by a kill counts as nothing.
func TestChildLogCounts(t *testing.T) {
	var msgs, applied int
	l := ChildLog{OnMessage: func(string) { msgs++ }, OnApplied: func() { applied++ }}
	w := &lineReader{fn: l.line}
	_, _ = w.Write([]byte(`{"msg":"sqs record","message_id":"m1","outcome":"applied"}` + "\n" +
		`{"msg":"sqs record","message_id":"m2","outcome":"duplicate"}` + "\n" +
		`{"msg":"sqs record","message_id":"m3","outcome":"applied"}` + "\n" +
		`{"msg":"sweep done","reaped":0}` + "\n" +
		`{"msg":"sqs record","message_id":"m4","outc`))
	if msgs != 3 || applied != 2 {
		t.Errorf("%d messages and %d applied, want 3 and 2", msgs, applied)
	}
}

// TestChaosTriesAPhaseAgain: a child that does not reach its crash phase in time is killed
// from outside, and the phase gets maxPhaseRetries more children before the cycle moves
// on to the random kill. The children here never reach any phase: each writes its
// arguments and sleeps.
func TestChaosTriesAPhaseAgain(t *testing.T) {
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	res, err := Chaos(context.Background(), ChaosConfig{
		Exe: "/bin/sh", Args: []string{"-c", `echo "child $*" >> "$ARGS_FILE"; exec sleep 30`, "child"}, Env: []string{"ARGS_FILE=" + argsFile},
		Kills: 4, MinUp: 300 * time.Millisecond, MaxUp: 400 * time.Millisecond, Phases: []string{PhaseSent}, PhaseWait: 300 * time.Millisecond,
		Out: io.Discard, Rand: rand.New(rand.NewPCG(1, 2)),
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatal(err)
	}
	var phases []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if strings.Contains(line, "--crash-at "+PhaseSent) {
			phases = append(phases, PhaseSent)
		} else {
			phases = append(phases, RandomKill)
		}
	}
	want := []string{PhaseSent, PhaseSent, PhaseSent, RandomKill}
	if !slices.Equal(phases, want) || res.Killed != 4 || res.ByPhase[RandomKill] != 4 || res.ByPhase[PhaseSent] != 0 {
		t.Errorf("children %v, result %+v; want %v, 4 kills from outside", phases, res, want)
	}
}

// TestParkedBadMessages: of the bodies SQS parked in the DLQ, a bad message no consumer
// dead-lettered goes back (once, however many copies were parked); one a consumer
// dead-lettered before SQS parked it again does not (sending it back would dead-letter
// it a second time), even when another bad message with the same reason went to the DLQ
// (the inventory's two "quantity: must be positive"); valid bodies, and a refused one
// that decodes, are told apart by their text.
func TestParkedBadMessages(t *testing.T) {
	bads := []example.Bad{
		{Message: example.Message{Body: `{"account_id":"a"}`}, Reason: "payment_id: missing"},
		{Message: example.Message{Body: `{"payment_id":"p-2"`}, Reason: "body is not valid JSON"},
		{Message: example.Message{Body: `{"payment_id":"p-3","currency":"EUR"}`}, Reason: "does not match the account's GBP"},
		{Message: example.Message{Body: `{"order_id":"o-4","quantity":0}`}, Reason: "quantity: must be positive"},
		{Message: example.Message{Body: `{"order_id":"o-5","quantity":-1}`}, Reason: "quantity: must be positive"},
	}
	lettered := []string{bads[0].Body, bads[3].Body} // dead-lettered by a consumer, with their reasons
	parked := []string{bads[0].Body, `{"payment_id":"p-9"}`, bads[1].Body, bads[2].Body, bads[1].Body, bads[4].Body}
	send, others := parkedBadMessages(bads, parked, lettered)
	if got, want := fmt.Sprint(send), "[1 2 4]"; got != want {
		t.Errorf("bad messages to send back: %s, want %s (not the one dead-lettered already, the JSON one once, the second with a shared reason)", got, want)
	}
	if got, want := fmt.Sprint(others), `[{"payment_id":"p-9"}]`; got != want {
		t.Errorf("other parked bodies: %s, want %s", got, want)
	}
}

// TestDeduplicationIDsKeepTheirGroup: the demo's traffic (the main stream and the
// duplicate storm, with every kind of duplicate) sends each deduplication id with one
// group only, so the input queue's per-group deduplication (high-throughput FIFO) drops
// every in-window duplicate that queue-wide deduplication dropped.
func TestDeduplicationIDsKeepTheirGroup(t *testing.T) {
	for _, ex := range wiring.Examples {
		t.Run(ex.Name(), func(t *testing.T) {
			gen := exampletest.Traffic(t, ex)
			rng := rand.New(rand.NewPCG(12, 12))
			ps := gen.Traffic(rng, "dg", 400, 7)
			deduplicationIDsKeepTheirGroup(t, rng, ps, badMessages(gen.Bad("dg", ps)))
		})
	}
}

func deduplicationIDsKeepTheirGroup(t *testing.T, rng *rand.Rand, ps []example.Message, bads []Message) {
	var all []Message
	first, second, late, bad := stream(rng, ps, bads)
	all = append(append(append(append(all, first...), second...), late...), bad...)
	st := stormStream(rng, ps, 6)
	all = append(append(append(append(all, st.first...), st.second...), st.afterDone...), st.afterTTL...)
	var m dedupgroup.Map
	repeats := 0
	for _, msg := range all {
		if err := m.Add("input", msg.DedupID, msg.Group); err != nil {
			t.Error(err)
		}
	}
	repeats = len(all) - m.Len()
	// The check means something only if ids repeat: in-window duplicates do.
	if repeats == 0 {
		t.Fatalf("%d messages and no repeated deduplication id", len(all))
	}
	t.Logf("%d messages, %d repeated deduplication ids, each with one group", len(all), repeats)
}

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

// newQueue creates a queue for the test: standard, or FIFO.
func newQueue(t *testing.T, api *sqs.Client, fifo bool) string {
	t.Helper()
	if fifo {
		return awstest.FIFOQueue(context.Background(), t, api, "out", nil)
	}
	return awstest.Queue(context.Background(), t, api, "out", nil)
}

// TestOutboundQueues: the demo counts each outbound queue by idempotency-key. A resend
// (a key again) is what a standard queue delivers and its receiver drops: that queue is
// OK; a FIFO queue that delivered a key twice is not. On the Confirmer's queue a resend
// counts once for its message, and a message not applied is named.
func TestOutboundQueues(t *testing.T) {
	ctx := context.Background()
	api := awstest.SQS(t)
	// send puts body under key: on a FIFO queue with a dedup id of its own, so that
	// SQS keeps the copy, as it does past its deduplication interval.
	send := func(url, key, body string, n int) {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			idem.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(key)}}}
		if strings.HasSuffix(url, ".fifo") {
			in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String(fmt.Sprint(key, "-", n))
		}
		if _, err := api.SendMessage(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	standard, fifo, confirmed := newQueue(t, api, false), newQueue(t, api, true), newQueue(t, api, true)
	for _, url := range []string{standard, fifo} {
		send(url, "pk1#0", "a", 1)
		send(url, "pk1#0", "a", 2) // the resend
		send(url, "pk2#0", "b", 1)
	}
	send(confirmed, "pk1#0", "a", 1)
	send(confirmed, "pk3#0", "c", 1) // for a message not applied
	got := map[string]QueueCount{}
	var rc *receiptReader
	for _, url := range []string{standard, fifo, confirmed} {
		r := &receiptReader{api: api, url: url, seen: map[string]map[string]bool{}}
		if url == confirmed {
			r.confirms, rc = func(body string) (string, bool) { return body, true }, r
		}
		if err := r.drain(ctx); err != nil {
			t.Fatal(err)
		}
		got[url] = r.queueCount()
	}
	if q := got[standard]; q.Messages != 3 || q.Keys != 2 || !q.OK() {
		t.Errorf("standard queue %+v (OK %v), want 3 messages, 2 keys, OK", q, q.OK())
	}
	if q := got[fifo]; q.Messages != 3 || q.Keys != 2 || q.OK() {
		t.Errorf("FIFO queue %+v (OK %v), want 3 messages, 2 keys, not OK", q, q.OK())
	}
	if distinct, total, notApplied := rc.counts([]example.Message{{ID: "a"}}); distinct != 2 || total != 2 || notApplied != 1 {
		t.Errorf("the Confirmer's queue: %d messages with an outbound message, %d outbound, %d not applied; want 2, 2, 1", distinct, total, notApplied)
	}
}
