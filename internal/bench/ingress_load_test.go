package bench_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/funcurl"
	"github.com/idemgo/sqs-lambda-consumer/internal/lambdaenv"
	"github.com/idemgo/sqs-lambda-consumer/internal/localfn"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
	"github.com/idemgo/sqs-lambda-consumer/internal/syncw"
)

// TestIngressLoad is the scripted load of BENCHMARKS.md ("The ingress"), run by `make
// bench-ingress`: INGRESS_LOAD_REQUESTS distinct first requests (default 1000), then as
// many retries of them, then as many status reads, each phase by INGRESS_LOAD_CLIENTS
// concurrent clients (default 8) over real HTTP on loopback, against moto. It prints
// each phase's median and p99 latency as the client sees it, its requests per second,
// and the AWS requests per request counted by SDK middleware. INGRESS_LOAD_MODE picks
// where the ingress runs: "in-process" (its handler in the test, behind funcurl) or
// "environments" (its bootstrap as 4 Lambda execution environments, as `idemctl serve`
// runs it; AWS requests are not counted then).
func TestIngressLoad(t *testing.T) {
	if os.Getenv("INGRESS_LOAD") == "" {
		t.Skip("the load of BENCHMARKS.md: set INGRESS_LOAD=1 (make bench-ingress)")
	}
	requests, clients := envInt("INGRESS_LOAD_REQUESTS", 1000), envInt("INGRESS_LOAD_CLIENTS", 8)
	mode := os.Getenv("INGRESS_LOAD_MODE")
	if mode == "" {
		mode = "in-process"
	}
	in := newIngress(t)
	if mode == "environments" {
		in.url = in.environmentsURL(t)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	msgs := exampletest.Traffic(t, in.ex).Traffic(rand.New(rand.NewPCG(7, 1)), in.run+"b", requests, max(1, requests/2))
	if err := example.Prepare(context.Background(), in.ex, in.st.DynamoDB, in.lookup, msgs); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, requests)
	for i := range keys {
		keys[i] = in.run + "-" + strconv.Itoa(i)
	}
	t.Logf("| phase (%s, %d clients) | requests | median | p99 | requests/s | AWS requests per request |", mode, clients)
	t.Logf("|---|---|---|---|---|---|")
	for _, phase := range []struct {
		name   string
		method string
		want   int
	}{
		{"first POST (202)", http.MethodPost, http.StatusAccepted},
		{"retried POST (202 from the records)", http.MethodPost, http.StatusAccepted},
		{"GET status (accepted)", http.MethodGet, http.StatusOK},
	} {
		in.calls.Reset()
		lat := make([]time.Duration, requests)
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range clients {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= requests {
						return
					}
					t0 := time.Now()
					var code int
					var body []byte
					var err error
					if phase.method == http.MethodPost {
						code, body, err = in.do(client, http.MethodPost, ingressapp.RequestsPath, keys[i], []byte(msgs[i].Body))
					} else {
						code, body, err = in.do(client, http.MethodGet, ingressapp.RequestsPath+"/"+keys[i], "", nil)
					}
					lat[i] = time.Since(t0)
					if err != nil || code != phase.want {
						t.Errorf("%s %d: %v %d %s", phase.name, i, err, code, body)
						return
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		slices.Sort(lat)
		perRequest := "not counted (other processes)"
		if mode == "in-process" {
			perRequest = fmt.Sprintf("%.2f %v", float64(in.calls.Total())/float64(requests), in.calls.Ops())
		}
		t.Logf("| %s | %d | %.1f ms | %.1f ms | %.0f | %s |", phase.name, requests, ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]),
			float64(requests)/elapsed.Seconds(), perRequest)
	}
	out, err := in.st.SQS.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(in.queue), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := out.Attributes["ApproximateNumberOfMessages"]; n != strconv.Itoa(requests) {
		t.Errorf("%s messages on the input queue, want %d: one per accepted request", n, requests)
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// ingress is the template's resources (with the wired example's block, or EXAMPLE's) on
// the local endpoint, and the ingress in this process behind a function URL played over
// real HTTP on loopback (internal/funcurl), as functions/ingress/ingressapp's tests set
// it up.
type ingress struct {
	ex    example.Example
	st    *exampletest.Stack
	env   map[string]string
	url   string         // the ingress's base URL
	calls *awstest.Calls // every AWS request the in-process ingress made
	logs  io.Writer      // the ingress's logs and metrics, kept for nothing
	queue string         // the input queue
	run   string         // names this test's keys and business ids
}

func newIngress(t *testing.T) *ingress {
	t.Helper()
	ex := exampletest.Example(t)
	st := exampletest.Up(t, ex)
	in := &ingress{ex: ex, st: st, calls: awstest.NewCalls(), logs: syncw.New(&bytes.Buffer{}), run: "load" + awstest.RunID(),
		env: st.Vars(map[string]string{"IDEMPOTENCY_TTL": "1h", "METRICS_NAMESPACE": "Test", "LEASE_GRACE": "2s",
			"DEADLINE_MARGIN": "1s", "CACHE_SIZE": "0"})}
	in.queue = in.env["INPUT_QUEUE_URL"]
	cfg, err := ingressapp.FromEnv(in.lookup)
	if err != nil {
		t.Fatal(err)
	}
	ddb := dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, in.calls.APIOption)
		o.RetryMaxAttempts = 1
	})
	sq := sqs.NewFromConfig(awstest.Config(t), func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, in.calls.APIOption)
		o.RetryMaxAttempts = 1
	})
	app, err := ingressapp.New(cfg, ingressapp.Deps{DynamoDB: ddb, SQS: sq, Logs: in.logs, Metrics: in.logs})
	if err != nil {
		t.Fatal(err)
	}
	in.url = in.listen(t, app.Invoke)
	return in
}

func (in *ingress) lookup(k string) (string, bool) { v, ok := in.env[k]; return v, ok }

// listen serves invoke behind a local function URL and returns its base URL.
func (in *ingress) listen(t *testing.T, invoke func(context.Context, []byte) ([]byte, error)) string {
	t.Helper()
	url, stop, err := funcurl.Listen("127.0.0.1:0", &funcurl.Server{Invoke: invoke, Caller: funcurl.LocalCaller("test")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}

// environmentsURL serves the ingress's bootstrap, built for this host, as 4 execution
// environments behind a local function URL, on the same resources.
func (in *ingress) environmentsURL(t *testing.T) string {
	t.Helper()
	dir, bins, err := lambdaenv.BuildTemp(context.Background(), "../..", "./functions/ingress")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	tpl, err := stack.LoadFor(exampletest.TemplatePath(), in.ex)
	if err != nil {
		t.Fatal(err)
	}
	envs, invoke, err := localfn.Ingress(context.Background(), tpl, bins[0], 4, in.lookup, awstest.Config(t), awstest.Endpoint(t), in.logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, e := range envs {
			_ = e.Close()
		}
	})
	return in.listen(t, invoke)
}

// do sends one request; key "" sends no Idempotency-Key header.
func (in *ingress) do(client *http.Client, method, path, key string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, in.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(ingressapp.KeyHeader, key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
