package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// The ingress in front of the first consumer: the real ingressapp, over the simulated
// DynamoDB and SQS, invoked as a function URL invokes it (an AWS_IAM caller, payload
// format 2.0), in environments of its own whose clocks drift like the consumers'. Its
// clients are HTTP clients as docs/ingress.md describes them: a POST with an
// Idempotency-Key, retried with the same key and body on 409, 503 and a crashed
// invocation (502) after Retry-After; a GET of the status after a 202; and, once the
// world has settled, a last GET of every request the ingress took.
//
// What the oracle checks of the answers: a status that says completed is said of a
// request whose operation was applied, with this request's body, and carries the first
// response any answer gave for the key, byte for byte; a 422 answers only a key used
// before with another body; and at the end, every request answered 202 reads as
// completed if its operation was applied, failed if it was dead-lettered, and is one or
// the other (no request the ingress took stays undelivered).

// ingressTimeout is the ingress function's timeout (template.yaml), and its
// ACCEPT_WINDOW.
const ingressTimeout = 10 * time.Second

// postTries bounds how often a client POSTs one request before it gives up.
const postTries = 8

// ingressSide is the ingress's environments and its clients' state.
type ingressSide struct {
	cfg       ingressapp.Config
	envs      []*ingressEnv              // warm environments
	waiting   int                        // client requests in flight or waiting to retry
	keyBodies map[string]map[string]bool // the bodies POSTed under each key
	firstResp map[string][]byte
	firstAt   map[string]time.Time
	taken     map[*op]time.Time   // operations the ingress answered 202 or 200, since when (at the latest its record's creation)
	posts     map[*op][]time.Time // when each operation's POSTs were made, all its sends', in order
	takenKey  map[*op]string      // and under which of the client's keys
	renewed   map[*op]bool        // taken again past the records' retention: a new execution by contract
	finals    map[*op]*ingressapp.Status
	finalCode map[*op]int
	finalGone map[*op]bool // the ingress's record of the key had ended, by its clock, when the last GET was answered
	// statusChecked: the final status was judged when it was read (checkStatus), before
	// the late redrive (late.go).
	statusChecked bool
}

type ingressEnv struct {
	handler ingressapp.Handler
	clock   func() time.Time // the environment's clock, drifted when the configuration says
	busy    bool
}

// httpCall is one HTTP request of a client.
type httpCall struct {
	o      *op
	s      send
	method string
	tries  int
	final  bool
	// goneAtStart: for a final GET, the ingress's record of the key had ended (by the
	// ingress's clock) when the GET started; a POST running beside it may take the key
	// again before the GET answers.
	goneAtStart bool
	env         *ingressEnv
	resp        ingressapp.LambdaFunctionURLResponse
}

func (in *ingressSide) busy() bool { return in.waiting > 0 }

// simExample is the simulation's message type as the ingress sees it: its Decode is the
// handler's validation, and its FIFO group the account.
type simExample struct{}

func (simExample) Name() string { return "sim" }

func (simExample) Decode(raw []byte) (example.Message, error) {
	b, err := decodeBody(raw)
	if err != nil {
		return example.Message{}, fmt.Errorf("%w: %w", example.ErrInvalid, err)
	}
	return example.Message{ID: b.ID, Group: b.Acct, Body: string(raw)}, nil
}

func (simExample) NewHandler(example.Deps) (idem.Handler, error) {
	return nil, errors.New("sim: the ingress builds no handler")
}

func (simExample) Template() []byte { return nil }

// simCallers are the IAM identities the ingress's clients sign as: a user, and a role
// whose sessions a client renews (each request a session of its own, as
// ingressapp.Principal tells one caller from another), both of one account.
var simCallers = []ingressapp.IAMCaller{
	{AccessKey: "AKIDSIM", AccountID: "000000000000", CallerID: "AIDASIMCALLER", UserARN: "arn:aws:iam::000000000000:user/sim", UserID: "AIDASIMCALLER"},
	{AccessKey: "ASIASIM", AccountID: "000000000000", CallerID: "AROASIMROLE:s", UserARN: "arn:aws:sts::000000000000:assumed-role/sim-client/s", UserID: "AROASIMROLE:s"},
}

// callerIdentity is the identity a request of o is signed with: its caller's, under a
// session of the request's own when it is the role.
func callerIdentity(o *op, session int) *ingressapp.IAMCaller {
	c := simCallers[o.caller]
	if strings.Contains(c.UserARN, "assumed-role/") {
		s := fmt.Sprintf("session-%d", session)
		c.UserARN = strings.TrimSuffix(c.UserARN, "/s") + "/" + s
		c.CallerID = strings.TrimSuffix(c.CallerID, ":s") + ":" + s
		c.UserID = c.CallerID
	}
	return &c
}

// callerKey is the key the ingress keeps and sends o's request under: idem.CallerKey of
// its caller's namespace under the drawn key scope and the client's key (what
// ingressapp does; the oracle's own copy of it, so that a change there shows here).
func (sc *scenario) callerKey(o *op, key string) string {
	ns, ok := ingressapp.Namespace(sc.cfg.keyScope, callerIdentity(o, 0))
	if !ok {
		return ""
	}
	return idem.CallerKey(ns, key)
}

// newIngress configures the ingress for the first consumer, as the template does.
func (w *world) newIngress() error {
	a := w.sc.consumers[0]
	cfg := ingressapp.Config{
		Example: simExample{}, Scope: a.scope, IdempotencyTable: a.layout.Table, Layout: a.layout, KeyRule: w.sc.keyRule(), IngressTable: ingressTable,
		QueueURL: a.inputURL, TTL: w.sc.ttl, AcceptWindow: ingressTimeout, LeaseGrace: a.grace, MaxBodyBytes: ingressapp.DefaultMaxBodyBytes,
		RequireIAMCaller: true, MetricsNamespace: "Sim", Keys: stackKeys, KeyScope: w.sc.cfg.keyScope,
	}
	if err := cfg.Check(); err != nil {
		return fmt.Errorf("the ingress's configuration: %w", err)
	}
	w.ingress = &ingressSide{cfg: cfg, keyBodies: map[string]map[string]bool{}, firstResp: map[string][]byte{}, firstAt: map[string]time.Time{},
		taken: map[*op]time.Time{}, posts: map[*op][]time.Time{}, takenKey: map[*op]string{}, renewed: map[*op]bool{}, finals: map[*op]*ingressapp.Status{}, finalCode: map[*op]int{}, finalGone: map[*op]bool{}}
	return nil
}

// env returns a free warm environment of the ingress, or starts one.
func (w *world) ingressEnv() (*ingressEnv, error) {
	for _, e := range w.ingress.envs {
		if !e.busy {
			return e, nil
		}
	}
	clock := w.newClock()
	app, err := ingressapp.New(w.ingress.cfg, ingressapp.Deps{DynamoDB: ddbAPI{w}, SQS: sqsAPI{w}, Logs: w.trace.logs(), Metrics: io.Discard, Clock: clock})
	if err != nil {
		return nil, err
	}
	e := &ingressEnv{handler: app.Handler(), clock: clock}
	w.ingress.envs = append(w.ingress.envs, e)
	return e, nil
}

// clientPost is an HTTP client's first POST of a request.
func (w *world) clientPost(o *op, s send) {
	w.ingress.waiting++
	w.httpInvoke(&httpCall{o: o, s: s, method: http.MethodPost})
}

// httpInvoke invokes the ingress with one request.
func (w *world) httpInvoke(hc *httpCall) {
	env, err := w.ingressEnv()
	if err != nil {
		w.obs.violation("init", "the ingress's init failed: %v", err)
		w.ingress.waiting--
		return
	}
	env.busy, hc.env = true, env
	hc.tries++
	if hc.final {
		hc.goneAtStart = !w.ingressRecordLive(hc.o, env.clock())
	}
	if hc.method == http.MethodPost {
		w.ingress.posts[hc.o] = append(w.ingress.posts[hc.o], time.Now())
	}
	w.obs.stats.HTTPRequests++
	w.invSeq++
	inv := &invocation{id: w.invSeq, kind: "ingress", c: w.sc.consumers[0], http: hc, deadline: time.Now().Add(ingressTimeout)}
	ev := events.LambdaFunctionURLRequest{
		Version: "2.0", RawPath: ingressapp.RequestsPath,
		Headers: map[string]string{"content-type": "application/json"},
		RequestContext: events.LambdaFunctionURLRequestContext{
			AccountID: "000000000000", RequestID: inv.String(), APIID: "sim", DomainName: "sim.lambda-url.us-east-1.on.aws",
			TimeEpoch:  time.Now().UnixMilli(),
			HTTP:       events.LambdaFunctionURLRequestContextHTTPDescription{Method: hc.method, Protocol: "HTTP/1.1", SourceIP: "10.0.0.1"},
			Authorizer: &events.LambdaFunctionURLRequestContextAuthorizerDescription{IAM: callerIdentity(hc.o, w.invSeq)},
		},
	}
	if hc.method == http.MethodPost {
		ev.Headers["idempotency-key"] = hc.s.key
		ev.Body = hc.o.body
		ck := w.sc.callerKey(hc.o, hc.s.key)
		if w.ingress.keyBodies[ck] == nil {
			w.ingress.keyBodies[ck] = map[string]bool{}
		}
		w.ingress.keyBodies[ck][hc.o.body] = true
	} else {
		ev.RawPath = ingressapp.RequestsPath + "/" + url.PathEscape(hc.s.key)
	}
	ev.RequestContext.HTTP.Path = ev.RawPath
	h := env.handler
	w.launch(inv, func(ctx context.Context) func() {
		resp, _ := h(ctx, ev)
		return func() { hc.resp = resp }
	})
}

// ingressKilled: the function URL answers 502 for an invocation that crashed or timed
// out; its environment is gone; the client retries a POST.
func (w *world) ingressKilled(inv *invocation) {
	hc := inv.http
	w.ingress.envs = deleteEnv(w.ingress.envs, hc.env)
	w.tracef("client %s %s of %s: 502 (the ingress's invocation died)", hc.method, shortID(hc.s.key), hc.o.name)
	w.clientRetry(hc, time.Second)
}

func deleteEnv(envs []*ingressEnv, e *ingressEnv) []*ingressEnv {
	for i, x := range envs {
		if x == e {
			return append(envs[:i], envs[i+1:]...)
		}
	}
	return envs
}

// ingressDone is an answer reaching its client.
func (w *world) ingressDone(inv *invocation) {
	hc := inv.http
	hc.env.busy = false
	code := hc.resp.StatusCode
	var st *ingressapp.Status
	if hc.resp.Headers["Content-Type"] == "application/json" {
		st = &ingressapp.Status{}
		if err := json.Unmarshal([]byte(hc.resp.Body), st); err != nil {
			w.obs.violation("status", "%s of %s: unreadable status body: %v", hc.method, hc.o.name, err)
			st = nil
		}
	}
	state := ""
	if st != nil {
		state = " " + st.Status
	}
	w.tracef("client %s %s of %s (%s): %d%s", hc.method, shortID(hc.s.key), hc.o.name, hc.s.why, code, state)
	if st != nil && (code == http.StatusOK || code == http.StatusAccepted) {
		w.statusAnswer(hc.o, w.sc.callerKey(hc.o, hc.s.key), st)
	}
	if hc.final {
		// Ended or not by the clock the ingress read it by, which may run ahead of the
		// true one (docs/ingress.md: 404 once it expired): judged when the GET started
		// and once it answered, since the GET read it in between (long run seed 79526: a
		// POST beside the GET took the key again after the GET found its record ended).
		w.ingress.finalGone[hc.o] = hc.goneAtStart || !w.ingressRecordLive(hc.o, hc.env.clock())
		w.ingress.finals[hc.o], w.ingress.finalCode[hc.o] = st, code
		w.ingress.waiting--
		return
	}
	switch {
	case hc.method == http.MethodGet:
		w.ingress.waiting--
	case code == http.StatusAccepted || code == http.StatusOK:
		w.obs.accepted[hc.o] = true
		at, ok := w.ingress.taken[hc.o]
		renew := ok && time.Since(at) > w.sc.ttl-10*time.Minute
		if renew {
			w.ingress.renewed[hc.o] = true // taken again after its records expired
		}
		// Since when: its record may have been created by any earlier POST of the
		// operation (a try whose answer was a 503 or lost), so the first one's time;
		// taken again past the retention, the first POST that may have found the old
		// record gone. Too early a time only spares the request the last GET; too late
		// a one would take an expired record for a lost request.
		switch {
		case !ok:
			w.ingress.taken[hc.o], w.ingress.takenKey[hc.o] = w.ingress.posts[hc.o][0], hc.s.key
		case renew:
			from := at.Add(w.sc.ttl - 10*time.Minute)
			i, _ := slices.BinarySearchFunc(w.ingress.posts[hc.o], from, time.Time.Compare)
			w.ingress.taken[hc.o], w.ingress.takenKey[hc.o] = w.ingress.posts[hc.o][i], hc.s.key
		}
		// Poll the status once, a little later: the POST is done, its GET to come.
		get := &httpCall{o: hc.o, s: hc.s, method: http.MethodGet}
		w.at(time.Now().Add(dur(w.rng, 2*time.Second, time.Minute)), func() { w.httpInvoke(get) })
	case code == http.StatusConflict || code == http.StatusServiceUnavailable:
		retry, _ := strconv.Atoi(hc.resp.Headers["Retry-After"])
		w.clientRetry(hc, time.Duration(max(retry, 1))*time.Second)
	case code == http.StatusUnprocessableEntity:
		if len(w.ingress.keyBodies[w.sc.callerKey(hc.o, hc.s.key)]) < 2 && !w.consumerHoldsOther(hc.o, hc.s.key) {
			w.obs.violation("status", "POST of %s under key %s answered 422 (the key used with another body), though it never was", hc.o.name, shortID(hc.s.key))
		}
		w.ingress.waiting--
	default: // 400: the client gives up (a key past the limit, say)
		w.ingress.waiting--
	}
}

// clientRetry sends a POST again after wait (and a little jitter), or gives up after
// postTries; a GET is not retried.
func (w *world) clientRetry(hc *httpCall, wait time.Duration) {
	if hc.method != http.MethodPost || hc.final || hc.tries >= postTries {
		w.ingress.waiting--
		return
	}
	w.at(time.Now().Add(wait+time.Duration(w.rng.IntN(2000))*time.Millisecond), func() { w.httpInvoke(hc) })
}

// statusAnswer checks a status an answer gave for o's request under key.
func (w *world) statusAnswer(o *op, key string, st *ingressapp.Status) {
	if st.Status != ingressapp.StatusCompleted {
		return
	}
	if w.obs.applied[o] == 0 {
		w.obs.violation("status", "the status of %s (key %s) says completed, but its operation was not applied", o.name, shortID(key))
	}
	var r response
	if err := json.Unmarshal(st.Response, &r); err == nil {
		if l, ok := w.obs.runs[r.Run]; ok && l.amt != o.amt {
			w.obs.violation("status", "the status of %s (key %s) says completed with the effect of another body (%d, not %d)", o.name, shortID(key), l.amt, o.amt)
		}
	}
	in := w.ingress
	if first, ok := in.firstResp[key]; ok && time.Since(in.firstAt[key]) < w.sc.ttl-10*time.Minute {
		if !bytes.Equal(first, st.Response) {
			w.obs.violation("response", "key %s: a duplicate was answered %s, not the first response %s", shortID(key), st.Response, first)
		}
		return
	}
	// The first response, and when its record was written (its run's commit, or the
	// guarded completion, a moment before now): a response older than the TTL may be
	// replaced by a new execution's.
	at := time.Now()
	if l, ok := w.obs.runs[r.Run]; ok {
		at = l.at
	} else if r.At > 0 {
		// A run that committed no effect (a guarded completion): the response's own
		// time, when its handler made it.
		at = time.UnixMilli(r.At)
	}
	in.firstResp[key], in.firstAt[key] = append([]byte(nil), st.Response...), at
}

// finalStatus is every client's last GET, once the world has settled: of each request
// the ingress took within the records' retention.
func (w *world) finalStatus() {
	if w.ingress == nil {
		return
	}
	for _, o := range w.ops {
		at, ok := w.ingress.taken[o]
		if !ok || time.Since(at) > w.sc.ttl-10*time.Minute {
			continue
		}
		key := w.ingress.takenKey[o]
		w.ingress.waiting++
		w.httpInvoke(&httpCall{o: o, s: send{key: key, why: "final status"}, method: http.MethodGet, final: true})
	}
	w.settle(10*time.Minute, true)
}

// checkStatus: what the last GETs said.
func (w *world) checkStatus(reasons map[*op][]string) {
	if w.ingress == nil {
		return
	}
	for _, o := range w.ops {
		code, asked := w.ingress.finalCode[o]
		if !asked {
			continue
		}
		st := w.ingress.finals[o]
		applied, dead := w.obs.applied[o] > 0, len(reasons[o]) > 0
		got := fmt.Sprint(code)
		if st != nil {
			got += " " + st.Status
		}
		// A twin sent under its original's key reads failed, as a payload mismatch,
		// whether its message reached the consumer or SQS dropped it as a duplicate of the
		// original's (the key's deduplication id).
		twin := o.kind == kindTwin && o.key == o.twinOf.key
		// Taken a retention after the operation was first sent: a new execution by
		// contract, which may be refused where the first was applied.
		renewed := w.ingress.taken[o].Sub(w.start.Add(o.sends[0].at)) > w.sc.ttl-10*time.Minute
		// Parked past its service's key window (docs/behaviour.md,
		// "Steps and their outside services"): that request failed for good and its record
		// says so; the same operation sent since under another key is another request, and
		// may have been applied.
		parked := slices.ContainsFunc(reasons[o], func(r string) bool { return strings.Contains(r, idem.ErrPastKeyWindow.Error()) })
		switch {
		case !applied && !dead && !twin:
			w.obs.violation("status", "%s was answered 202 by the ingress, but it was neither applied nor dead-lettered (its status: %s)", o.name, got)
		case code == http.StatusNotFound && (applied || dead) && w.ingress.finalGone[o]:
			// The ingress's record ended (docs/ingress.md: 404 once it expired), after its
			// request was applied or dead-lettered: taken again past the retention, a
			// request may have been answered from the consumer's record, whose end its
			// own record then took.
		case code != http.StatusOK || st == nil:
			w.obs.violation("status", "the last GET of %s answered %s once the world had settled", o.name, got)
		case renewed && (st.Status == ingressapp.StatusCompleted || st.Status == ingressapp.StatusFailed):
		case parked && st.Status == ingressapp.StatusFailed:
		case applied && st.Status != ingressapp.StatusCompleted:
			w.obs.violation("status", "%s was applied, but its status says %s", o.name, got)
		case !applied && w.sc.mode == idem.ModeSingleTransaction && st.Status == ingressapp.StatusAccepted:
			// docs/ingress.md: in the single-transaction mode a business rule's refusal
			// stores nothing, and the request stays accepted while its message is in the
			// DLQ.
		case !applied && st.Status != ingressapp.StatusFailed:
			w.obs.violation("status", "%s was dead-lettered, but its status says %s", o.name, got)
		}
	}
}

// ingressRecordLive reports whether the ingress's table holds a record of the key under
// which it took o that is live at now.
func (w *world) ingressRecordLive(o *op, now time.Time) bool {
	pk, err := idem.RecordKey(w.sc.consumers[0].scope, w.sc.callerKey(o, w.ingress.takenKey[o]), false)
	if err != nil {
		return false
	}
	items, _ := w.db.Items(ingressTable)
	for _, it := range items {
		if strAttr(it, "pk") == pk {
			return numAttr(it, "expires_at") >= now.Unix()
		}
	}
	return false
}

// consumerHoldsOther reports whether the first consumer's live record of the key o's
// request under the client's key is consumed by holds another body, by the rule the
// ingress follows (persistence.Record.HoldsAnother): the ingress refuses such a request
// (422) instead of sending it (docs/ingress.md). A record completed for another body
// that refused o's holds no other for o: a retry of o is answered as refused, not 422.
func (w *world) consumerHoldsOther(o *op, key string) bool {
	rec := w.consumerRecordUnder(o, key)
	if rec == nil {
		return false
	}
	hash, err := idem.HashPayload([]byte(o.body))
	return err == nil && rec.HoldsAnother(hash)
}

// consumerRecordUnder is the first consumer's record of o's request under the client's
// key, nil when there is none or it expired.
func (w *world) consumerRecordUnder(o *op, clientKey string) *persistence.Record {
	a := w.sc.consumers[0]
	key := w.sc.callerKey(o, clientKey)
	if w.sc.keySource == idem.KeyFromField {
		key = o.id
	}
	rk, err := idem.RecordKey(a.scope, key, false)
	if err != nil {
		return nil
	}
	rec := w.record(a, rk)
	if rec == nil || !rec.ExpiresAt.IsZero() && rec.ExpiresAt.Before(time.Now()) {
		return nil
	}
	return rec
}
