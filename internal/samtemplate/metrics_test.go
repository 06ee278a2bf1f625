package samtemplate_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/reaper/reaperapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
	"github.com/idemgo/sqs-lambda-consumer/internal/syncw"
)

func TestMain(m *testing.M) { os.Exit(awstest.Main(m)) }

// awsMetric is a metric AWS publishes, by namespace and name: the one dimension the
// template may watch it by, the type of resource that dimension names and how (the
// attribute of a GetAtt, "" for a Ref), and where AWS documents it.
type awsMetric struct {
	dimension, resource, attr, doc string
}

const (
	// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html:
	// the metrics of AWS/SQS, each by the dimension QueueName.
	sqsDoc = "sqs-available-cloudwatch-metrics.html"
	// https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html (Errors,
	// Throttles) and https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics.html:
	// FunctionName gives "aggregate metrics for all versions and aliases of a function".
	lambdaDoc = "monitoring-metrics-types.html"
	// https://docs.aws.amazon.com/lambda/latest/dg/urls-monitoring.html: UrlRequestCount,
	// Url4xxCount, Url5xxCount, by FunctionName (the URLs of $LATEST and of every alias),
	// Resource or ExecutedVersion.
	urlDoc = "urls-monitoring.html"
)

// awsMetrics are the AWS metrics an alarm or the dashboard may watch. A metric or a
// dimension not in this table fails TestEveryWatchedMetricIsEmitted: add it here with
// the page of AWS's documentation that names it.
var awsMetrics = map[string]awsMetric{
	"AWS/SQS ApproximateAgeOfOldestMessage":      {"QueueName", "AWS::SQS::Queue", "QueueName", sqsDoc},
	"AWS/SQS ApproximateNumberOfMessagesVisible": {"QueueName", "AWS::SQS::Queue", "QueueName", sqsDoc},
	"AWS/Lambda Errors":                          {"FunctionName", "AWS::Lambda::Function", "", lambdaDoc},
	"AWS/Lambda Throttles":                       {"FunctionName", "AWS::Lambda::Function", "", lambdaDoc},
	"AWS/Lambda UrlRequestCount":                 {"FunctionName", "AWS::Lambda::Function", "", urlDoc},
	"AWS/Lambda Url4xxCount":                     {"FunctionName", "AWS::Lambda::Function", "", urlDoc},
	"AWS/Lambda Url5xxCount":                     {"FunctionName", "AWS::Lambda::Function", "", urlDoc},
}

// TestEveryWatchedMetricIsEmitted: every metric an alarm or the dashboard watches exists.
// The functions' own (every namespace but AWS/*) must come out of the real consumer,
// reaper and ingress, run here on the template's resources on moto with the template's
// METRICS_NAMESPACE, through paths that give each one a value above zero; AWS's must be
// in awsMetrics, by the documented dimension, naming a resource of the right type.
func TestEveryWatchedMetricIsEmitted(t *testing.T) {
	tpl := load(t)
	watched, err := tpl.Watched()
	if err != nil {
		t.Fatal(err)
	}
	if len(watched) == 0 {
		t.Fatal("the template watches no metric")
	}
	emitted := emit(t)
	for _, p := range unemitted(tpl, watched, emitted) {
		t.Error(p)
	}
	if t.Failed() {
		t.Logf("emitted: %s", strings.Join(slices.Sorted(func(yield func(string) bool) {
			for k := range emitted {
				if !yield(k) {
					return
				}
			}
		}), "; "))
	}
}

// TestUnemittedFindsMistakes: the check of TestEveryWatchedMetricIsEmitted reports a
// misspelt metric, a dimension of another name or value, and an AWS metric watched by a
// dimension that names the wrong resource, on the template's own metrics changed one at a
// time (the emitted set holds exactly what the template watches).
func TestUnemittedFindsMistakes(t *testing.T) {
	tpl := load(t)
	watched, err := tpl.Watched()
	if err != nil {
		t.Fatal(err)
	}
	emitted := map[string]float64{}
	for _, m := range watched {
		if !strings.HasPrefix(m.Namespace, "AWS/") {
			emitted[key(m.Namespace, m.Name, literal(m.Dimensions))] = 1
		}
	}
	if p := unemitted(tpl, watched, emitted); len(p) > 0 {
		t.Fatalf("the template's own metrics: %v", p)
	}
	find := func(pred func(samtemplate.Metric) bool) int {
		for i, m := range watched {
			if pred(m) {
				return i
			}
		}
		t.Fatal("no such watched metric")
		return -1
	}
	sweep := find(func(m samtemplate.Metric) bool { return m.Name == reaperapp.MetricSweepIncomplete })
	lambdaErrors := find(func(m samtemplate.Metric) bool { return m.Namespace == "AWS/Lambda" && m.Name == "Errors" })
	queueAge := find(func(m samtemplate.Metric) bool { return m.Name == "ApproximateAgeOfOldestMessage" })
	for _, c := range []struct {
		name   string
		i      int
		change func(*samtemplate.Metric)
	}{
		{"custom name", sweep, func(m *samtemplate.Metric) { m.Name = "SweepIncomplet" }},
		{"custom dimension value", sweep, func(m *samtemplate.Metric) {
			m.Dimensions = map[string]samtemplate.Value{"Service": {Literal: "reapr"}}
		}},
		{"custom dimension name", sweep, func(m *samtemplate.Metric) {
			m.Dimensions = map[string]samtemplate.Value{"Function": {Literal: "reaper"}}
		}},
		{"custom namespace", sweep, func(m *samtemplate.Metric) { m.Namespace = "IdempotentConsumers" }},
		{"AWS name", lambdaErrors, func(m *samtemplate.Metric) { m.Name = "Error" }},
		{"AWS dimension name", queueAge, func(m *samtemplate.Metric) {
			m.Dimensions = map[string]samtemplate.Value{"Queue": m.Dimensions["QueueName"]}
		}},
		{"AWS dimension on a table", queueAge, func(m *samtemplate.Metric) {
			m.Dimensions = map[string]samtemplate.Value{"QueueName": {Ref: "IdempotencyTable", Attr: "QueueName"}}
		}},
		{"AWS dimension by URL", queueAge, func(m *samtemplate.Metric) {
			m.Dimensions = map[string]samtemplate.Value{"QueueName": {Ref: "InputQueue"}}
		}},
		{"AWS dimension literal", lambdaErrors, func(m *samtemplate.Metric) {
			m.Dimensions = map[string]samtemplate.Value{"FunctionName": {Literal: "consumer"}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			changed := slices.Clone(watched)
			c.change(&changed[c.i])
			if p := unemitted(tpl, changed, emitted); len(p) != 1 {
				t.Errorf("%s: problems %q, want the one changed metric", changed[c.i], p)
			}
		})
	}
}

// unemitted returns a line for each watched metric that is not emitted: a custom one not
// in emitted with a value above zero, an AWS one not in awsMetrics as it is watched.
func unemitted(tpl *samtemplate.Template, watched []samtemplate.Metric, emitted map[string]float64) []string {
	var out []string
	for _, m := range watched {
		if !strings.HasPrefix(m.Namespace, "AWS/") {
			dims := literal(m.Dimensions)
			if dims == nil {
				out = append(out, fmt.Sprintf("%s: a dimension of an EMF metric is a literal, not a reference", m))
				continue
			}
			if v, ok := emitted[key(m.Namespace, m.Name, dims)]; !ok || v <= 0 {
				out = append(out, fmt.Sprintf("%s: no function emits it with a value above 0 (emitted: %t)", m, ok))
			}
			continue
		}
		spec, ok := awsMetrics[m.Namespace+" "+m.Name]
		if !ok {
			out = append(out, fmt.Sprintf("%s: not an AWS metric this test knows: add it to awsMetrics with the page that documents it", m))
			continue
		}
		v, ok := m.Dimensions[spec.dimension]
		switch {
		case !ok || len(m.Dimensions) != 1:
			out = append(out, fmt.Sprintf("%s: want the dimension %s alone (%s)", m, spec.dimension, spec.doc))
		case v.Ref == "" || tpl.Resources[v.Ref].Type != spec.resource || v.Attr != spec.attr:
			want := "Ref of an " + spec.resource
			if spec.attr != "" {
				want = "GetAtt " + spec.attr + " of an " + spec.resource
			}
			out = append(out, fmt.Sprintf("%s: %s is %s, want the %s of the template", m, spec.dimension, v, want))
		}
	}
	return out
}

// literal is the dimensions as name=value strings, sorted; nil when one is a reference.
func literal(dims map[string]samtemplate.Value) []string {
	out := []string{}
	for n, v := range dims {
		if v.Ref != "" {
			return nil
		}
		out = append(out, n+"="+v.Literal)
	}
	slices.Sort(out)
	return out
}

func key(namespace, name string, dims []string) string {
	return namespace + " " + name + "{" + strings.Join(dims, ",") + "}"
}

// parseEMF parses the EMF lines the functions wrote: for each metric a directive
// declares, under its namespace with the dimension values the line gives, the largest
// value it had (the number of observations for a list of them).
func parseEMF(t *testing.T, lines []byte) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(lines))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line map[string]json.RawMessage
		var meta struct {
			AWS struct {
				CloudWatchMetrics []struct {
					Namespace  string
					Dimensions [][]string
					Metrics    []struct{ Name string }
				}
			} `json:"_aws"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("EMF line %q: %v", sc.Text(), err)
		}
		if err := json.Unmarshal(sc.Bytes(), &meta); err != nil {
			t.Fatalf("EMF line %q: %v", sc.Text(), err)
		}
		for _, d := range meta.AWS.CloudWatchMetrics {
			for _, set := range d.Dimensions {
				var dims []string
				for _, n := range set {
					var v string
					if err := json.Unmarshal(line[n], &v); err != nil {
						t.Fatalf("EMF line %q: dimension %s: %v", sc.Text(), n, err)
					}
					dims = append(dims, n+"="+v)
				}
				slices.Sort(dims)
				for _, m := range d.Metrics {
					var v float64
					if err := json.Unmarshal(line[m.Name], &v); err != nil {
						var vs []float64
						if err := json.Unmarshal(line[m.Name], &vs); err != nil {
							t.Fatalf("EMF line %q: metric %s: %v", sc.Text(), m.Name, err)
						}
						v = float64(len(vs))
					}
					k := key(d.Namespace, m.Name, dims)
					out[k] = max(out[k], v)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// outboundMode is what switchSQS does with SendMessageBatch, the call that sends the
// outbound messages (dead letters go with SendMessage and always pass).
type outboundMode int32

const (
	outboundPass    outboundMode = iota
	outboundFail                 // a failure that may pass later: the messages stay pending
	outboundRefused              // every entry refused for the sender's fault: dead-lettered
)

// switchSQS is the SQS client with SendMessageBatch failing as mode says, and a hook
// before each SendMessage.
type switchSQS struct {
	*sqs.Client
	mode   atomic.Int32
	before func(*sqs.SendMessageInput) error
}

func (s *switchSQS) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	switch outboundMode(s.mode.Load()) {
	case outboundFail:
		return nil, errors.New("injected: connection reset")
	case outboundRefused:
		out := &sqs.SendMessageBatchOutput{}
		for _, e := range in.Entries {
			out.Failed = append(out.Failed, sqstypes.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidParameterValue"),
				Message: aws.String("injected: message too long"), SenderFault: true})
		}
		return out, nil
	}
	return s.Client.SendMessageBatch(ctx, in, opts...)
}

func (s *switchSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if s.before != nil {
		if err := s.before(in); err != nil {
			return nil, err
		}
	}
	return s.Client.SendMessage(ctx, in, opts...)
}

// emit runs the consumer, the reaper and the ingress of the wired example on the
// template's resources, with the template's METRICS_NAMESPACE, through a path to each
// metric the template watches, and returns what they emitted (parseEMF).
func emit(t *testing.T) map[string]float64 {
	t.Helper()
	ctx := context.Background()
	ex := exampletest.Example(t)
	st := exampletest.Up(t, ex)
	namespace := st.Must(t, "METRICS_NAMESPACE")
	vars := st.Vars(exampletest.TestEnv, map[string]string{"METRICS_NAMESPACE": namespace})
	lookup := exampletest.LookupIn(vars)
	// One writer for the three functions: syncw.New keeps it as it is, so their writes
	// take turns.
	var lines bytes.Buffer
	emf := syncw.New(&lines)
	sqsAPI := &switchSQS{Client: st.SQS}
	// Past TestEnv's 1 h retention, for the consumer; past every lease and outbox wait but
	// within the retention, for the reaper (it reads the records it sends).
	expired := func() time.Time { return time.Now().Add(2 * time.Hour) }
	later := func() time.Time { return time.Now().Add(10 * time.Minute) }

	// The consumer.
	cfg := st.Config(t, map[string]string{"METRICS_NAMESPACE": namespace})
	consumer := func(clock func() time.Time) lambda.Handler {
		h, err := consumerapp.New(cfg, consumerapp.Deps{DynamoDB: st.DynamoDB, SQS: sqsAPI, Logs: &bytes.Buffer{}, Metrics: emf, Owner: t.Name(), Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		return lambda.NewHandler(h)
	}
	gen := exampletest.Traffic(t, ex)
	msgs := gen.Traffic(rand.New(rand.NewPCG(29, 3)), "ops"+awstest.RunID(), 5, 5)
	if err := example.Prepare(ctx, ex, st.DynamoDB, st.Lookup, msgs); err != nil {
		t.Fatal(err)
	}
	input := st.InputARN(t)
	deliver := func(h lambda.Handler, id string, m example.Message) []string {
		return exampletest.Invoke(t, h, ctx, exampletest.Encode(t, []events.SQSMessage{exampletest.Record(m, id, input)}))
	}
	h := consumer(nil)
	deliver(h, "first", msgs[0]) // Acquired, HandlerDuration, OutboundSent
	deliver(h, "again", msgs[0]) // DuplicateSuppressed
	// A body no message type decodes, with a key: dead-lettered for bad input.
	garbage := example.Message{ID: "garbage", Key: "ops-garbage-" + awstest.RunID(), Group: msgs[0].Group, Body: "not a message"}
	deliver(h, "bad", garbage) // PermanentFailure, DeadLettered
	sqsAPI.mode.Store(int32(outboundRefused))
	deliver(h, "refused", msgs[1]) // OutboundDeadLettered (consumer)
	sqsAPI.mode.Store(int32(outboundFail))
	if failed := deliver(h, "unsent", msgs[2]); len(failed) != 1 { // OutboundUnsent, RetryableFailure
		t.Errorf("example %s: a record whose outbound messages could not be sent was not retried (failures %v): does it send any?", ex.Name(), failed)
	}
	sqsAPI.mode.Store(int32(outboundPass))
	deliver(consumer(expired), "expired", msgs[0]) // GuardedDuplicate: the record is past its retention

	// The reaper: a lease whose holder hangs, msgs[2]'s pending outbox, then msgs[3]'s.
	rcfg, err := reaperapp.FromEnv(lookup)
	if err != nil {
		t.Fatal(err)
	}
	reaper, err := reaperapp.New(rcfg, reaperapp.Deps{DynamoDB: st.DynamoDB, SQS: sqsAPI, Logs: &bytes.Buffer{}, Metrics: emf, Clock: later})
	if err != nil {
		t.Fatal(err)
	}
	release := holdLease(t, st, cfg)
	defer release()
	sweep := func(ctx context.Context) {
		if _, err := lambda.NewHandler(reaper).Invoke(ctx, []byte(`{"detail-type":"Scheduled Event","detail":{}}`)); err != nil {
			t.Fatalf("sweep: %v", err)
		}
	}
	sweep(ctx) // StaleLocksReaped, OutboundSentByReaper (msgs[2])
	sqsAPI.mode.Store(int32(outboundFail))
	deliver(h, "unsent2", msgs[3])
	sqsAPI.mode.Store(int32(outboundRefused))
	sweep(ctx) // OutboundDeadLettered (reaper)
	sqsAPI.mode.Store(int32(outboundPass))
	short, cancel := context.WithTimeout(ctx, rcfg.Margin/2)
	defer cancel()
	sweep(short) // SweepIncomplete: no time left for a shard

	// The ingress.
	icfg, err := ingressapp.FromEnv(lookup)
	if err != nil {
		t.Fatal(err)
	}
	app, err := ingressapp.New(icfg, ingressapp.Deps{DynamoDB: st.DynamoDB, SQS: sqsAPI, Logs: &bytes.Buffer{}, Metrics: emf})
	if err != nil {
		t.Fatal(err)
	}
	ingress := app.Handler()
	call := func(method, path, key, body string) int {
		req := events.LambdaFunctionURLRequest{RawPath: path, Body: body, Headers: map[string]string{"content-type": "application/json"},
			RequestContext: events.LambdaFunctionURLRequestContext{
				HTTP:       events.LambdaFunctionURLRequestContextHTTPDescription{Method: method, Path: path},
				Authorizer: &events.LambdaFunctionURLRequestContextAuthorizerDescription{IAM: &events.LambdaFunctionURLRequestContextAuthorizerIAMDescription{CallerID: "ops-test"}},
			}}
		if key != "" {
			req.Headers[strings.ToLower(ingressapp.KeyHeader)] = key
		}
		resp, err := ingress(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	post := func(key string, m example.Message) int {
		return call(http.MethodPost, ingressapp.RequestsPath, key, m.Body)
	}
	k := "ops-" + awstest.RunID()
	want := func(what string, got, code int) {
		t.Helper()
		if got != code {
			t.Errorf("ingress, %s: %d, want %d", what, got, code)
		}
	}
	want("first POST", post(k+"-1", msgs[4]), http.StatusAccepted)                                                      // Accepted
	want("retried POST", post(k+"-1", msgs[4]), http.StatusAccepted)                                                    // Replayed
	want("the key with another body", post(k+"-1", msgs[0]), http.StatusUnprocessableEntity)                            // Mismatch
	want("GET", call(http.MethodGet, ingressapp.RequestsPath+"/"+k+"-1", "", ""), http.StatusOK)                        // StatusRead
	want("GET of no request", call(http.MethodGet, ingressapp.RequestsPath+"/"+k+"-none", "", ""), http.StatusNotFound) // NotFound
	want("DELETE", call(http.MethodDelete, ingressapp.RequestsPath, "", ""), http.StatusMethodNotAllowed)               // Rejected
	inner := 0
	sqsAPI.before = func(*sqs.SendMessageInput) error { // the same request while the first sends it
		sqsAPI.before = nil
		inner = post(k+"-2", msgs[4])
		return nil
	}
	want("first POST of a key retried at once", post(k+"-2", msgs[4]), http.StatusAccepted)
	want("the retry while the first sends", inner, http.StatusConflict) // Conflict
	sqsAPI.before = func(*sqs.SendMessageInput) error { return errors.New("injected: queue unreachable") }
	want("POST with the queue down", post(k+"-3", msgs[4]), http.StatusServiceUnavailable) // Unavailable
	sqsAPI.before = nil
	return parseEMF(t, lines.Bytes())
}

// holdLease takes a lease on a key of the consumer's scope, with the consumer's layout
// and shards, whose holder hangs until release: for the reaper, a consumer that died.
func holdLease(t *testing.T, st *exampletest.Stack, cfg consumerapp.Config) (release func()) {
	t.Helper()
	layout := cfg.Layout
	if layout.Table == "" {
		layout.Table = cfg.IdempotencyTable
	}
	store, err := persistence.NewDynamoStoreLayout(st.DynamoDB, layout)
	if err != nil {
		t.Fatal(err)
	}
	c, err := idem.New(idem.Config{Store: store, Scope: cfg.Scope, Shards: cfg.Shards, DefaultLease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	started, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_, _ = c.Do(context.Background(), &idem.Request{Key: "ops-hung-" + awstest.RunID(), Payload: []byte(`{}`)},
			func(context.Context, *idem.Request) (idem.Result, error) {
				close(started)
				<-stop
				return idem.Result{}, nil
			})
	}()
	<-started
	var once sync.Once
	return func() { once.Do(func() { close(stop); <-done }) }
}
