package ingressapp_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/funcurl"
	"github.com/idemgo/sqs-lambda-consumer/internal/lambdaenv"
	"github.com/idemgo/sqs-lambda-consumer/internal/localfn"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
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
	f := newFixture(t, options{})
	if mode == "environments" {
		f.url = environmentsURL(t, f)
	}
	f.http = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	msgs := f.traffic(t, requests)
	keys := make([]string, requests)
	for i := range keys {
		keys[i] = f.key(strconv.Itoa(i))
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
		f.calls.Reset()
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
					var r reply
					var err error
					if phase.method == http.MethodPost {
						r, err = f.do(t, f.http, http.MethodPost, ingressapp.RequestsPath, keys[i], []byte(msgs[i].Body))
					} else {
						r, err = f.do(t, f.http, http.MethodGet, ingressapp.RequestsPath+"/"+keys[i], "", nil)
					}
					lat[i] = time.Since(t0)
					if err != nil || r.code != phase.want {
						t.Errorf("%s %d: %v %s", phase.name, i, err, r)
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
			perRequest = fmt.Sprintf("%.2f %v", float64(f.calls.Total())/float64(requests), f.calls.Ops())
		}
		t.Logf("| %s | %d | %.1f ms | %.1f ms | %.0f | %s |", phase.name, requests, ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]),
			float64(requests)/elapsed.Seconds(), perRequest)
	}
	out, err := f.st.SQS.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(f.queue), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := out.Attributes["ApproximateNumberOfMessages"]; n != strconv.Itoa(requests) {
		t.Errorf("%s messages on the input queue, want %d: one per accepted request", n, requests)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// environmentsURL serves the ingress's bootstrap, built for this host, as 4 execution
// environments behind a local function URL, on the fixture's resources.
func environmentsURL(t *testing.T, f *fixture) string {
	t.Helper()
	dir, bins, err := lambdaenv.BuildTemp(context.Background(), "../../..", "./functions/ingress")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	tpl, err := stack.LoadFor("../../../template.yaml", f.ex)
	if err != nil {
		t.Fatal(err)
	}
	envs, invoke, err := localfn.Ingress(context.Background(), tpl, bins[0], 4, f.lookup, awstest.Config(t), awstest.Endpoint(t), &f.logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, e := range envs {
			_ = e.Close()
		}
	})
	url, stop, err := funcurl.Listen("127.0.0.1:0", &funcurl.Server{Invoke: invoke, Caller: funcurl.LocalCaller("test")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}
