package ingressapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/emf"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/idem/telemetry"
	"github.com/idemgo/sqs-lambda-consumer/internal/syncw"
)

// SQSAPI is the SQS call the ingress makes: one SendMessage per accepted request.
// *sqs.Client satisfies it.
type SQSAPI = sqsmsg.SQSSender

// Deps are the ingress's outside connections. Logs and Metrics default to os.Stdout,
// where Lambda sends both to CloudWatch Logs (metrics as EMF lines).
type Deps struct {
	DynamoDB DynamoDBAPI
	SQS      SQSAPI
	Logs     io.Writer
	Metrics  io.Writer
	Clock    func() time.Time // default time.Now
	// Tracer, when set, traces each request (trace.go); nil: no tracing.
	Tracer trace.TracerProvider
}

// Metric names of the ingress (namespace METRICS_NAMESPACE, dimension Service=ingress).
const (
	MetricAccepted    = "Accepted"    // first requests answered 202: their message sent
	MetricReplayed    = "Replayed"    // requests of a queued key answered from its records
	MetricConflict    = "Conflict"    // 409: the key's first request is still being accepted
	MetricMismatch    = "Mismatch"    // 422: the key was used with another body
	MetricRejected    = "Rejected"    // 400, 403, 404 (no such route), 405
	MetricUnavailable = "Unavailable" // 503: a store or queue failure
	MetricStatusRead  = "StatusRead"  // GET answered with a status
	MetricNotFound    = "NotFound"    // GET of a key with no accepted request
	MetricSent        = "Sent"        // SendMessage calls SQS accepted
	MetricDuration    = "IngressDuration"
)

// Handler is the function's Lambda handler: a function URL event in (payload format
// 2.0, which API Gateway HTTP APIs also send), its HTTP answer out.
type Handler func(ctx context.Context, req LambdaFunctionURLRequest) (LambdaFunctionURLResponse, error)

// App is the ingress: build it once per process.
type App struct {
	cfg      Config
	store    *store
	consumer *persistence.DynamoStore
	sqs      SQSAPI
	clock    func() time.Time
	log      *slog.Logger
	metrics  *emf.Metrics
	tracer   trace.TracerProvider
}

// New builds the ingress from its configuration and connections.
func New(cfg Config, d Deps) (*App, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if d.DynamoDB == nil || d.SQS == nil {
		return nil, errors.New("ingress: DynamoDB and SQS clients are required")
	}
	if cfg.Keys == nil {
		return nil, errors.New("ingress: no stack secret (Config.Keys: STACK_SECRET_ARN, loaded at init): the consumer takes the ingress's keys only from messages it signs")
	}
	if cfg.KeyScope == "" {
		cfg.KeyScope = ScopeCaller
	}
	cfg.KeyRule.Keys = cfg.Keys // the consumer's rule, as the consumer runs it: it verifies what the ingress signs
	if d.Clock == nil {
		d.Clock = time.Now
	}
	d.Logs, d.Metrics = syncw.Outputs(d.Logs, d.Metrics)
	consumer, err := persistence.NewDynamoStoreLayout(d.DynamoDB, cfg.layout())
	if err != nil {
		return nil, fmt.Errorf("ingress: %w", err)
	}
	return &App{
		cfg: cfg, store: &store{api: d.DynamoDB, table: cfg.IngressTable}, consumer: consumer, sqs: d.SQS, clock: d.Clock,
		log:     slog.New(slog.NewJSONHandler(d.Logs, nil)).With("service", "ingress"),
		metrics: emf.NewMetrics(d.Metrics, cfg.MetricsNamespace, "ingress"), tracer: d.Tracer,
	}, nil
}

// Handler returns the Lambda handler: Handle, then the invocation's metrics flushed.
func (a *App) Handler() Handler {
	return traced(a.tracer, func(ctx context.Context, req LambdaFunctionURLRequest) (LambdaFunctionURLResponse, error) {
		resp := a.Handle(ctx, req)
		if err := a.metrics.Flush(); err != nil {
			a.log.Warn("metrics flush failed", "error", err.Error())
		}
		return resp, nil
	})
}

// answer is what a request gets, before it is written as HTTP.
type answer struct {
	code       int
	status     *Status  // a status body
	problem    *problem // an error body (application/problem+json)
	retryAfter int      // seconds; 0: no Retry-After
	location   string
	allow      string // 405: the method the path takes
	outcome    string // the log line's outcome and the metric counted
	err        error  // what went wrong inside, for the log line only
}

// post accepts body under the client's key, kept and sent under the caller's key scoped
// (callerKey): the request POST /requests of a validated key and body.
func (a *App) post(ctx context.Context, key, scoped string, body []byte) answer {
	msg, err := a.cfg.Example.Decode(body)
	if err != nil {
		return invalid(titleInvalidBody, "the body is not a valid "+a.cfg.Example.Name()+" message: "+err.Error())
	}
	if err := sqsText(body); err != nil {
		return invalid(titleInvalidBody, err.Error())
	}
	pk, err := idem.RecordKey(a.cfg.Scope, scoped, false)
	if err != nil {
		return invalid(titleBadKey, err.Error())
	}
	group := outbox.DeduplicationID(msg.Group)
	consumerKey, err := a.consumerKey(a.outgoing(scoped, body, group))
	if err != nil {
		return invalid(titleInvalidBody, "the consumer could not key this message: "+err.Error())
	}
	a.traceKeys(ctx, pk, consumerKey, group)
	hash, err := idem.HashPayload(body)
	if err != nil {
		return unavailable(err, 1)
	}
	now := a.clock()
	rec := &record{
		Key: pk, PayloadHash: hash, ConsumerKey: consumerKey, State: stateSending, Token: newToken(), SendingUntil: a.window(ctx, now),
		Group: group, Attempt: 1, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(a.cfg.TTL),
	}
	// The consumer's record of the key is read beside the put: a new record of the
	// ingress's may stand in for one that expired while the consumer's, written later,
	// still lives (live), and a retry is answered from it. It counts live until
	// LeaseGrace past its expiry by this clock: a consumer whose clock is behind still
	// finds it live, and would answer a message sent now "duplicate" and write nothing.
	cpk, err := idem.RecordKey(a.cfg.Scope, consumerKey, false)
	if err != nil {
		return invalid(titleInvalidBody, "the consumer could not key this message: "+err.Error())
	}
	var (
		wg      sync.WaitGroup
		live    *persistence.Record
		liveErr error
	)
	wg.Go(func() {
		live, liveErr = a.consumer.Get(ctx, cpk, a.consumerNow(now))
		if errors.Is(liveErr, idem.ErrNotFound) {
			live, liveErr = nil, nil
		}
	})
	old, err := a.store.create(ctx, rec, now)
	wg.Wait()
	if err == nil && old == nil && liveErr != nil {
		err = liveErr // the key is ours, but whether the consumer knows it is not known
	}
	if err != nil {
		// The put may have been applied with its answer lost: release what would hold
		// the key for the whole window (nothing, if it was not applied).
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if rerr := a.store.unsent(wctx, rec.Key, rec.Token, a.clock()); rerr != nil && !errors.Is(rerr, ErrChanged) {
			err = errors.Join(err, rerr)
		}
		return unavailable(err, 1)
	}
	if old == nil && live != nil && live.HoldsAnother(hash) {
		return a.taken(ctx, rec)
	}
	if old == nil && live != nil {
		return a.adopt(ctx, key, rec, live)
	}
	if old == nil {
		return a.send(ctx, key, scoped, rec, body)
	}
	if old.PayloadHash != hash {
		return answer{code: http.StatusUnprocessableEntity, outcome: MetricMismatch, problem: &problem{
			Title:  "Idempotency-Key is already used",
			Detail: "this Idempotency-Key was used with another request body: a retry must send the same body, a new request a new key",
		}}
	}
	switch {
	case old.State == stateQueued && liveErr == nil && a.consumerRecordKey(old, scoped) == cpk:
		return answerFrom(key, old.PayloadHash, live) // read beside the put
	case old.State == stateQueued:
		return a.replay(ctx, key, scoped, old, now)
	case old.State == stateSending && now.Before(old.SendingUntil):
		// Retry-After 1: the holder's send takes milliseconds; the window (up to
		// ACCEPT_WINDOW) is only how long a holder that died keeps the key.
		return conflict(1)
	}
	// Unsent (its send failed, or it was released), or a sender whose window is over
	// (it died): this request sends the message itself, unless the consumer's record
	// already decides it (as for a new record).
	switch {
	case liveErr != nil:
		return unavailable(liveErr, 1)
	case live != nil && live.HoldsAnother(hash):
		return consumerMismatch()
	}
	cur, err := a.store.takeover(ctx, old, newToken(), a.window(ctx, now), now)
	if errors.Is(err, ErrChanged) {
		return conflict(1)
	}
	if err != nil {
		return unavailable(err, 1)
	}
	if live != nil {
		return a.adopt(ctx, key, cur, live)
	}
	return a.send(ctx, key, scoped, cur, body)
}

// window is when a sending attempt starting now is over for sure: the invocation's
// deadline (Lambda stops it there), at most AcceptWindow from now.
func (a *App) window(ctx context.Context, now time.Time) time.Time {
	until := now.Add(a.cfg.AcceptWindow)
	if dl, ok := ctx.Deadline(); ok && dl.Before(until) {
		until = dl
	}
	return until.Truncate(time.Millisecond)
}

// send sends the message of the record rec, which this request of the client's key held
// under scoped holds, and marks it sent.
func (a *App) send(ctx context.Context, key, scoped string, rec *record, body []byte) answer {
	sctx, cancel := context.WithDeadline(ctx, rec.SendingUntil)
	defer cancel()
	in := a.outgoing(scoped, body, rec.Group)
	telemetry.InjectTrace(sctx, in) // the consumer's record span goes under this request's
	out, err := a.sqs.SendMessage(sctx, in)
	// The writes after a send run on a context of their own: the request's may be
	// what just ended.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer wcancel()
	if err != nil {
		// Maybe sent (a timeout after SQS took it): a resend carries the same
		// deduplication id, and the consumer's record answers a copy after SQS's window.
		retry := 1
		if rerr := a.store.unsent(wctx, rec.Key, rec.Token, a.clock()); rerr != nil {
			retry = seconds(rec.SendingUntil.Sub(a.clock()))
			err = errors.Join(err, rerr)
		}
		return unavailable(fmt.Errorf("ingress: send: %w", err), retry)
	}
	a.metrics.Add(MetricSent, 1)
	if err := a.store.queued(wctx, rec.Key, rec.Token, aws.ToString(out.MessageId), a.clock()); err != nil {
		// The message is on the queue but its record does not say so: no 202 until it
		// does. The retry, once the window is over, sends again (dropped by SQS as a
		// duplicate, or answered by the consumer's record) and marks it.
		retry := 1
		if !errors.Is(err, ErrChanged) {
			retry = seconds(rec.SendingUntil.Sub(a.clock()))
		}
		return unavailable(err, retry)
	}
	st := Status{Key: key, Status: StatusAccepted, Location: location(key)}
	return answer{code: http.StatusAccepted, status: &st, location: st.Location, outcome: MetricAccepted}
}

// outgoing is the message a request kept under scoped (its caller's key: callerKey)
// with body sends to the input queue in group: the one place it is built, so that the
// key the consumer derives from it (consumerKey) is derived from what is sent. It carries
// the ingress's signature of its key and body, without which the consumer refuses a key
// of the HTTP callers' namespace (idem.KeyRule.Keys), and a deduplication id only the
// holders of the stack's secret can compute (sqsmsg.Keys.IngressDeduplicationID).
func (a *App) outgoing(scoped string, body []byte, group string) *sqs.SendMessageInput {
	return &sqs.SendMessageInput{
		QueueUrl:               aws.String(a.cfg.QueueURL),
		MessageBody:            aws.String(string(body)),
		MessageGroupId:         aws.String(group),
		MessageDeduplicationId: aws.String(a.cfg.Keys.IngressDeduplicationID(scoped)),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			idem.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(scoped)},
			sqsmsg.IngressSignatureAttribute: {DataType: aws.String("String"),
				StringValue: aws.String(a.cfg.Keys.SignIngress(scoped, string(body)))},
		},
	}
}

// consumerKey is the idempotency key the consumer derives from the message in, by its
// own rule (Config.KeyRule): the message as the event source mapping hands it over.
func (a *App) consumerKey(in *sqs.SendMessageInput) (string, error) {
	msg := events.SQSMessage{
		Body:              aws.ToString(in.MessageBody),
		Attributes:        map[string]string{"MessageGroupId": aws.ToString(in.MessageGroupId), "MessageDeduplicationId": aws.ToString(in.MessageDeduplicationId)},
		MessageAttributes: map[string]events.SQSMessageAttribute{},
	}
	for name, v := range in.MessageAttributes {
		msg.MessageAttributes[name] = events.SQSMessageAttribute{DataType: aws.ToString(v.DataType), StringValue: v.StringValue}
	}
	key, err := a.cfg.KeyRule.Key(msg)
	if err != nil {
		return "", err
	}
	if _, err := idem.RecordKey(a.cfg.Scope, key, false); err != nil {
		return "", err
	}
	return key, nil
}

// consumerRecordKey is the key of the consumer's record of the request own, kept under
// scoped: the key the consumer derives (kept by the POST), or scoped itself in a record
// written before it was kept.
func (a *App) consumerRecordKey(own *record, scoped string) string {
	key := scoped
	if own.ConsumerKey != "" {
		key = own.ConsumerKey
	}
	pk, err := idem.RecordKey(a.cfg.Scope, key, false)
	if err != nil {
		return own.Key // validated by the POST that stored it
	}
	return pk
}

// replay answers a request of a key whose message was sent: what the consumer's record
// says, 202 until it is final, then 200.
func (a *App) replay(ctx context.Context, key, scoped string, own *record, now time.Time) answer {
	rec, err := a.consumer.Get(ctx, a.consumerRecordKey(own, scoped), a.consumerNow(now))
	if err != nil && !errors.Is(err, idem.ErrNotFound) {
		return unavailable(err, 1)
	}
	return answerFrom(key, own.PayloadHash, rec)
}

// answerFrom is the answer to a request with the fingerprint hash whose message was sent:
// what the consumer's record rec (nil: none yet) says, 202 until it is final, then 200.
func answerFrom(key, hash string, rec *persistence.Record) answer {
	st := statusOf(key, hash, rec)
	code := http.StatusAccepted
	if st.Final() {
		code = http.StatusOK
	}
	return answer{code: code, status: &st, location: st.Location, outcome: MetricReplayed}
}

// taken refuses a request whose record the ingress just wrote while the consumer's record
// of its key (or of the business id the consumer keys it by) lives for another body: the
// consumer would refuse it as a payload mismatch. Nothing is sent, and the ingress's
// record is released, so that the body the consumer holds is not refused here.
func (a *App) taken(ctx context.Context, rec *record) answer {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := a.store.unsent(wctx, rec.Key, rec.Token, a.clock()); err != nil && !errors.Is(err, ErrChanged) {
		return unavailable(err, 1)
	}
	return consumerMismatch()
}

// consumerMismatch is the answer to a request whose consumer record holds another body.
func consumerMismatch() answer {
	return answer{code: http.StatusUnprocessableEntity, outcome: MetricMismatch, problem: &problem{
		Title: "Idempotency-Key is already used",
		Detail: "the consumer's record of this request's key (or of the business id in its body) holds another body: " +
			"a retry must send the same body, a new request a new key (or a new business id)",
	}}
}

// adopt answers a request whose record the ingress just wrote (its own had expired, or
// was never written) while the consumer's record of the key, live, still lives for the
// same body: the request was taken before, and its message consumed. Nothing is sent again. The record
// is marked sent (with no message id) and made to end with the consumer's, so that the
// status never says accepted for a request the consumer handled, and a retry meets the
// record again. (A consumer record that never expires, one folded into its guard,
// leaves the ingress's its own TTL: the next retry meets the consumer's again.)
func (a *App) adopt(ctx context.Context, key string, rec *record, live *persistence.Record) answer {
	exp := rec.ExpiresAt
	if !live.ExpiresAt.IsZero() {
		exp = live.ExpiresAt
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := a.store.adopted(wctx, rec.Key, rec.Token, exp, a.clock()); err != nil {
		if rerr := a.store.unsent(wctx, rec.Key, rec.Token, a.clock()); rerr != nil && !errors.Is(rerr, ErrChanged) {
			err = errors.Join(err, rerr)
		}
		return unavailable(err, 1)
	}
	return answerFrom(key, rec.PayloadHash, live)
}

// get answers GET /requests/{key} for a validated key, kept under scoped: the status the
// consumer's record gives the key's accepted request, or 404.
func (a *App) get(ctx context.Context, key, scoped string) answer {
	pk, err := idem.RecordKey(a.cfg.Scope, scoped, false)
	if err != nil {
		return invalid(titleBadKey, err.Error())
	}
	now := a.clock()
	var (
		wg          sync.WaitGroup
		rec         *persistence.Record
		consumerErr error
	)
	// When the consumer keys messages by the key the ingress sets, its record is read
	// beside the ingress's own; otherwise its key is in the ingress's record.
	guess := ""
	if a.cfg.KeyRule.Source == idem.KeyFromMessage {
		guess = pk
		wg.Go(func() { rec, consumerErr = a.consumer.Get(ctx, guess, a.consumerNow(now)) })
	}
	own, err := a.store.get(ctx, pk, now)
	wg.Wait()
	if err != nil {
		return unavailable(err, 1)
	}
	if own == nil && rec != nil && consumerErr == nil {
		// The ingress's record expired, the consumer's (written later) lives on: its
		// outcome is the request's. Unless it was completed for another body than the
		// one that came under the key, which it refused (a guard held the other's
		// effect): the request's body, unknown here, is then taken for the refused one.
		hash := rec.PayloadHash
		if rec.CompletedForAnother() {
			hash = ""
		}
		st := statusOf(key, hash, rec)
		return answer{code: http.StatusOK, status: &st, location: st.Location, outcome: MetricStatusRead}
	}
	if own == nil {
		return notFound("no request was accepted under this Idempotency-Key (or its record expired)")
	}
	if cpk := a.consumerRecordKey(own, scoped); cpk != guess {
		rec, consumerErr = a.consumer.Get(ctx, cpk, a.consumerNow(now))
	}
	if consumerErr != nil && !errors.Is(consumerErr, idem.ErrNotFound) {
		return unavailable(consumerErr, 1)
	}
	if rec == nil && own.State == stateQueued && own.MessageID == "" {
		// Adopted from a consumer's record that has ended since: nothing of the
		// request is left.
		return notFound("no request was accepted under this Idempotency-Key (or its record expired)")
	}
	if rec == nil && own.State != stateQueued {
		// Not sent as far as anyone knows: its POST failed (503) or is still running.
		return notFound("the request under this Idempotency-Key was not accepted: its POST is still running, or failed; retry the POST")
	}
	st := statusOf(key, own.PayloadHash, rec)
	return answer{code: http.StatusOK, status: &st, location: st.Location, outcome: MetricStatusRead}
}

// seconds is d rounded up to whole seconds, at least 1: a Retry-After value.
func seconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

func conflict(retry int) answer {
	return answer{code: http.StatusConflict, retryAfter: retry, outcome: MetricConflict, problem: &problem{
		Title:  "A request is outstanding for this Idempotency-Key",
		Detail: "the first request with this Idempotency-Key is still being accepted: retry after Retry-After seconds",
	}}
}

func unavailable(err error, retry int) answer {
	return answer{code: http.StatusServiceUnavailable, retryAfter: retry, outcome: MetricUnavailable, err: err, problem: &problem{
		Title:  "Service Unavailable",
		Detail: "the request could not be accepted now (a store or queue failure); nothing was accepted that a retry with the same Idempotency-Key and body will not complete: retry after Retry-After seconds",
	}}
}

func notFound(detail string) answer {
	return answer{code: http.StatusNotFound, outcome: MetricNotFound, problem: &problem{Title: "Not Found", Detail: detail}}
}

// Titles of the 400 answers.
const (
	titleMissingKey   = "Idempotency-Key is missing"
	titleBadKey       = "Idempotency-Key is malformed"
	titleInvalidBody  = "The body is not a valid message"
	titleBodyTooLarge = "The body is too large"
)

func invalid(title, detail string) answer {
	return answer{code: http.StatusBadRequest, outcome: MetricRejected, problem: &problem{Title: title, Detail: detail}}
}

// Invoke is the handler as Lambda's runtime calls it: the event's JSON in, the answer's
// JSON out, for the ingress called in the process behind a local function URL
// (internal/funcurl). It is safe for concurrent use, which aws-lambda-go's
// lambda.NewHandler(h).Invoke is not: its answer is a pooled buffer that the next
// invocation reuses.
func (a *App) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	var req LambdaFunctionURLRequest
	if err := json.Unmarshal(payload, &req); err != nil {
		return nil, fmt.Errorf("ingress: the event: %w", err)
	}
	resp, err := a.Handler()(ctx, req)
	if err != nil {
		return nil, err
	}
	return json.Marshal(resp)
}

// consumerNow is the time the ingress reads the consumer's records at: LEASE_GRACE before
// its own clock's now, the most the hosts' clocks may differ. A consumer record is live
// to the ingress until it has ended by every clock: a consumer whose clock is behind may
// still answer from it, and the request is what that record says (seeds 37135, 43484).
func (a *App) consumerNow(now time.Time) time.Time { return now.Add(-a.cfg.LeaseGrace) }
