package ingressapp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/funcurl"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

func TestMain(m *testing.M) { os.Exit(awstest.MainOwn(m)) }

// fixture is the template's resources (with the wired example's block, or EXAMPLE's)
// on the local endpoint, and the ingress in this process behind a function URL played
// over real HTTP on loopback (internal/funcurl).
type fixture struct {
	ex      example.Example
	st      *exampletest.Stack
	env     map[string]string
	cfg     ingressapp.Config
	url     string // the ingress's base URL
	http    *http.Client
	calls   *awstest.Calls // every AWS call the ingress made (SDK retries aside)
	logs    exampletest.Buffer
	queue   string // the input queue
	rng     *rand.Rand
	run     string
	batches int
}

var runs atomic.Int64

// options changes one fixture.
type options struct {
	env map[string]string // on top of the template's environment
	// params overrides template parameters (IdempotencyAttributeNames, ...) before its
	// resources are created.
	params map[string]string
	// wrap, when set, puts something between the ingress and its real clients
	// (fault injection, recording).
	wrapDDB func(ingressapp.DynamoDBAPI) ingressapp.DynamoDBAPI
	wrapSQS func(ingressapp.SQSAPI) ingressapp.SQSAPI
	// deadDDB, deadSQS point the client at a loopback port nothing listens on.
	deadDDB, deadSQS bool
	// slowAnswer holds every answer this long after the function returned it: the
	// request is committed, its answer late.
	slowAnswer time.Duration
	// answered, with slowAnswer, hears of each answer the function returned, before it
	// is held: the request is committed (a send that finds no reader is dropped).
	answered chan struct{}
	noCaller bool // the server reports no IAM caller (AuthType NONE)
	// caller, when set, is the IAM caller the server reports (default: the local one,
	// funcurl.LocalCaller("test")).
	caller *events.LambdaFunctionURLRequestContextAuthorizerIAMDescription
	// apiOption, when set, is added to both clients' middleware (the IAM recording).
	apiOption func(*middleware.Stack) error
	tracer    trace.TracerProvider // when set, the ingress traces each request
}

func newFixture(t *testing.T, o options) *fixture {
	t.Helper()
	ex := exampletest.Example(t)
	tpl, err := stack.LoadFor(exampletest.TemplatePath(), ex)
	if err != nil {
		t.Fatal(err)
	}
	if err := tpl.SetParameters(o.params); err != nil {
		t.Fatal(err)
	}
	st := exampletest.UpTemplate(t, ex, tpl)
	f := &fixture{ex: ex, st: st, env: st.Vars(), calls: awstest.NewOperations(),
		rng: rand.New(rand.NewPCG(7, uint64(runs.Add(1)))), run: fmt.Sprintf("i%s%d", awstest.RunID(), runs.Load())}
	maps.Copy(f.env, map[string]string{"IDEMPOTENCY_TTL": "1h", "METRICS_NAMESPACE": "Test", "LEASE_GRACE": "2s",
		"DEADLINE_MARGIN": "1s", "CACHE_SIZE": "0"})
	maps.Copy(f.env, o.env)
	f.queue = f.env["INPUT_QUEUE_URL"]
	f.startIngress(t, o)
	return f
}

// startIngress serves a new ingress on the fixture's resources: the fixture's URL.
func (f *fixture) startIngress(t *testing.T, o options) {
	t.Helper()
	f.url = f.serve(t, o)
	f.http = &http.Client{Timeout: 20 * time.Second}
}

// serve serves a new ingress on the fixture's resources and returns its URL.
func (f *fixture) serve(t *testing.T, o options) string {
	t.Helper()
	cfg, err := ingressapp.FromEnv(f.lookup)
	if err != nil {
		t.Fatal(err)
	}
	f.cfg = cfg
	apiOptions := []func(*middleware.Stack) error{f.calls.APIOption}
	if o.apiOption != nil {
		apiOptions = append(apiOptions, o.apiOption)
	}
	ddbEndpoint, sqsEndpoint := awstest.Endpoint(t), awstest.Endpoint(t)
	if o.deadDDB {
		ddbEndpoint = deadEndpoint(t)
	}
	if o.deadSQS {
		sqsEndpoint = deadEndpoint(t)
	}
	// A dead endpoint fails at once (no retries to wait through); a live one (moto) keeps
	// the SDK's retries, as the ingress has them deployed: moto now and then closes a
	// kept-alive connection under load, which the SDK retries, and which the tests took
	// for a store failure (a 503) when they ran without retries.
	var ddb ingressapp.DynamoDBAPI = dynamodb.NewFromConfig(awstest.ConfigFor(t, ddbEndpoint), func(opt *dynamodb.Options) {
		opt.APIOptions = append(opt.APIOptions, apiOptions...)
		if o.deadDDB {
			opt.RetryMaxAttempts = 1
		}
	})
	var sq ingressapp.SQSAPI = sqs.NewFromConfig(awstest.ConfigFor(t, sqsEndpoint), func(opt *sqs.Options) {
		opt.APIOptions = append(opt.APIOptions, apiOptions...)
		if o.deadSQS {
			opt.RetryMaxAttempts = 1
		}
	})
	if o.wrapDDB != nil {
		ddb = o.wrapDDB(ddb)
	}
	if o.wrapSQS != nil {
		sq = o.wrapSQS(sq)
	}
	app, err := ingressapp.New(cfg, ingressapp.Deps{DynamoDB: ddb, SQS: sq, Logs: &f.logs, Metrics: &f.logs, Tracer: o.tracer})
	if err != nil {
		t.Fatal(err)
	}
	srv := &funcurl.Server{Invoke: app.Invoke}
	if !o.noCaller {
		srv.Caller = funcurl.LocalCaller("test")
		if o.caller != nil {
			srv.Caller = o.caller
		}
	}
	var h http.Handler = srv
	if o.slowAnswer > 0 {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := &heldResponse{header: http.Header{}}
			srv.ServeHTTP(rec, r)
			select {
			case o.answered <- struct{}{}:
			default:
			}
			time.Sleep(o.slowAnswer) // committed; the answer is late
			rec.flush(w)
		})
	}
	url, stop, err := funcurl.Listen("127.0.0.1:0", h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}

func (f *fixture) lookup(k string) (string, bool) { v, ok := f.env[k]; return v, ok }

// heldResponse keeps an answer to write it later.
type heldResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (h *heldResponse) Header() http.Header         { return h.header }
func (h *heldResponse) Write(p []byte) (int, error) { return h.body.Write(p) }
func (h *heldResponse) WriteHeader(code int)        { h.code = code }
func (h *heldResponse) flush(w http.ResponseWriter) {
	maps.Copy(w.Header(), h.header)
	w.WriteHeader(h.code)
	_, _ = w.Write(h.body.Bytes())
}

// reply is an HTTP answer.
type reply struct {
	code   int
	header http.Header
	body   []byte
}

func (r reply) String() string { return fmt.Sprintf("%d %s %s", r.code, r.header, r.body) }

// status decodes a status answer.
func (r reply) status(t *testing.T) ingressapp.Status {
	t.Helper()
	var st ingressapp.Status
	if err := json.Unmarshal(r.body, &st); err != nil {
		t.Fatalf("status body %s: %v", r.body, err)
	}
	return st
}

// do sends one request; key "" sends no Idempotency-Key header.
func (f *fixture) do(t *testing.T, client *http.Client, method, path, key string, body []byte) (reply, error) {
	t.Helper()
	return f.doAt(t, client, f.url, method, path, key, body)
}

// doAt is do to the ingress at base.
func (f *fixture) doAt(t *testing.T, client *http.Client, base, method, path, key string, body []byte) (reply, error) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(ingressapp.KeyHeader, key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{code: resp.StatusCode, header: resp.Header, body: b}, nil
}

func (f *fixture) post(t *testing.T, key string, body string) reply {
	t.Helper()
	r, err := f.do(t, f.http, http.MethodPost, ingressapp.RequestsPath, key, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.code == http.StatusServiceUnavailable {
		t.Logf("POST answered 503; the ingress's logs:\n%s", f.logs.String())
	}
	return r
}

// retry posts as a client that honours a 503's Retry-After does: again while the answer
// is 503 (a store or queue call failed: under a loaded test machine, moto can be slower
// than the ingress's deadlines), at most 4 times. Each 503 is logged with the ingress's
// logs, so a 503 that is not a slow call shows.
func (f *fixture) retry(t *testing.T, key string, body string) reply {
	t.Helper()
	r := f.post(t, key, body)
	for range 4 {
		if r.code != http.StatusServiceUnavailable {
			break
		}
		t.Logf("a 503, retried: %s\nthe ingress's logs:\n%s", r, f.logs.String())
		time.Sleep(time.Second)
		r = f.post(t, key, body)
	}
	return r
}

func (f *fixture) get(t *testing.T, key string) reply {
	t.Helper()
	r, err := f.do(t, f.http, http.MethodGet, ingressapp.RequestsPath+"/"+key, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// traffic is n of the example's valid messages, each with a key and business id of its
// own: each call is a run of its own (the run names the business ids).
func (f *fixture) traffic(t *testing.T, n int) []example.Message {
	t.Helper()
	f.batches++
	msgs := exampletest.Traffic(t, f.ex).Traffic(f.rng, fmt.Sprintf("%sb%d", f.run, f.batches), n, max(1, n/2))
	f.prepare(t, msgs)
	return msgs
}

// prepare writes what msgs need in the example's tables (the inventory's stock).
func (f *fixture) prepare(t *testing.T, msgs []example.Message) {
	t.Helper()
	if err := example.Prepare(context.Background(), f.ex, f.st.DynamoDB, f.lookup, msgs); err != nil {
		t.Fatal(err)
	}
}

// key is a fresh Idempotency-Key.
func (f *fixture) key(name string) string { return f.run + "-" + name }

// inputMessages receives every message on the input queue (leaving them invisible).
func (f *fixture) inputMessages(t *testing.T) []sqstypes.Message {
	t.Helper()
	return exampletest.ReceiveAll(t, f.st.SQS, f.queue)
}

// consume runs the real consumer (consumerapp's handler) over the input queue until it
// is idle, as Lambda's event source mapping hands it batches (exampletest.Consume), and
// returns its log.
func (f *fixture) consume(t *testing.T) string {
	t.Helper()
	return f.consumeWith(t, nil)
}

// consumeWith is consume with the consumer's DynamoDB client wrapped by wrap (nil: not).
func (f *fixture) consumeWith(t *testing.T, wrap func(persistence.DynamoDBAPI) persistence.DynamoDBAPI) string {
	t.Helper()
	var ddb persistence.DynamoDBAPI = f.st.DynamoDB
	if wrap != nil {
		ddb = wrap(ddb)
	}
	cfg, err := consumerapp.FromEnv(f.lookup)
	if err != nil {
		t.Fatal(err)
	}
	var logs exampletest.Buffer
	h, err := consumerapp.New(cfg, consumerapp.Deps{DynamoDB: ddb, SQS: f.st.SQS, Logs: &logs, Metrics: io.Discard, Owner: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	done := exampletest.Consume(t, f.st.SQS, f.queue, h)
	t.Logf("consumer: %d records received, %d deleted, %d left", done.Received, done.Deleted, done.Received-done.Deleted)
	return logs.String()
}

// scoped is the key the fixture's default caller's request of the client's key is kept
// and sent under (idem.CallerKey of its namespace).
func (f *fixture) scoped(key string) string {
	ns, ok := ingressapp.Namespace(ingressapp.ScopeCaller, funcurl.LocalCaller("test"))
	if !ok {
		panic("the local caller has no namespace")
	}
	return idem.CallerKey(ns, key)
}

// keys are the stack's keys, as the functions derive them from its secret.
func (f *fixture) keys(t *testing.T) *sqsmsg.Keys {
	t.Helper()
	keys, err := sqsmsg.NewKeys([]byte(f.env["STACK_SECRET"]))
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// consumerRecord reads the consumer's record of key (as the consumer keys it: for a
// request through the ingress, f.scoped).
func (f *fixture) consumerRecord(t *testing.T, key string) *persistence.Record {
	t.Helper()
	store, err := persistence.NewDynamoStoreLayout(f.st.DynamoDB, f.cfg.Layout)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := idem.RecordKey(f.env["IDEMPOTENCY_SCOPE"], key, false)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := store.Get(context.Background(), pk, time.Now())
	if err != nil {
		t.Fatalf("the consumer's record of %s: %v", key, err)
	}
	return rec
}

// sends counts the SendMessage requests the ingress made.
func (f *fixture) sends() int { return f.calls.Ops()["SendMessage"] }

// keyOf is the idempotency-key attribute of a message.
func keyOf(m sqstypes.Message) string {
	return aws.ToString(m.MessageAttributes[idem.KeyAttribute].StringValue)
}

// wantCode fails the test unless r has the code.
func wantCode(t *testing.T, what string, r reply, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: %s, want %d", what, r, code)
	}
}

// wantProblem fails the test unless r is an error answer of code whose detail has part.
func wantProblem(t *testing.T, what string, r reply, code int, part string) {
	t.Helper()
	wantCode(t, what, r, code)
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" || !strings.Contains(string(r.body), part) {
		t.Errorf("%s: %s %s, want a problem whose text has %q", what, ct, r.body, part)
	}
}

// beforeCommit runs fn once, when the consumer first commits (its TransactWriteItems or
// the completion's UpdateItem), while it holds the key's lease: what a client sees then.
type beforeCommit struct {
	persistence.DynamoDBAPI
	once sync.Once
	fn   func()
}

func (b *beforeCommit) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	b.once.Do(b.fn)
	return b.DynamoDBAPI.TransactWriteItems(ctx, in, o...)
}

func (b *beforeCommit) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if strings.Contains(aws.ToString(in.UpdateExpression), ":completed") {
		b.once.Do(b.fn)
	}
	return b.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

// event is a function URL event of the fixture's default caller: method on path, with
// headers (nil: none) and body.
func event(method, path string, headers map[string]string, body string) ingressapp.LambdaFunctionURLRequest {
	return ingressapp.LambdaFunctionURLRequest{RawPath: path, Body: body, Headers: headers, RequestContext: events.LambdaFunctionURLRequestContext{
		HTTP:       events.LambdaFunctionURLRequestContextHTTPDescription{Method: method, Path: path},
		Authorizer: &events.LambdaFunctionURLRequestContextAuthorizerDescription{IAM: funcurl.LocalCaller("test")},
	}}
}

// postEvent is the event of a POST /requests of body under key.
func postEvent(key, body string) ingressapp.LambdaFunctionURLRequest {
	return event(http.MethodPost, ingressapp.RequestsPath, map[string]string{strings.ToLower(ingressapp.KeyHeader): key}, body)
}

// direct is an ingress on the fixture's resources with configuration cfg, called without
// HTTP (its Handle or Invoke), its logs and metrics discarded.
func (f *fixture) direct(t *testing.T, cfg ingressapp.Config) *ingressapp.App {
	t.Helper()
	app, err := ingressapp.New(cfg, ingressapp.Deps{DynamoDB: f.st.DynamoDB, SQS: f.st.SQS, Logs: io.Discard, Metrics: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return app
}
