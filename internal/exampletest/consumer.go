package exampletest

import (
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
)

// TestEnv overrides the template's environment for the consumer's tests: a short
// retention and lease grace, few shards, a small cache, a metrics namespace of their own.
var TestEnv = map[string]string{
	"IDEMPOTENCY_TTL": "1h", "LEASE_GRACE": "5s", "INFLIGHT_SHARDS": "2", "MAX_CONCURRENCY": "4",
	"DEADLINE_MARGIN": "2s", "CACHE_SIZE": "100", "METRICS_NAMESPACE": "Test",
}

// Vars is the functions' environment on the stack's resources, with each of overrides
// copied on top in turn.
func (s *Stack) Vars(overrides ...map[string]string) map[string]string {
	m := map[string]string{}
	for _, v := range s.Env.Vars {
		m[v.Name] = v.Value
	}
	for _, o := range overrides {
		maps.Copy(m, o)
	}
	return m
}

// Config is the consumer's configuration as the function reads it (consumerapp.FromEnvOf)
// from Vars(TestEnv, overrides...), running the stack's example whatever example is
// wired.
func (s *Stack) Config(t testing.TB, overrides ...map[string]string) consumerapp.Config {
	t.Helper()
	cfg, err := consumerapp.FromEnvOf([]example.Example{s.Example}, LookupIn(s.Vars(append([]map[string]string{TestEnv}, overrides...)...)))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// LookupIn reads the variables of m, as os.LookupEnv reads the process's.
func LookupIn(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// InputARN is the ARN of the consumer's input queue: the resource whose URL QUEUE_URL
// holds.
func (s *Stack) InputARN(t testing.TB) string {
	t.Helper()
	input := s.Must(t, "QUEUE_URL")
	for _, r := range s.Env.Resources {
		if r.URL == input {
			return r.ARN
		}
	}
	t.Fatalf("no resource has the URL of QUEUE_URL %s", input)
	return ""
}

// Record is m as Lambda delivers it from the FIFO input queue sourceARN, with message id
// id: the key as the idempotency-key attribute and (hashed when SQS needs it) as
// deduplication id. A message without a key still has a deduplication id, as every
// message of a FIFO queue without content-based deduplication does: the producer's own
// ("nokey-" + the business id), which the consumer takes as the key.
func Record(m example.Message, id, sourceARN string) events.SQSMessage {
	var attrs map[string]events.SQSMessageAttribute
	if m.Key != "" {
		attrs = map[string]events.SQSMessageAttribute{idem.KeyAttribute: {DataType: "String", StringValue: aws.String(m.Key)}}
	}
	r := FIFORecord(id, m.Group, m.Body, attrs)
	r.Attributes["MessageDeduplicationId"] = outbox.DeduplicationID("nokey-" + m.ID)
	if m.Key != "" {
		r.Attributes["MessageDeduplicationId"] = outbox.DeduplicationID(m.Key)
	}
	r.EventSourceARN = sourceARN
	return r
}

// Records are the records of msgs (Record), message id prefix + the message's business id.
func Records(msgs []example.Message, prefix, sourceARN string) []events.SQSMessage {
	recs := make([]events.SQSMessage, len(msgs))
	for i, m := range msgs {
		recs[i] = Record(m, prefix+m.ID, sourceARN)
	}
	return recs
}

// Spread returns groups messages of ex's traffic of run, each in a group of its own
// (not yet prepared: example.Prepare). An example without traffic skips the test.
func Spread(tb testing.TB, ex example.Example, rng *rand.Rand, run string, groups int) []example.Message {
	tb.Helper()
	gen := Traffic(tb, ex)
	var out []example.Message
	for n := groups; len(out) < groups && n <= 64*groups; n *= 2 {
		out = out[:0]
		seen := map[string]bool{}
		for _, m := range gen.Traffic(rng, run, n, groups) {
			if !seen[m.Group] && len(out) < groups {
				seen[m.Group] = true
				out = append(out, m)
			}
		}
	}
	if len(out) < groups {
		tb.Fatalf("example %s: its traffic over %d groups uses %d of them", ex.Name(), groups, len(out))
	}
	return out
}
