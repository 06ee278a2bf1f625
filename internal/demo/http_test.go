package demo_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/demo"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
	"github.com/idemgo/sqs-lambda-consumer/internal/funcurl"
)

// TestHTTPPhase plays a small demo whose HTTP phase sends a third of the messages
// through the ingress (in this process, behind a function URL on loopback), by every
// kind of client: each request is accepted once and completed, each other body is
// refused with 422, the decoys are never applied (the example's check), and the
// summary's figures trace to what was observed: the messages the ingress sent (counted
// on its SQS client) are in "messages sent", the answers by code are the clients'.
func TestHTTPPhase(t *testing.T) {
	ex := exampletest.Example(t)
	exampletest.Traffic(t, ex)
	exampletest.Checker(t, ex)
	st := exampletest.Up(t, ex)
	vars := st.Vars()
	cfg, err := ingressapp.FromEnv(exampletest.LookupIn(vars))
	if err != nil {
		t.Fatal(err)
	}
	calls := awstest.NewCalls()
	metrics := &demo.IngressMetrics{}
	app, err := ingressapp.New(cfg, ingressapp.Deps{
		DynamoDB: awstest.DynamoDB(t), SQS: awstest.SQS(t, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, calls.APIOption) }),
		Logs: io.Discard, Metrics: metrics,
	})
	if err != nil {
		t.Fatal(err)
	}
	caller := funcurl.LocalCaller("test")
	// The key the consumer sees for the caller's requests (the ingress scopes them).
	ns, ok := ingressapp.Namespace(cfg.KeyScope, caller)
	if !ok {
		t.Fatalf("key scope %q: no namespace for the local caller", cfg.KeyScope)
	}
	url, stop, err := funcurl.Listen("127.0.0.1:0", &funcurl.Server{Invoke: app.Invoke, Caller: caller})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	w := &watched{SQSAPI: st.SQS, url: vars["QUEUE_URL"], received: map[string]bool{}}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const requests = 15
	s, err := demo.Run(ctx, demo.Options{
		Env: vars, SQS: w, DynamoDB: st.DynamoDB, Messages: 45, Groups: 4, Consumers: 2, Seed: 9, Out: &out, Logs: &exampletest.Buffer{},
		HTTP: &demo.HTTPOptions{URL: url, Requests: requests, Sent: metrics.Sent, ConsumerKey: func(key string) string { return idem.CallerKey(ns, key) }},
	})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	var printed bytes.Buffer
	s.Print(&printed)
	t.Log(printed.String())
	h := s.HTTP
	if h == nil {
		t.Fatal("no HTTP phase in the summary")
	}
	sends := calls.Ops()["SendMessage"]
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"distinct keys", h.Keys, requests},
		{"accepted", h.Accepted, requests},
		{"completed", h.Completed, requests},
		{"refused with 422", h.Codes[http.StatusUnprocessableEntity], h.Mismatches},
		{"ingress sends, reported", h.IngressSent, sends},
		{"ingress sends, one per accepted request", sends, requests},
		{"messages sent: the producer's and the ingress's", s.Sent, w.accepted + sends},
		{"delivered", s.Delivered, len(w.received)},
		{"business effects", s.Applied, 45},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
		}
	}
	for _, kind := range demo.ClientKinds {
		if h.Kinds[kind] == 0 {
			t.Errorf("no %s client", kind)
		}
	}
	if !s.OK || !h.OK() || h.Mismatches == 0 {
		t.Errorf("the demo is not OK (HTTP %+v)", *h)
	}
	for label, want := range map[string]string{
		"  sent by the ingress (HTTP phase)":                fmt.Sprint(sends),
		"HTTP requests through the ingress (distinct keys)": fmt.Sprint(requests),
		"  accepted (202 or 200) / completed (GET)":         fmt.Sprintf("%d / %d", requests, requests),
		"  same key, another body: refused with 422":        fmt.Sprintf("%d (%d sent)", h.Mismatches, h.Mismatches),
	} {
		if v, ok := shows(printed.String(), label, want); !ok {
			t.Errorf("%q: printed %q, want %q", label, v, want)
		}
	}
}
