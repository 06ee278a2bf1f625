package ingressapp_test

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/ingress/ingressapp"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/exampletest"
)

// TestFromEnv reads the ingress's configuration as the template sets it: the defaults of
// what it leaves out, the bounds of MAX_BODY_BYTES, and every mistake at once.
func TestFromEnv(t *testing.T) {
	f := newFixture(t, options{})
	env := maps.Clone(f.env)
	for _, name := range []string{"IDEMPOTENCY_TTL", "ACCEPT_WINDOW", "LEASE_GRACE", "MAX_BODY_BYTES", "REQUIRE_IAM_CALLER", "INGRESS_KEY_SCOPE", "METRICS_NAMESPACE"} {
		delete(env, name)
	}
	cfg, err := ingressapp.FromEnv(exampletest.LookupIn(env))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TTL != 168*time.Hour || cfg.AcceptWindow != 10*time.Second || cfg.LeaseGrace != 30*time.Second || cfg.MaxBodyBytes != ingressapp.DefaultMaxBodyBytes ||
		!cfg.RequireIAMCaller || cfg.KeyScope != ingressapp.ScopeCaller || cfg.MetricsNamespace != "IdempotentConsumer" {
		t.Errorf("defaults: TTL %v, accept window %v, lease grace %v, max body %d, IAM caller required %v, key scope %q, namespace %q; want 168h, 10s, 30s, %d, true, %q, IdempotentConsumer",
			cfg.TTL, cfg.AcceptWindow, cfg.LeaseGrace, cfg.MaxBodyBytes, cfg.RequireIAMCaller, cfg.KeyScope, cfg.MetricsNamespace, ingressapp.DefaultMaxBodyBytes, ingressapp.ScopeCaller)
	}
	if cfg.IdempotencyTable == "" || cfg.IdempotencyTable != cfg.Layout.Table || cfg.Keys == nil || cfg.Example == nil || cfg.Example.Name() != f.ex.Name() {
		t.Errorf("cfg %+v: want the consumer's table from its layout, the stack's keys and the example %s", cfg, f.ex.Name())
	}

	// What each variable allows but the whole cannot work with is refused too.
	same := maps.Clone(env)
	same["INGRESS_TABLE"] = env["IDEMPOTENCY_TABLE"]
	if _, err := ingressapp.FromEnv(exampletest.LookupIn(same)); err == nil || !strings.Contains(err.Error(), "INGRESS_TABLE must not be the consumer's IDEMPOTENCY_TABLE") {
		t.Errorf("INGRESS_TABLE = IDEMPOTENCY_TABLE: %v, want it refused", err)
	}

	standard := maps.Clone(env)
	standard["INPUT_QUEUE_URL"] = strings.TrimSuffix(env["INPUT_QUEUE_URL"], ".fifo")
	if _, err := ingressapp.FromEnv(exampletest.LookupIn(standard)); err == nil || !strings.Contains(err.Error(), "INPUT_QUEUE_URL") {
		t.Errorf("a standard INPUT_QUEUE_URL: %v, want it refused", err)
	}

	// New checks the configuration too: one built by hand can skip FromEnv.
	broken := cfg
	broken.QueueURL = ""
	if _, err := ingressapp.New(broken, ingressapp.Deps{DynamoDB: f.st.DynamoDB, SQS: f.st.SQS}); err == nil || !strings.Contains(err.Error(), "INPUT_QUEUE_URL is not set") {
		t.Errorf("New without a queue: %v, want INPUT_QUEUE_URL named", err)
	}

	if _, err := ingressapp.New(cfg, ingressapp.Deps{SQS: f.st.SQS}); err == nil || !strings.Contains(err.Error(), "clients are required") {
		t.Errorf("New without DynamoDB: %v, want the clients asked for", err)
	}
	if _, err := ingressapp.New(cfg, ingressapp.Deps{DynamoDB: f.st.DynamoDB}); err == nil || !strings.Contains(err.Error(), "clients are required") {
		t.Errorf("New without SQS: %v, want the clients asked for", err)
	}
	noField := cfg
	noField.KeyRule = idem.KeyRule{Source: idem.KeyFromField}
	if _, err := ingressapp.New(noField, ingressapp.Deps{DynamoDB: f.st.DynamoDB, SQS: f.st.SQS}); err == nil {
		t.Error("New with a field key rule without its field: no error")
	}
	for what, change := range map[string]func(*ingressapp.Config){
		"no TTL":                func(c *ingressapp.Config) { c.TTL = 0 },
		"no acceptance window":  func(c *ingressapp.Config) { c.AcceptWindow = 0 },
		"no lease grace":        func(c *ingressapp.Config) { c.LeaseGrace = 0 },
		"no body":               func(c *ingressapp.Config) { c.MaxBodyBytes = 0 },
		"a body past the limit": func(c *ingressapp.Config) { c.MaxBodyBytes = sqsmsg.MaxSQSMessageBytes - 8*1024 + 1 },
		"no example":            func(c *ingressapp.Config) { c.Example = nil },
		"no IAM caller required in the caller scope": func(c *ingressapp.Config) {
			c.RequireIAMCaller, c.KeyScope = false, ingressapp.ScopeCaller
		},
		"no IAM caller required in the account scope": func(c *ingressapp.Config) {
			c.RequireIAMCaller, c.KeyScope = false, ingressapp.ScopeAccount
		},
		"a key scope that does not exist": func(c *ingressapp.Config) { c.KeyScope = "everyone" },
		"a static partition key without a sort key": func(c *ingressapp.Config) {
			c.Layout.Table, c.Layout.SortKey, c.Layout.StaticPartitionKey = c.IdempotencyTable, "", "idempotency"
		},
	} {
		bad := cfg
		change(&bad)
		if err := bad.Check(); err == nil {
			t.Errorf("Check of %s: no error", what)
		}
		if _, err := ingressapp.New(bad, ingressapp.Deps{DynamoDB: f.st.DynamoDB, SQS: f.st.SQS}); err == nil {
			t.Errorf("New with %s: no error", what)
		}
	}
	unsigned := cfg
	unsigned.Keys = nil
	if _, err := ingressapp.New(unsigned, ingressapp.Deps{DynamoDB: f.st.DynamoDB, SQS: f.st.SQS}); err == nil || !strings.Contains(err.Error(), "no stack secret") {
		t.Errorf("New without the stack's keys: %v, want them asked for", err)
	}

	// The largest body leaves 8 KiB of SQS's message for the key and the consumer's
	// dead-letter attributes.
	largest := sqsmsg.MaxSQSMessageBytes - 8*1024
	env["MAX_BODY_BYTES"] = strconv.Itoa(largest)
	if cfg, err := ingressapp.FromEnv(exampletest.LookupIn(env)); err != nil || cfg.MaxBodyBytes != largest {
		t.Errorf("MAX_BODY_BYTES=%d: %d, %v; want it taken", largest, cfg.MaxBodyBytes, err)
	}
	env["MAX_BODY_BYTES"] = strconv.Itoa(largest + 1)
	if _, err := ingressapp.FromEnv(exampletest.LookupIn(env)); err == nil || !strings.Contains(err.Error(), "MAX_BODY_BYTES") {
		t.Errorf("MAX_BODY_BYTES=%d: %v, want it refused", largest+1, err)
	}
	delete(env, "MAX_BODY_BYTES")

	// Everything wrong at once is reported at once: the variables the reader refuses, and
	// an example the build does not have.
	bad := maps.Clone(env)
	delete(bad, "INGRESS_TABLE")
	bad["IDEMPOTENCY_TTL"] = "soon"
	bad[example.Var] = "no-such-example"
	_, err = ingressapp.FromEnv(exampletest.LookupIn(bad))
	if !errors.Is(err, example.ErrUnknown) {
		t.Errorf("EXAMPLE=no-such-example: %v, want example.ErrUnknown", err)
	}
	for _, want := range []string{"ingress configuration: ", "INGRESS_TABLE is not set", `IDEMPOTENCY_TTL="soon"`, `"no-such-example"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %s", err, want)
		}
	}
}

// TestLogsAndMetricsGoToStandardOutputByDefault: an ingress built without Deps.Logs and
// Deps.Metrics writes its request log line and its metrics to standard output, where
// Lambda collects both. (Not parallel: it swaps os.Stdout while New runs.)
func TestLogsAndMetricsGoToStandardOutputByDefault(t *testing.T) {
	f := newFixture(t, options{})
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	app, err := ingressapp.New(f.cfg, ingressapp.Deps{DynamoDB: f.st.DynamoDB, SQS: f.st.SQS})
	os.Stdout = stdout
	if err != nil {
		t.Fatal(err)
	}
	resp, err := app.Handler()(context.Background(), event(http.MethodGet, "/nowhere", nil, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(out), `"msg":"ingress request"`) || !strings.Contains(string(out), `"_aws"`) {
		t.Errorf("a request to no route: %d; standard output %q; want 404, its log line and its metrics", resp.StatusCode, out)
	}
}
