package ingressapp_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestAcceptedRequestIsConsumedOnce carries a request from POST to its completed status
// through a real consumer run: 202 with its Location, the status accepted, a retry
// answered the same 202 without a second send, in_progress while the consumer holds the
// key, then the consumer's delivery acquires the key and applies it as any first delivery (attempt 1, outcome applied: the ingress's
// record, in its own table, is not the consumer's), and the status is completed with the
// consumer's stored response; a POST retried after that answers 200 with it. The AWS
// requests are counted on the way: 3 for an accepted request (the conditional put, the
// send, the mark), 2 for a retry, 2 for a status.
func TestAcceptedRequestIsConsumedOnce(t *testing.T) {
	f := newFixture(t, options{})
	m := f.traffic(t, 1)[0]
	key := f.key("flow")

	r := f.post(t, key, m.Body)
	wantCode(t, "first POST", r, http.StatusAccepted)
	if loc := r.header.Get("Location"); loc != "/requests/"+key {
		t.Errorf("Location %q", loc)
	}
	if st := r.status(t); st.Status != ingressapp.StatusAccepted || st.Key != key || st.Location != "/requests/"+key {
		t.Errorf("first POST: %+v", st)
	}
	if ra, ok := r.header["Retry-After"]; ok {
		t.Errorf("first POST: Retry-After %v on a 202", ra)
	}
	first := f.calls.Ops()
	f.calls.Reset()

	r = f.post(t, key, m.Body)
	wantCode(t, "a retry", r, http.StatusAccepted)
	retry := f.calls.Ops()
	f.calls.Reset()

	r = f.get(t, key)
	wantCode(t, "GET", r, http.StatusOK)
	if st := r.status(t); st.Status != ingressapp.StatusAccepted {
		t.Errorf("GET before the consumer: %+v", st)
	}
	status := f.calls.Ops()
	t.Logf("AWS requests: accepted request %v, retry %v, status %v", first, retry, status)
	for what, c := range map[string]struct {
		got  map[string]int
		want map[string]int
	}{
		"accepted request": {first, map[string]int{"GetItem": 1, "PutItem": 1, "SendMessage": 1, "UpdateItem": 1}},
		"retry":            {retry, map[string]int{"PutItem": 1, "GetItem": 1}},
		"status":           {status, map[string]int{"GetItem": 2}},
	} {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s: AWS requests %v, want %v", what, c.got, c.want)
		}
	}

	msgs := f.inputMessages(t)
	scoped := f.scoped(key) // the caller's key: the one the consumer sees
	if len(msgs) != 1 || keyOf(msgs[0]) != scoped || aws.ToString(msgs[0].Body) != m.Body ||
		msgs[0].Attributes["MessageDeduplicationId"] != f.keys(t).IngressDeduplicationID(scoped) || msgs[0].Attributes["MessageGroupId"] != outbox.DeduplicationID(m.Group) {
		t.Fatalf("input queue: %+v, want the one message with the caller's key %s, its dedup id and group %s", msgs, scoped, m.Group)
	}
	// ReceiveAll hid it for a minute: make it visible for the consumer.
	for _, msg := range msgs {
		if _, err := f.st.SQS.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(f.queue), ReceiptHandle: msg.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
			t.Fatal(err)
		}
	}

	// While the consumer holds the key (acquired, not yet committed), the status is
	// in_progress.
	var during reply
	logs := f.consumeWith(t, func(api persistence.DynamoDBAPI) persistence.DynamoDBAPI {
		return &beforeCommit{DynamoDBAPI: api, fn: func() { during = f.get(t, key) }}
	})
	if st := during.status(t); during.code != http.StatusOK || st.Status != ingressapp.StatusInProgress {
		t.Errorf("GET while the consumer holds the key: %s, want in_progress", during)
	}
	if want := `"key_hash":"` + f.keys(t).LogHash(scoped) + `"`; !strings.Contains(logs, want) || !strings.Contains(logs, `"outcome":"applied"`) {
		t.Errorf("the consumer did not apply the key as a first delivery:\n%s", logs)
	}
	rec := f.consumerRecord(t, scoped)
	if rec.Status != persistence.StatusCompleted || rec.Attempt != 1 {
		t.Errorf("the consumer's record: %s, attempt %d; want COMPLETED at the first attempt", rec.Status, rec.Attempt)
	}
	r = f.get(t, key)
	st := r.status(t)
	if r.code != http.StatusOK || st.Status != ingressapp.StatusCompleted || !bytes.Equal(st.Response, rec.Response) {
		t.Errorf("GET after the consumer: %s, want completed with the stored response %s", r, rec.Response)
	}
	r = f.post(t, key, m.Body)
	if st := r.status(t); r.code != http.StatusOK || st.Status != ingressapp.StatusCompleted {
		t.Errorf("POST after the consumer: %s, want 200 completed", r)
	}
	if n := f.sends(); n != 0 {
		t.Errorf("%d sends after the first request's, want none", n)
	}
	// One JSON line per request, naming the key by its hash only, and EMF counters.
	logs = f.logs.String()
	for _, want := range []string{`"msg":"ingress request"`, `"outcome":"Accepted"`, `"outcome":"Replayed"`, `"outcome":"StatusRead"`,
		`"key_hash":"` + f.keys(t).LogHash(scoped) + `"`, `"caller":"arn:aws:iam::000000000000:user/local"`, `"Accepted":1`, `"Sent":1`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the ingress's logs lack %s:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, key) {
		t.Errorf("the ingress's logs name the key itself:\n%s", logs)
	}
}

// TestConcurrentFirstRequests: 50 clients POST one key with one body at the same moment.
// Exactly one message is sent; each client is answered 202 or 409 (with Retry-After),
// and those answered 409 are answered 202 once they retry.
func TestConcurrentFirstRequests(t *testing.T) {
	f := newFixture(t, options{})
	m := f.traffic(t, 1)[0]
	key := f.key("storm")
	const clients = 50
	replies := make([]reply, clients)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range clients {
		wg.Go(func() {
			<-start
			r, err := f.do(t, f.http, http.MethodPost, ingressapp.RequestsPath, key, []byte(m.Body))
			if err != nil {
				t.Error(err)
			}
			replies[i] = r
		})
	}
	close(start)
	wg.Wait()
	codes := map[int]int{}
	for _, r := range replies {
		codes[r.code]++
		if r.code == http.StatusConflict {
			if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 {
				t.Errorf("409 with Retry-After %q", r.header.Get("Retry-After"))
			}
		}
	}
	t.Logf("answers: %v", codes)
	if codes[http.StatusAccepted] < 1 || codes[http.StatusAccepted]+codes[http.StatusConflict] != clients {
		t.Errorf("answers %v: want every one 202 or 409, at least one 202", codes)
	}
	for _, r := range replies {
		if r.code == http.StatusConflict {
			time.Sleep(10 * time.Millisecond)
			wantCode(t, "a retry of a 409", f.retry(t, key, m.Body), http.StatusAccepted)
		}
	}
	if n := f.sends(); n != 1 {
		t.Errorf("%d sends, want 1", n)
	}
	if msgs := f.inputMessages(t); len(msgs) != 1 {
		t.Errorf("%d messages on the input queue, want 1", len(msgs))
	}
}

// TestLostAnswer: the ingress commits (the message sent, the record marked), but the
// answer comes too late for the client, which gives up and retries: the retry is
// answered 202 from the record, and nothing is sent twice.
func TestLostAnswer(t *testing.T) {
	answered := make(chan struct{}, 1)
	f := newFixture(t, options{slowAnswer: 1500 * time.Millisecond, answered: answered})
	m := f.traffic(t, 1)[0]
	key := f.key("lost")
	impatient := &http.Client{Timeout: 300 * time.Millisecond}
	if r, err := f.do(t, impatient, http.MethodPost, ingressapp.RequestsPath, key, []byte(m.Body)); err == nil {
		t.Fatalf("the impatient client got its answer: %s", r)
	}
	// The retry comes once the first POST was committed, its answer lost: under load the
	// first may take longer than the impatient client's 300 ms, and a retry while it still
	// runs is answered 409, as it should be (TestConcurrentFirstRequests), which is not what this
	// test is about.
	select {
	case <-answered:
	case <-time.After(30 * time.Second):
		t.Fatal("the first POST never answered")
	}
	r := f.post(t, key, m.Body)
	wantCode(t, "the retry after a lost answer", r, http.StatusAccepted)
	if n := f.sends(); n != 1 {
		t.Errorf("%d sends, want 1", n)
	}
	if msgs := f.inputMessages(t); len(msgs) != 1 || keyOf(msgs[0]) != f.scoped(key) {
		t.Errorf("input queue %v, want the one message", msgs)
	}
}

// TestStoreOrQueueDown: with DynamoDB unreachable a POST is answered 503 with
// Retry-After and nothing is sent or written; with SQS unreachable it is answered 503,
// its record is written but says the message was not sent, a GET says 404 (nothing
// accepted), and the retry, with SQS back, sends it (202, one message).
func TestStoreOrQueueDown(t *testing.T) {
	f := newFixture(t, options{})
	m := f.traffic(t, 1)[0]
	f.startIngress(t, options{deadDDB: true})
	key := f.key("ddb-down")
	r := f.post(t, key, m.Body)
	wantProblem(t, "POST with DynamoDB down", r, http.StatusServiceUnavailable, "retry after Retry-After")
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	// The store's error is in the log line only; the answer gives the request's id to find it.
	var p struct {
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil || p.RequestID == "" || !strings.Contains(f.logs.String(), `"request_id":"`+p.RequestID+`"`) ||
		bytes.Contains(r.body, []byte("127.0.0.1")) {
		t.Errorf("503 body %s: want the request id of its log line, and no error text", r.body)
	}
	if n := f.sends(); n != 0 {
		t.Errorf("%d sends with the store down, want 0", n)
	}
	if it := f.ingressItem(t, key); it != nil {
		t.Errorf("an ingress record with the store down: %v", it)
	}

	f.startIngress(t, options{deadSQS: true})
	key = f.key("sqs-down")
	r = f.post(t, key, m.Body)
	wantProblem(t, "POST with SQS down", r, http.StatusServiceUnavailable, "retry after Retry-After")
	if ra := r.header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q after a failed send whose hold was released, want 1", ra)
	}
	if it := f.ingressItem(t, key); it == nil || it["state"].(*ddbtypes.AttributeValueMemberS).Value != "UNSENT" {
		t.Errorf("ingress record after a failed send: %v, want UNSENT", it)
	}
	wantProblem(t, "GET of a request whose send failed", f.get(t, key), http.StatusNotFound, "not accepted")

	f.startIngress(t, options{})
	wantCode(t, "the retry with SQS back", f.post(t, key, m.Body), http.StatusAccepted)
	if msgs := f.inputMessages(t); len(msgs) != 1 || keyOf(msgs[0]) != f.scoped(key) {
		t.Errorf("input queue %v, want the one message of the retried request", msgs)
	}
	wantCode(t, "GET", f.get(t, key), http.StatusOK)
}

// TestSentButNotMarked: the send succeeds but the write that records it fails. The
// client is answered 503 (no 202 before the record says sent); a retry inside the
// window is answered 409; once the window is over the retry takes the record over,
// sends again with the same deduplication id (SQS drops the copy) and is answered 202.
func TestSentButNotMarked(t *testing.T) {
	var failed sync.Once
	// The window also bounds each sending attempt (its send's deadline): 1 s was too short
	// for the retry's takeover and send on a machine busy compiling the other packages.
	const window = 3 * time.Second
	f := newFixture(t, options{env: map[string]string{"ACCEPT_WINDOW": window.String()}, wrapDDB: func(api ingressapp.DynamoDBAPI) ingressapp.DynamoDBAPI {
		return &failMark{DynamoDBAPI: api, once: &failed}
	}})
	m := f.traffic(t, 1)[0]
	key := f.key("unmarked")
	first := f.post(t, key, m.Body)
	wantCode(t, "POST whose mark fails", first, http.StatusServiceUnavailable)
	// Retry-After is what is left of the window: a retry sooner would be answered 409.
	if ra, err := strconv.Atoi(first.header.Get("Retry-After")); err != nil || ra < 2 || ra > 3 {
		t.Errorf("Retry-After %q after the mark failed, want the 3 s window's rest (2 or 3)", first.header.Get("Retry-After"))
	}
	r := f.post(t, key, m.Body)
	wantProblem(t, "a retry inside the window", r, http.StatusConflict, "still being accepted")
	time.Sleep(window + 100*time.Millisecond)
	wantCode(t, "a retry after the window", f.post(t, key, m.Body), http.StatusAccepted)
	if n := f.sends(); n != 2 {
		t.Errorf("%d sends, want 2 (the first, whose mark failed, and the retry's)", n)
	}
	if msgs := f.inputMessages(t); len(msgs) != 1 {
		t.Errorf("%d messages delivered, want 1: the resend has the same deduplication id", len(msgs))
	}
}

// failMark fails the first write that marks a record sent.
type failMark struct {
	ingressapp.DynamoDBAPI
	once *sync.Once
}

func (f *failMark) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	fail := false
	if strings.Contains(aws.ToString(in.UpdateExpression), "#message_id") {
		f.once.Do(func() { fail = true })
	}
	if fail {
		return nil, errors.New("injected: the mark's answer never came")
	}
	return f.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

// TestMismatch: the same key with another body is refused with 422 and sends nothing;
// the same body written differently (keys reordered, spaces) is the same request.
func TestMismatch(t *testing.T) {
	f := newFixture(t, options{})
	ms := f.traffic(t, 2)
	key := f.key("mismatch")
	wantCode(t, "first POST", f.post(t, key, ms[0].Body), http.StatusAccepted)
	wantProblem(t, "another body", f.post(t, key, ms[1].Body), http.StatusUnprocessableEntity, "another request body")
	var indented bytes.Buffer
	if err := json.Indent(&indented, []byte(ms[0].Body), "", "   "); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "the same body indented", f.post(t, key, indented.String()), http.StatusAccepted)
	if n := f.sends(); n != 1 {
		t.Errorf("%d sends, want 1", n)
	}
	if msgs := f.inputMessages(t); len(msgs) != 1 || aws.ToString(msgs[0].Body) != ms[0].Body {
		t.Errorf("input queue %v, want the first body only", msgs)
	}
}

// TestBadInput: requests the ingress refuses before anything is written or sent.
func TestBadInput(t *testing.T) {
	f := newFixture(t, options{})
	m := f.traffic(t, 1)[0]
	big := `{"x":"` + strings.Repeat("a", ingressapp.DefaultMaxBodyBytes) + `"}`
	for _, c := range []struct {
		name, method, path, key, body string
		code                          int
		part                          string
	}{
		{"no Idempotency-Key", "POST", "/requests", "", m.Body, 400, "Idempotency-Key is missing"},
		{"a key of 10 000 characters", "POST", "/requests", strings.Repeat("k", 10_000), m.Body, 400, "10000 characters long; the limit is 255"},
		{"a key with a space", "POST", "/requests", "two words", m.Body, 400, "a character other than"},
		{"two keys", "POST", "/requests", "k1,k2", m.Body, 400, "a character other than"},
		{"an unterminated quoted key", "POST", "/requests", `"abc`, m.Body, 400, "must end with its quote"},
		{"an empty quoted key", "POST", "/requests", `""`, m.Body, 400, "the key is empty"},
		{"a body over the limit", "POST", "/requests", f.key("big"), big, 400, fmt.Sprintf("the limit is %d", ingressapp.DefaultMaxBodyBytes)},
		{"invalid UTF-8", "POST", "/requests", f.key("utf8"), "{\"a\":\"\xff\xfe\"}", 400, "not valid UTF-8"},
		{"an empty body", "POST", "/requests", f.key("empty"), "", 400, "the body is empty"},
		{"a body the example refuses", "POST", "/requests", f.key("invalid"), `{"not":"a message"}`, 400, "not a valid " + f.ex.Name() + " message"},
		{"a body that is not JSON", "POST", "/requests", f.key("notjson"), "hello", 400, "not a valid " + f.ex.Name() + " message"},
		{"GET of a malformed key", "GET", "/requests/a%20b", "", "", 400, "a character other than"},
		{"GET of an unknown key", "GET", "/requests/" + f.key("unknown"), "", "", 404, "no request was accepted"},
		{"PUT", "PUT", "/requests", f.key("put"), m.Body, 405, "this path takes POST"},
		{"POST to a key's path", "POST", "/requests/" + f.key("posted"), "", m.Body, 405, "this path takes GET"},
		{"another path", "GET", "/other", "", "", 404, "no such path"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := f.do(t, f.http, c.method, c.path, c.key, []byte(c.body))
			if err != nil {
				t.Fatal(err)
			}
			wantProblem(t, c.name, r, c.code, c.part)
			if c.code == http.StatusMethodNotAllowed {
				if allow, want := r.header.Get("Allow"), strings.TrimPrefix(c.part, "this path takes "); allow != want {
					t.Errorf("%s: Allow %q, want %q", c.name, allow, want)
				}
			}
		})
	}
	// A path that does not unescape, as a function URL may hand it over (Go's HTTP client
	// and server refuse to carry it), is no route: told to the handler directly.
	app := f.direct(t, f.cfg)
	resp := app.Handle(context.Background(), event(http.MethodGet, "/requests/%zz", nil, ""))
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(resp.Body, `"detail":"no such path"`) {
		t.Errorf("GET /requests/%%zz: %d %s, want 404, no such path", resp.StatusCode, resp.Body)
	}
	// A body the example takes, with a character SQS refuses in a message (U+FFFF is
	// valid JSON): refused with 400, not sent (SQS would refuse it, for ever). No example
	// here keeps free text, so one that takes a "note" member stands in.
	cfg := f.cfg
	cfg.Example = withFreeText{f.ex}
	free := f.direct(t, cfg)
	sends := f.sends()
	resp = free.Handle(context.Background(), postEvent(f.key("uffff"), withNote(t, m.Body, "\uffff")))
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(resp.Body, "a character SQS does not take") || f.sends() != sends {
		t.Errorf("a body with U+FFFF: %d %s, want 400 and nothing sent", resp.StatusCode, resp.Body)
	}
	// The same with a byte that is not UTF-8 (Go's JSON decoder takes it).
	resp = free.Handle(context.Background(), postEvent(f.key("xff"), withNote(t, m.Body, "\xff")))
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(resp.Body, "not valid UTF-8") || f.sends() != sends {
		t.Errorf("a body with the byte 0xff: %d %s, want 400 and nothing sent", resp.StatusCode, resp.Body)
	}
	// An event that is not a function URL's JSON is the invocation's error.
	if _, err := free.Invoke(context.Background(), []byte("not an event")); err == nil {
		t.Error("Invoke of a payload that is not JSON: no error")
	}
	// A body the function URL hands over base64-encoded: taken at the size limit exactly
	// (its encoded length overstates it by up to 2 bytes), refused when it does not
	// decode.
	cfg = f.cfg
	cfg.MaxBodyBytes = len(m.Body)
	exact := f.direct(t, cfg)
	for what, c := range map[string]struct {
		body   string
		base64 bool
		code   int
		part   string
	}{
		"at the limit":       {base64.StdEncoding.EncodeToString([]byte(m.Body)), true, http.StatusAccepted, ""},
		"that is no base64":  {"!!not base64!!", true, http.StatusBadRequest, "does not decode"},
		"plain at the limit": {m.Body, false, http.StatusAccepted, ""},
	} {
		ev := postEvent(f.key("b64-"+strings.ReplaceAll(what, " ", "-")), c.body)
		ev.IsBase64Encoded = c.base64
		resp := exact.Handle(context.Background(), ev)
		if resp.StatusCode != c.code || !strings.Contains(resp.Body, c.part) {
			t.Errorf("a base64 body %s: %d %s, want %d %q", what, resp.StatusCode, resp.Body, c.code, c.part)
		}
	}
	// An event built by hand (not a function URL's: those are in lower case) may name the
	// header in any case, and its value may carry spaces around the key. A
	// configuration built by hand may leave the layout's table to IdempotencyTable.
	cfg = f.cfg
	cfg.Layout.Table = ""
	byHand, err := ingressapp.New(cfg, ingressapp.Deps{DynamoDB: f.st.DynamoDB, SQS: f.st.SQS, Logs: io.Discard, Metrics: io.Discard})
	if err != nil {
		t.Fatalf("New with the layout's table left to IdempotencyTable: %v", err)
	}
	resp = byHand.Handle(context.Background(), event(http.MethodPost, ingressapp.RequestsPath, map[string]string{"Idempotency-Key": "  " + f.key("by-hand") + " "}, m.Body))
	if resp.StatusCode != http.StatusAccepted || resp.Headers["Location"] != ingressapp.RequestsPath+"/"+f.key("by-hand") {
		t.Errorf("a hand-built event with Idempotency-Key in another case and spaces: %d %v %s, want 202 for the key", resp.StatusCode, resp.Headers, resp.Body)
	}
	wantCode(t, "a quoted key (the draft's form)", f.post(t, `"`+f.key("quoted")+`"`, m.Body), http.StatusAccepted)
	if n := f.sends(); n != 1 {
		t.Errorf("%d sends, want 1 (the quoted key's)", n)
	}
	// A function URL switched to AuthType NONE: events without an IAM caller are refused.
	f.startIngress(t, options{noCaller: true})
	wantProblem(t, "no IAM caller", f.post(t, f.key("anonymous"), m.Body), http.StatusForbidden, "SigV4")
	// Refused before anything else is looked at: the path, the method, the key.
	for _, c := range []struct{ method, path, key string }{
		{http.MethodGet, "/nowhere", ""}, {http.MethodDelete, ingressapp.RequestsPath, f.key("anonymous")}, {http.MethodPost, ingressapp.RequestsPath, ""},
	} {
		r, err := f.do(t, f.http, c.method, c.path, c.key, []byte(m.Body))
		if err != nil {
			t.Fatal(err)
		}
		wantProblem(t, "no IAM caller: "+c.method+" "+c.path, r, http.StatusForbidden, "SigV4")
	}
}

// ingressItem reads the ingress's record of the default caller's key, nil when there is
// none.
func (f *fixture) ingressItem(t *testing.T, key string) map[string]ddbtypes.AttributeValue {
	t.Helper()
	pk, err := idem.RecordKey(f.env["IDEMPOTENCY_SCOPE"], f.scoped(key), false)
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.st.DynamoDB.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(f.env["INGRESS_TABLE"]), Key: map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: pk}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// deadEndpoint is a loopback URL nothing listens on: requests to it are refused.
func deadEndpoint(t *testing.T) string {
	t.Helper()
	port, err := awstest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// TestStatusOfEachOutcome: what a GET reports for each outcome of the consumer's record,
// each written by idem's middleware, as the consumer writes it: a live lease
// (in_progress), a retryable failure a redelivery retries (in_progress, with the error), a
// permanent failure (failed, not redrivable), a business rule's refusal through the real
// consumer (failed with the dead letter's reason, redrivable), and a key the consumer
// knows with another body (failed: payload mismatch).
func TestStatusOfEachOutcome(t *testing.T) {
	f := newFixture(t, options{})
	ms := f.traffic(t, 4)
	store, err := persistence.NewDynamoStore(f.st.DynamoDB, f.env["IDEMPOTENCY_TABLE"])
	if err != nil {
		t.Fatal(err)
	}
	client, err := idem.New(idem.Config{Store: store, Scope: f.env["IDEMPOTENCY_SCOPE"], Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	statusOf := func(key string) ingressapp.Status {
		t.Helper()
		r := f.get(t, key)
		wantCode(t, "GET "+key, r, http.StatusOK)
		return r.status(t)
	}

	held, failing := f.key("held"), f.key("permanent")
	wantCode(t, "POST", f.post(t, held, ms[0].Body), http.StatusAccepted)
	wantCode(t, "POST", f.post(t, failing, ms[1].Body), http.StatusAccepted)
	owner := lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: "req-held"})
	_, err = client.Do(owner, &idem.Request{Key: f.scoped(held), Payload: []byte(ms[0].Body)}, func(context.Context, *idem.Request) (idem.Result, error) {
		if st := statusOf(held); st.Status != ingressapp.StatusInProgress {
			t.Errorf("while a consumer holds the key: %+v", st)
		}
		return idem.Result{}, errors.New("throttled, for the test")
	})
	if err == nil {
		t.Fatal("the retryable failure was not returned")
	}
	if st := statusOf(held); st.Status != ingressapp.StatusInProgress || st.Category != string(persistence.CategoryRetrying) || st.RequestID != "req-held" {
		t.Errorf("after a retryable failure: %+v, want in_progress, retrying, with the consumer's request id", st)
	}
	_, err = client.Do(ctx, &idem.Request{Key: f.scoped(failing), Payload: []byte(ms[1].Body)}, func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{}, idem.Permanent(errors.New("refused for good, for the test"))
	})
	if !idem.IsPermanent(err) {
		t.Fatalf("the permanent failure: %v", err)
	}
	if st := statusOf(failing); st.Status != ingressapp.StatusFailed || st.Redrivable || st.Category != string(persistence.CategoryInvalid) {
		t.Errorf("after a permanent failure: %+v, want failed, invalid", st)
	}
	r := f.post(t, failing, ms[1].Body)
	if st := r.status(t); r.code != http.StatusOK || st.Status != ingressapp.StatusFailed {
		t.Errorf("POST of a failed request: %s, want 200 failed", r)
	}

	// Another producer used the key, with another body, straight on the queue.
	taken := f.key("taken")
	if _, err := client.Do(ctx, &idem.Request{Key: f.scoped(taken), Payload: []byte(ms[2].Body)}, func(context.Context, *idem.Request) (idem.Result, error) {
		return idem.Result{Response: []byte(`{"other":true}`)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "POST of a key the consumer knows", f.post(t, taken, ms[3].Body), http.StatusUnprocessableEntity)

	// A business rule's refusal, through the real consumer: the example's bad messages
	// that a fix can make pass (they decode, so the ingress takes them).
	gen := exampletest.Traffic(t, f.ex)
	run := f.run + "refusal"
	valid := gen.Traffic(f.rng, run, 3, 1)
	f.prepare(t, valid)
	for _, b := range gen.Bad(run, valid) {
		if b.Fix == nil {
			continue
		}
		wantCode(t, "POST of a valid message before it", f.post(t, f.key("before"), valid[0].Body), http.StatusAccepted)
		f.consume(t)
		key := f.key("refused")
		wantCode(t, "POST of a message a business rule refuses", f.post(t, key, b.Body), http.StatusAccepted)
		f.consume(t)
		r := f.get(t, key)
		if st := r.status(t); st.Status != ingressapp.StatusFailed || !st.Redrivable || st.Category != string(persistence.CategoryRefused) || st.RequestID == "" {
			t.Errorf("a business rule's refusal: %+v, want failed, redrivable, refused, with the consumer's request id", st)
		}
		if strings.Contains(string(r.body), b.Reason) {
			t.Errorf("the status of a business rule's refusal shows its raw reason %q: %s", b.Reason, r.body)
		}
		rec := f.consumerRecord(t, f.scoped(key))
		if !strings.Contains(rec.Error, b.Reason) || rec.Category != persistence.CategoryRefused {
			t.Errorf("the consumer's record: error %q, category %q; want the raw reason %q, refused", rec.Error, rec.Category, b.Reason)
		}
		// The reason the example chose to show (the ledger's says the currencies differ,
		// not which), and nothing else.
		if st := r.status(t); st.Reason != rec.Public || (f.ex.Name() == "ledger" && st.Reason == "") {
			t.Errorf("reason %q, want the example's own %q", st.Reason, rec.Public)
		}
		return
	}
	t.Logf("example %s has no bad message a fix makes pass: no business refusal to check", f.ex.Name())
}

// TestStatusInEveryLayout: the ingress reads the consumer's records in the layout the
// template gives every function (issue 26, hole 2: it read them in the default layout
// whatever the template said, so under Powertools' names a completed request lost its
// response and a refused one read completed, and with a sort key every GET answered 503).
func TestStatusInEveryLayout(t *testing.T) {
	for name, params := range map[string]map[string]string{
		"powertools":   {"IdempotencyAttributeNames": "powertools", "IdempotencyPartitionKey": "id"},
		"single table": {"IdempotencySortKey": "SK", "IdempotencyStaticPartitionKey": "IDEMPOTENCY#ingress"},
		"key prefix":   {"IdempotencyKeyPrefix": "req#"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, options{params: params})
			ms := f.traffic(t, 3)
			done, taken := f.key("done"), f.key("taken")
			wantCode(t, "POST", f.post(t, done, ms[0].Body), http.StatusAccepted)
			// Another producer used the key with another body, straight on the queue: the
			// consumer dead-letters the ingress's message as a payload mismatch.
			store, err := persistence.NewDynamoStoreLayout(f.st.DynamoDB, f.cfg.Layout)
			if err != nil {
				t.Fatal(err)
			}
			client, err := idem.New(idem.Config{Store: store, Scope: f.env["IDEMPOTENCY_SCOPE"], Owner: "test"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.Do(context.Background(), &idem.Request{Key: f.scoped(taken), Payload: []byte(ms[1].Body)}, func(context.Context, *idem.Request) (idem.Result, error) {
				return idem.Result{Response: []byte(`{"other":true}`)}, nil
			}); err != nil {
				t.Fatal(err)
			}
			// The ingress reads the consumer's record beside its own: refused at once (422),
			// nothing sent.
			f.calls.Reset()
			wantCode(t, "POST of a key another body took", f.post(t, taken, ms[2].Body), http.StatusUnprocessableEntity)
			// Its retry finds the ingress's released record: refused the same way, not sent.
			wantCode(t, "a retry of that POST", f.post(t, taken, ms[2].Body), http.StatusUnprocessableEntity)
			if n := f.sends(); n != 0 {
				t.Fatalf("a POST of a key another body took, and its retry, sent %d messages, want none", n)
			}
			f.consume(t)
			want := f.consumerRecord(t, f.scoped(done))
			if want.Status != persistence.StatusCompleted || len(want.Response) == 0 {
				t.Fatalf("the consumer's record of the applied request: %+v", want)
			}
			for _, r := range []reply{f.get(t, done), f.post(t, done, ms[0].Body)} {
				st := r.status(t)
				if r.code != http.StatusOK || st.Status != ingressapp.StatusCompleted || !bytes.Equal(st.Response, want.Response) {
					t.Errorf("the applied request: %s; want 200 completed with the stored response %s", r, want.Response)
				}
			}
			r := f.get(t, taken)
			if st := r.status(t); r.code != http.StatusOK || st.Status != ingressapp.StatusFailed || !strings.Contains(st.Reason, "payload mismatch") || st.Response != nil {
				t.Errorf("the request the consumer's record refuses as a payload mismatch: %s", r)
			}
		})
	}
}

// TestStatusWhenKeyedByTheBusinessID: with KEY_SOURCE=field the consumer keys a message
// by the business id in its body. Two requests of one operation under two
// Idempotency-Keys are applied once and both read completed with the one response; the
// operation with another body under a third key reads failed (payload mismatch).
func TestStatusWhenKeyedByTheBusinessID(t *testing.T) {
	f := newFixture(t, options{params: map[string]string{"KeySource": "field"}})
	valid, other := f.otherBody(t)
	k1, k2, k3 := f.key("first"), f.key("fresh-key"), f.key("other-body")
	wantCode(t, "POST", f.post(t, k1, valid.Body), http.StatusAccepted)
	wantCode(t, "POST of the same operation under a fresh key", f.post(t, k2, valid.Body), http.StatusAccepted)
	wantCode(t, "POST of the operation with another body", f.post(t, k3, other.Body), http.StatusAccepted)
	f.consume(t)
	first := f.get(t, k1).status(t)
	if first.Status != ingressapp.StatusCompleted || first.Response == nil {
		t.Fatalf("the first request: %+v, want completed", first)
	}
	f.calls.Reset()
	if st := f.get(t, k2).status(t); st.Status != ingressapp.StatusCompleted || !bytes.Equal(st.Response, first.Response) {
		t.Errorf("the same operation under a fresh key: %+v, want completed with the first response", st)
	}
	if n := f.calls.Ops()["GetItem"]; n != 2 {
		t.Errorf("a status read %d items, want 2: the ingress's record, then the consumer's at the key it names", n)
	}
	if st := f.get(t, k3).status(t); st.Status != ingressapp.StatusFailed || !strings.Contains(st.Reason, "payload mismatch") {
		t.Errorf("the operation with another body: %+v, want failed (payload mismatch)", st)
	}
	out, err := exampletest.Checker(t, f.ex).Read(context.Background(), f.st.DynamoDB, f.st.Lookup)
	if err != nil {
		t.Fatal(err)
	}
	if out.Applied != 1 {
		t.Errorf("%d business effects, want the operation applied once", out.Applied)
	}
}

// otherBody is one of the example's valid messages (its tables prepared) and a message
// with its business id and another body that passes validation (a bad one with no fix);
// it skips the test when the example has none.
func (f *fixture) otherBody(t *testing.T) (example.Message, example.Bad) {
	t.Helper()
	gen := exampletest.Traffic(t, f.ex)
	valid := gen.Traffic(f.rng, f.run, 1, 1)
	f.prepare(t, valid)
	for _, b := range gen.Bad(f.run, valid) {
		if b.ID == valid[0].ID && b.Body != valid[0].Body && b.Fix == nil {
			return valid[0], b
		}
	}
	t.Skipf("example %s has no bad message with a valid one's business id and another body", f.ex.Name())
	return example.Message{}, example.Bad{}
}

// TestKeysThatLookHashed: a key over 128 characters is sent with the deduplication id
// "sha256-<hex>", and that id is itself a valid key. Both requests are accepted and both
// messages delivered: two keys never share a deduplication id, which would have SQS drop
// the second message and leave its request accepted for ever (issue 26, hole 3).
func TestKeysThatLookHashed(t *testing.T) {
	f := newFixture(t, options{})
	ms := f.traffic(t, 2)
	long := f.key(strings.Repeat("x", 140))
	sum := sha256.Sum256([]byte(long))
	lookalike := "sha256-" + hex.EncodeToString(sum[:])
	wantCode(t, "POST of a long key", f.post(t, long, ms[0].Body), http.StatusAccepted)
	wantCode(t, "POST of the key its deduplication id looked like", f.post(t, lookalike, ms[1].Body), http.StatusAccepted)
	msgs := f.inputMessages(t)
	keys := map[string]bool{}
	for _, m := range msgs {
		keys[keyOf(m)] = true
	}
	if !keys[f.scoped(long)] || !keys[f.scoped(lookalike)] {
		t.Fatalf("input queue holds %d messages with keys %v; want both requests' messages", len(msgs), keys)
	}
}

// withNote is body, a JSON object, with one more member "note": note.
func withNote(t *testing.T, body, note string) string {
	t.Helper()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &obj); err != nil {
		t.Fatal(err)
	}
	obj["note"] = json.RawMessage(`"` + note + `"`)
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// withFreeText is an example that also takes a "note" member of free text, which it
// leaves out of what its example decodes.
type withFreeText struct{ example.Example }

func (w withFreeText) Decode(body []byte) (example.Message, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return example.Message{}, err
	}
	delete(obj, "note")
	b, err := json.Marshal(obj)
	if err != nil {
		return example.Message{}, err
	}
	return w.Example.Decode(b)
}

// failFirstSend fails the first SendMessage as a lost connection does.
type failFirstSend struct {
	ingressapp.SQSAPI
	once sync.Once
}

func (f *failFirstSend) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	fail := false
	f.once.Do(func() { fail = true })
	if fail {
		return nil, errors.New("injected: connection reset")
	}
	return f.SQSAPI.SendMessage(ctx, in, o...)
}

// rivalTakeover lets another request take the record over just before this one's
// takeover reaches the table, as two retries of one key racing do.
type rivalTakeover struct {
	ingressapp.DynamoDBAPI
	once sync.Once
}

func (r *rivalTakeover) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if strings.Contains(aws.ToString(in.UpdateExpression), "ADD #att") {
		var err error
		r.once.Do(func() {
			_, err = r.DynamoDBAPI.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: in.TableName, Key: in.Key,
				UpdateExpression: aws.String("SET #tok = :rival"), ExpressionAttributeNames: map[string]string{"#tok": in.ExpressionAttributeNames["#tok"]},
				ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":rival": &ddbtypes.AttributeValueMemberS{Value: "rival"}}})
		})
		if err != nil {
			return nil, err
		}
	}
	return r.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

// TestRetryLosesTheTakeover: a retry of a key whose send failed takes the record over;
// when another request took it first, the retry is answered 409 (the other is sending),
// not 503, and sends nothing.
func TestRetryLosesTheTakeover(t *testing.T) {
	f := newFixture(t, options{
		wrapSQS: func(api ingressapp.SQSAPI) ingressapp.SQSAPI { return &failFirstSend{SQSAPI: api} },
		wrapDDB: func(api ingressapp.DynamoDBAPI) ingressapp.DynamoDBAPI { return &rivalTakeover{DynamoDBAPI: api} },
	})
	m := f.traffic(t, 1)[0]
	key := f.key("raced")
	wantCode(t, "POST whose send fails", f.post(t, key, m.Body), http.StatusServiceUnavailable)
	sends := f.sends()
	wantProblem(t, "the retry that loses the takeover", f.post(t, key, m.Body), http.StatusConflict, "still being accepted")
	if n := f.sends(); n != sends {
		t.Errorf("%d more sends, want none", n-sends)
	}
}

// failConsumerReads fails every read of the consumer's table.
type failConsumerReads struct {
	ingressapp.DynamoDBAPI
	table *string // read at each call: the fixture names the table after it wraps the client
}

func (f *failConsumerReads) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if aws.ToString(in.TableName) == *f.table {
		return nil, errors.New("injected: the consumer's table did not answer")
	}
	return f.DynamoDBAPI.GetItem(ctx, in, o...)
}

// TestReplayWithTheConsumersTableDown: a retry of a queued request whose consumer record
// cannot be read is answered 503, not a status read from nothing; so is a first request,
// which sends nothing: whether the consumer still knows its key is not known.
func TestReplayWithTheConsumersTableDown(t *testing.T) {
	var table string
	f := newFixture(t, options{wrapDDB: func(api ingressapp.DynamoDBAPI) ingressapp.DynamoDBAPI {
		return &failConsumerReads{DynamoDBAPI: api, table: &table}
	}})
	ms := f.traffic(t, 2)
	key := f.key("replayed")
	wantCode(t, "POST", f.post(t, key, ms[0].Body), http.StatusAccepted)
	table = f.env["IDEMPOTENCY_TABLE"]
	f.calls.Reset()
	wantCode(t, "a first POST", f.post(t, f.key("unread"), ms[1].Body), http.StatusServiceUnavailable)
	if n := f.sends(); n != 0 {
		t.Fatalf("a first POST with the consumer's table down sent %d messages, want none", n)
	}
	wantCode(t, "a retry", f.post(t, key, ms[0].Body), http.StatusServiceUnavailable)
	wantCode(t, "GET", f.get(t, key), http.StatusServiceUnavailable)
	// The ingress's own table down: a GET is answered 503, not 404.
	table = f.env["INGRESS_TABLE"]
	wantCode(t, "GET with the ingress's table down", f.get(t, key), http.StatusServiceUnavailable)
}

// TestConsumerCannotKeyTheMessage: with the consumer keying messages by a body field
// the example's bodies do not have, the ingress refuses each POST with 400 and sends
// nothing: the consumer would dead-letter it.
func TestConsumerCannotKeyTheMessage(t *testing.T) {
	f := newFixture(t, options{env: map[string]string{"KEY_SOURCE": "field", "KEY_FIELD": "no_such_field"}})
	m := f.traffic(t, 1)[0]
	wantProblem(t, "POST", f.post(t, f.key("unkeyed"), m.Body), http.StatusBadRequest, "the consumer could not key this message")
	if n := f.sends(); n != 0 {
		t.Errorf("%d sends, want none", n)
	}
}

// lostCreate applies the first conditional put of the ingress's records and loses its
// answer, whatever it was: the put applied on its first attempt (no error), or on an
// attempt the SDK's retry made after moto dropped the connection of the first one (a
// failed condition that returns the put's own record), the ingress never learns it.
type lostCreate struct {
	ingressapp.DynamoDBAPI
	once sync.Once
}

func (l *lostCreate) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := l.DynamoDBAPI.PutItem(ctx, in, o...)
	lost := false
	l.once.Do(func() { lost = true })
	if lost {
		return nil, errors.New("injected: the answer was lost")
	}
	return out, err
}

// retriedCreate makes the first put twice, as the SDK's retry does when moto drops the
// connection of an attempt it applied: the second attempt's condition fails on the record
// the first wrote, and returns it.
type retriedCreate struct {
	ingressapp.DynamoDBAPI
	once sync.Once
}

func (r *retriedCreate) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	again := false
	r.once.Do(func() { again = true })
	out, err := r.DynamoDBAPI.PutItem(ctx, in, o...)
	if again && err == nil {
		return r.DynamoDBAPI.PutItem(ctx, in, o...)
	}
	return out, err
}

// TestCreateWhoseAnswerWasLost: a first request whose record was written but whose answer
// was lost is answered 503; it releases the record at once, so a retry sends the message
// now rather than after the acceptance window. The record is written by the put's first
// attempt, or by the SDK's retry of it (what moto under load does now and then).
func TestCreateWhoseAnswerWasLost(t *testing.T) {
	for name, written := range map[string]func(ingressapp.DynamoDBAPI) ingressapp.DynamoDBAPI{
		"first attempt": func(api ingressapp.DynamoDBAPI) ingressapp.DynamoDBAPI { return api },
		"sdk retry":     func(api ingressapp.DynamoDBAPI) ingressapp.DynamoDBAPI { return &retriedCreate{DynamoDBAPI: api} },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, options{env: map[string]string{"ACCEPT_WINDOW": "30s"},
				wrapDDB: func(api ingressapp.DynamoDBAPI) ingressapp.DynamoDBAPI { return &lostCreate{DynamoDBAPI: written(api)} }})
			m := f.traffic(t, 1)[0]
			key := f.key("lost-create")
			wantCode(t, "POST whose record's answer is lost", f.post(t, key, m.Body), http.StatusServiceUnavailable)
			wantCode(t, "the retry", f.post(t, key, m.Body), http.StatusAccepted)
			if n := f.sends(); n != 1 {
				t.Errorf("%d sends, want 1", n)
			}
		})
	}
}

// TestRetentionFollowsTheConsumersRecord is the hole the simulator counted apart as
// ingress-retention. The ingress's record expires at accept time + TTL, the consumer's at
// its commit + TTL, later. A retry in between must not be taken as a new request (a 202,
// and a message sent again whose status reads accepted once the consumer's record is
// gone): it is answered from the consumer's record, nothing is sent, and the ingress's
// record is made to live as long as the consumer's. A status read in between, with the
// ingress's record gone, also answers from the consumer's record.
func TestRetentionFollowsTheConsumersRecord(t *testing.T) {
	f := newFixture(t, options{})
	m, key, rec, pk := f.completedRequest(t, "retained")
	ingressKey := map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: pk}}
	// The ingress's record expired (DynamoDB has not deleted it yet), the consumer's lives.
	f.expireItem(t, f.env["INGRESS_TABLE"], "pk", pk, time.Minute)
	f.retryAnsweredFrom(t, "a retry after the ingress's record expired", key, m.Body, rec)
	item := f.ingressItem(t, key)
	if exp, ok := item["expires_at"].(*ddbtypes.AttributeValueMemberN); !ok || exp.Value != fmt.Sprint(rec.ExpiresAt.Unix()) ||
		item["state"].(*ddbtypes.AttributeValueMemberS).Value != "QUEUED" {
		t.Fatalf("the ingress's record after the retry: %v %v, want QUEUED until the consumer's record ends (%d), not a TTL from now", item["expires_at"], item["state"], rec.ExpiresAt.Unix())
	}
	// Gone altogether (TTL deleted it): the status still comes from the consumer's record.
	if _, err := f.st.DynamoDB.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(f.env["INGRESS_TABLE"]), Key: ingressKey}); err != nil {
		t.Fatal(err)
	}
	r := f.get(t, key)
	if st := r.status(t); r.code != http.StatusOK || st.Status != ingressapp.StatusCompleted {
		t.Fatalf("GET with the ingress's record deleted: %s, want 200 completed from the consumer's record", r)
	}
}

// TestConsumersRecordOutlivesItsExpiryByTheGrace: a retry after the ingress's record
// expired, whose consumer's record expired a moment ago by the ingress's clock, sends
// nothing: a consumer whose clock is behind (by up to LEASE_GRACE, RELIABILITY.md) still
// finds that record live and would answer the message "duplicate", writing nothing, and
// the new request would read accepted for a whole TTL (the simulator's seed 37135). Past
// the grace, the retry is a new request, sent.
func TestConsumersRecordOutlivesItsExpiryByTheGrace(t *testing.T) {
	f := newFixture(t, options{env: map[string]string{"LEASE_GRACE": "30s"}})
	m, key, rec, pk := f.completedRequest(t, "skewed")
	f.expireItem(t, f.env["INGRESS_TABLE"], "pk", pk, time.Hour)
	f.expireItem(t, f.cfg.Layout.Table, f.cfg.Layout.PartitionKey, pk, 10*time.Second) // inside the grace
	f.retryAnsweredFrom(t, "a retry 10 s after the consumer's record expired", key, m.Body, rec)
	f.expireItem(t, f.cfg.Layout.Table, f.cfg.Layout.PartitionKey, pk, time.Minute) // past the grace
	f.expireItem(t, f.env["INGRESS_TABLE"], "pk", pk, time.Minute)
	f.calls.Reset()
	wantCode(t, "a retry past the grace", f.post(t, key, m.Body), http.StatusAccepted)
	if n := f.sends(); n != 1 {
		t.Fatalf("the retry past the grace sent %d messages, want 1", n)
	}
}

// completedRequest posts a request under a key named name and has the consumer complete
// it: the message posted, the client's key, the consumer's record and its partition key
// (the ingress's record has the same).
func (f *fixture) completedRequest(t *testing.T, name string) (m example.Message, key string, rec *persistence.Record, pk string) {
	t.Helper()
	m = f.traffic(t, 1)[0]
	key = f.key(name)
	wantCode(t, "first POST", f.post(t, key, m.Body), http.StatusAccepted)
	f.consumeWith(t, nil)
	scoped := f.scoped(key)
	rec = f.consumerRecord(t, scoped)
	if rec.Status != persistence.StatusCompleted {
		t.Fatalf("the consumer's record: %+v, want COMPLETED", rec)
	}
	pk, err := idem.RecordKey(f.env["IDEMPOTENCY_SCOPE"], scoped, false)
	if err != nil {
		t.Fatal(err)
	}
	return m, key, rec, pk
}

// expireItem sets the expires_at of table's item whose partition key attr is pk to by
// ago: expired, and not yet deleted (DynamoDB's TTL deletes late).
func (f *fixture) expireItem(t *testing.T, table, attr, pk string, by time.Duration) {
	t.Helper()
	if _, err := f.st.DynamoDB.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: aws.String(table), Key: map[string]ddbtypes.AttributeValue{attr: &ddbtypes.AttributeValueMemberS{Value: pk}},
		UpdateExpression:          aws.String("SET expires_at = :past"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":past": &ddbtypes.AttributeValueMemberN{Value: fmt.Sprint(time.Now().Add(-by).Unix())}},
	}); err != nil {
		t.Fatal(err)
	}
}

// retryAnsweredFrom posts body under key again and fails the test unless it is answered
// from the consumer's record rec (200 completed, its response) and sends nothing.
func (f *fixture) retryAnsweredFrom(t *testing.T, what, key, body string, rec *persistence.Record) {
	t.Helper()
	f.calls.Reset()
	r := f.post(t, key, body)
	if st := r.status(t); r.code != http.StatusOK || st.Status != ingressapp.StatusCompleted || !bytes.Equal(st.Response, rec.Response) {
		t.Fatalf("%s: %s, want 200 completed from the consumer's record", what, r)
	}
	if n := f.sends(); n != 0 {
		t.Fatalf("%s: %d messages sent, want none", what, n)
	}
}

// TestStatusOfARequestRefusedForAnotherBodysEffect is the simulator's seed 55031. A
// request's message is refused by the guard of its business id, which holds another
// body's effect (sent under another key): the consumer completes the request's key for
// that other body (docs/behaviour.md) and dead-letters the message. With the ingress's
// own record gone (expired, say, while the message sat in the DLQ), the status read
// only the consumer's record, compared it with itself and said completed, though the
// request was never applied: it must say failed.
func TestStatusOfARequestRefusedForAnotherBodysEffect(t *testing.T) {
	f := newFixture(t, options{})
	valid, other := f.otherBody(t)
	applied, refused := f.key("applied"), f.key("refused")
	wantCode(t, "POST", f.post(t, applied, valid.Body), http.StatusAccepted)
	f.consume(t)
	wantCode(t, "POST of the business id with another body under another key", f.post(t, refused, other.Body), http.StatusAccepted)
	f.consume(t)
	if st := f.get(t, refused).status(t); st.Status != ingressapp.StatusFailed {
		t.Fatalf("the refused request: %+v, want failed", st)
	}
	pk, err := idem.RecordKey(f.env["IDEMPOTENCY_SCOPE"], f.scoped(refused), false)
	if err != nil {
		t.Fatal(err)
	}
	expire := func() { // the ingress's record of the refused key, as its TTL does
		t.Helper()
		if _, err := f.st.DynamoDB.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(f.env["INGRESS_TABLE"]),
			Key: map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: pk}}}); err != nil {
			t.Fatal(err)
		}
	}
	expire()
	if rec := f.consumerRecord(t, f.scoped(refused)); rec.Status != persistence.StatusCompleted {
		t.Fatalf("the consumer's record of the refused key: %+v, want COMPLETED for the applied body", rec)
	}
	r := f.get(t, refused)
	if st := r.status(t); r.code != http.StatusOK || st.Status != ingressapp.StatusFailed || st.Category != string(persistence.CategoryInvalid) {
		t.Fatalf("GET of the refused request with the ingress's record gone: %s, want 200 failed (invalid): it was never applied", r)
	}
	if st := f.get(t, applied).status(t); st.Status != ingressapp.StatusCompleted {
		t.Errorf("the applied request: %+v, want completed", st)
	}
	// The simulator's seed 397476: a retry of the refused request, its POST, must get the
	// same answer, not 422 as if the key had been used with another body. The consumer's
	// record keeps the refused body's fingerprint (Record.RefusedHash).
	r = f.post(t, refused, other.Body)
	if st := r.status(t); r.code != http.StatusOK || st.Status != ingressapp.StatusFailed || st.Category != string(persistence.CategoryInvalid) {
		t.Fatalf("POST of the refused request again with the ingress's record gone: %s, want 200 failed (invalid)", r)
	}
	// A third body under the refused key is another request: 422.
	expire()
	third := f.traffic(t, 1)[0]
	wantCode(t, "POST of a third body under the refused key", f.post(t, refused, third.Body), http.StatusUnprocessableEntity)
}

// garbledConsumerKey is a DynamoDB client whose reads of the ingress's records give a
// consumer key that is not UTF-8 (no POST stores one).
type garbledConsumerKey struct {
	ingressapp.DynamoDBAPI
	table string
}

func (g *garbledConsumerKey) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := g.DynamoDBAPI.GetItem(ctx, in, o...)
	if err == nil && aws.ToString(in.TableName) == g.table && out.Item != nil {
		if _, ok := out.Item["consumer_key"]; ok {
			out.Item["consumer_key"] = &ddbtypes.AttributeValueMemberS{Value: "\xff"}
		}
	}
	return out, err
}

// TestStatusOfARecordWithAnUnreadableConsumerKey: a status whose stored consumer key does
// not make a record key falls back on the ingress's own record key, and is answered.
func TestStatusOfARecordWithAnUnreadableConsumerKey(t *testing.T) {
	g := &garbledConsumerKey{}
	f := newFixture(t, options{wrapDDB: func(api ingressapp.DynamoDBAPI) ingressapp.DynamoDBAPI { g.DynamoDBAPI = api; return g }})
	g.table = f.env["INGRESS_TABLE"]
	m := f.traffic(t, 1)[0]
	key := f.key("garbled")
	wantCode(t, "POST", f.retry(t, key, m.Body), http.StatusAccepted)
	wantCode(t, "GET", f.get(t, key), http.StatusOK)
}

// TestRequestWithoutTheKeyField: with KEY_SOURCE=field, a body that lacks the field is
// refused with 400, and the answer says which field is missing.
func TestRequestWithoutTheKeyField(t *testing.T) {
	f := newFixture(t, options{env: map[string]string{"KEY_SOURCE": "field", "KEY_FIELD": "no_such_field"}})
	m := f.traffic(t, 1)[0]
	wantProblem(t, "POST", f.post(t, f.key("unkeyed"), m.Body), http.StatusBadRequest, "no JSON field")
}

// refusedPut is a DynamoDB client whose writes of the ingress's records fail without
// being applied, and, when releaseFails, whose release of the lost write fails too.
type refusedPut struct {
	ingressapp.DynamoDBAPI
	table        *string
	releaseFails bool
}

func (r *refusedPut) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if aws.ToString(in.TableName) == *r.table {
		return nil, errors.New("injected: the put failed")
	}
	return r.DynamoDBAPI.PutItem(ctx, in, o...)
}

func (r *refusedPut) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if r.releaseFails && aws.ToString(in.TableName) == *r.table {
		return nil, errors.New("injected: the release failed")
	}
	return r.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

// TestCreateFailedLogsTheReleaseOnlyWhenItFailed: a POST whose record could not be
// written is answered 503, after releasing what the write may have taken. The log line
// holds the release's own failure, and not a release that found nothing to release (the
// write was not applied).
func TestCreateFailedLogsTheReleaseOnlyWhenItFailed(t *testing.T) {
	for _, releaseFails := range []bool{false, true} {
		var table string
		f := newFixture(t, options{wrapDDB: func(api ingressapp.DynamoDBAPI) ingressapp.DynamoDBAPI {
			return &refusedPut{DynamoDBAPI: api, table: &table, releaseFails: releaseFails}
		}})
		table = f.env["INGRESS_TABLE"]
		m := f.traffic(t, 1)[0]
		wantCode(t, "POST", f.post(t, f.key("refused"), m.Body), http.StatusServiceUnavailable)
		logs := f.logs.String()
		if !strings.Contains(logs, "the put failed") || releaseFails != strings.Contains(logs, "the release failed") {
			t.Errorf("release fails %v: the log line:\n%s", releaseFails, logs)
		}
		if strings.Contains(logs, ingressapp.ErrChanged.Error()) {
			t.Errorf("release fails %v: a release that found nothing to release is logged:\n%s", releaseFails, logs)
		}
	}
}

// quietSpan is a caller's span that is not recording, yet keeps what it is given.
type quietSpan struct {
	noop.Span
	attrs  []attribute.KeyValue
	name   string
	status codes.Code
}

func (*quietSpan) IsRecording() bool                        { return false }
func (s *quietSpan) SetAttributes(kv ...attribute.KeyValue) { s.attrs = append(s.attrs, kv...) }
func (s *quietSpan) SetName(name string)                    { s.name = name }
func (s *quietSpan) SetStatus(code codes.Code, _ string)    { s.status = code }

// TestIngressWritesNothingToASpanThatIsNotRecording: an ingress without a tracer, called
// under a span of the caller's that says it does not record, writes nothing to it:
// neither the request's records, nor its route, nor its answer.
func TestIngressWritesNothingToASpanThatIsNotRecording(t *testing.T) {
	f := newFixture(t, options{})
	m := f.traffic(t, 1)[0]
	app := f.direct(t, f.cfg)
	span := &quietSpan{}
	resp, err := app.Handler()(trace.ContextWithSpan(context.Background(), span), postEvent(f.key("quiet"), m.Body))
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST: %d %v, want 202", resp.StatusCode, err)
	}
	if len(span.attrs) != 0 || span.name != "" || span.status != codes.Unset {
		t.Errorf("a span that is not recording was given %v, the name %q, the status %v", span.attrs, span.name, span.status)
	}
}
