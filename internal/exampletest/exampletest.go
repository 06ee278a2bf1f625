// Package exampletest gives tests the wired example and its resources: the queues and
// tables of template.yaml, with the example's block, created on the test's endpoint
// (moto) by the same code as `idemctl up`. Tests that use it name no example and no
// resource: they read both from the template. A test that needs one of the example's
// optional interfaces gets it through Traffic or Checker, which skip the test, with the
// interface to implement, when the example lacks it. Consume plays the SQS event source
// mapping over a queue with the real SDK, for tests that run the consumer after a
// producer. For an example that calls outside HTTP services (example.Caller), Up starts
// a stand-in for each (internal/gateway) and gives its variable the stand-in's URL.
//
// It is test support that stays when a team deletes the development tooling
// (docs/tooling.md): it imports none of it.
package exampletest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
	"github.com/idemgo/sqs-lambda-consumer/internal/gateway"
	"github.com/idemgo/sqs-lambda-consumer/internal/stack"
)

// Example returns the example the tests run: the one the EXAMPLE variable names, or
// the wired default.
func Example(t testing.TB) example.Example {
	t.Helper()
	ex, err := example.FromEnv(wiring.Examples, os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// Traffic returns ex's traffic generator (example.Traffic), or skips the test with the
// reason: `example "x" has no traffic generator (implement example.Traffic)`.
func Traffic(t testing.TB, ex example.Example) example.Traffic {
	t.Helper()
	gen, err := example.TrafficOf(ex)
	skipOn(t, err)
	return gen
}

// Checker returns ex's check of its tables (example.Checker), or skips the test with the
// reason. Called after a test's other checks, it keeps their verdict: a failure before
// the skip still fails the test.
func Checker(t testing.TB, ex example.Example) example.Checker {
	t.Helper()
	c, err := example.CheckerOf(ex)
	skipOn(t, err)
	return c
}

// Confirms returns how ex tells which message an outbound message confirms and the
// variable of its outbound queue, or nil and "" when ex is no example.Confirmer (or
// names no queue): a test then has no outbound message to count.
func Confirms(ex example.Example) (confirms func(body string) (string, bool), queueVar string) {
	c, err := example.ConfirmerOf(ex)
	if err != nil || c.OutboundQueue() == "" {
		return nil, ""
	}
	return c.Confirms, c.OutboundQueue()
}

// skipOn skips the test with err as the reason, unless err is nil.
func skipOn(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Skip(err)
	}
}

// TemplatePath is the repository's template.yaml: beside the go.mod of the module the
// test runs in (a test runs in its package's folder). It reads no source path from the
// binary, which a build with -trimpath does not keep.
func TemplatePath() string {
	dir, err := os.Getwd()
	if err != nil {
		return "template.yaml"
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "template.yaml")
		}
		if filepath.Dir(d) == d {
			return filepath.Join(dir, "template.yaml")
		}
	}
}

// Stack is one test's copy of the template's resources.
type Stack struct {
	Example  example.Example
	Env      *stack.Env
	DynamoDB *dynamodb.Client
	SQS      *sqs.Client
	// Gateways are the stand-ins of the example's outside services (example.Caller), by
	// the variable that holds the URL: stopped after the test.
	Gateways map[string]*gateway.Server
}

var seq atomic.Int64

// Up creates the template's queues and tables, with ex's block, under a stack name
// unique to this test run, and returns their environment.
func Up(t testing.TB, ex example.Example) *Stack {
	t.Helper()
	tpl, err := stack.LoadFor(TemplatePath(), ex)
	if err != nil {
		t.Fatal(err)
	}
	return UpTemplate(t, ex, tpl)
}

// UpTemplate is Up with a template the test changed (SetParameters, for instance).
func UpTemplate(t testing.TB, ex example.Example, tpl *stack.Template) *Stack {
	t.Helper()
	s := &Stack{Example: ex, DynamoDB: awstest.DynamoDB(t), SQS: awstest.SQS(t)}
	// Short: resources are named <stack>-<LogicalId>, and SQS allows 80 characters.
	name := fmt.Sprintf("t%s%d", awstest.RunID(), seq.Add(1))
	env, err := stack.Up(context.Background(), tpl, stack.Clients{SQS: s.SQS, DynamoDB: s.DynamoDB, SecretsManager: awstest.SecretsManager(t)}, name, nil)
	if err != nil {
		t.Fatalf("create the template's resources for example %s: %v", ex.Name(), err)
	}
	s.Env = env
	s.Gateways = map[string]*gateway.Server{}
	for _, name := range example.ServicesOf(ex) {
		g, err := gateway.Start("", nil)
		if err != nil {
			t.Fatalf("example %s: a stand-in for %s: %v", ex.Name(), name, err)
		}
		t.Cleanup(func() { _ = g.Close() })
		s.Gateways[name] = g
		env.Set(name, g.URL())
	}
	return s
}

// Lookup reads one of the functions' variables (example.Lookup).
func (s *Stack) Lookup(name string) (string, bool) { return s.Env.Lookup(name) }

// Must returns the variable name, and fails the test when the template does not set it.
func (s *Stack) Must(t testing.TB, name string) string {
	t.Helper()
	v, ok := s.Env.Lookup(name)
	if !ok || v == "" {
		t.Fatalf("the template sets no %s", name)
	}
	return v
}

// ConfigCase is a configuration for an example's NewHandler: valid (WantErr empty), or
// refused with an error containing WantErr.
type ConfigCase[C any] struct {
	Name    string
	Config  C
	WantErr string
}

// CheckConfigs runs each case through newHandler, one subtest a case: a valid
// configuration gives a handler, a refused one an error containing WantErr.
func CheckConfigs[C any](t *testing.T, newHandler func(C) (idem.Handler, error), cases []ConfigCase[C]) {
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			h, err := newHandler(c.Config)
			if c.WantErr == "" {
				if err != nil || h == nil {
					t.Fatalf("NewHandler = %v, %v; want a handler", h, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.WantErr) {
				t.Fatalf("NewHandler error = %v, want one containing %q", err, c.WantErr)
			}
		})
	}
}

// Buffer collects what several goroutines write (a function's log lines in a test); it
// is safe for concurrent Write and String.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
