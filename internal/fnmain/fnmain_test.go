package fnmain

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
	"github.com/idemgo/sqs-lambda-consumer/internal/tracing"
)

// TestSetup: a configuration error fails the init as it is; a tracing setting the
// bootstrap cannot honour fails it before the handler is built; otherwise the handler
// is built with the function's keys, the region, and no tracer when tracing is off.
func TestSetup(t *testing.T) {
	t.Setenv("AWS_REGION", "eu-west-1")
	keys, err := sqsmsg.NewKeys([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	var built []Init
	build := func(in Init) (any, error) { built = append(built, in); return "handler", nil }
	bad := errors.New("consumer configuration: QUEUE_URL is not set")
	if _, err := setup(context.Background(), env(nil), "consumer", bad, keys, "", build); !errors.Is(err, bad) || len(built) != 0 {
		t.Errorf("a configuration error: %v, %d handlers built; want it as it is, none built", err, len(built))
	}
	if _, err := setup(context.Background(), env(map[string]string{tracing.VarExport: tracing.ExportFile}), "consumer", nil, keys, "", build); err == nil || len(built) != 0 {
		t.Errorf("TRACING=file without TRACING_FILE: %v, %d handlers built; want an error, none built", err, len(built))
	}
	h, err := setup(context.Background(), env(nil), "consumer", nil, keys, "", build)
	if err != nil || h != "handler" || len(built) != 1 {
		t.Fatalf("setup: %v, %v, %d built", h, err, len(built))
	}
	if in := built[0]; in.Keys != keys || in.AWS.Region != "eu-west-1" || in.Tracer != nil {
		t.Errorf("built with keys %p (want %p), region %q, tracer %v", in.Keys, keys, in.AWS.Region, in.Tracer)
	}
}
