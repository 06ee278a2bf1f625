package consumerapp_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
	"github.com/idemgo/sqs-lambda-consumer/internal/awstest"
)

// TestLeaseFitsVisibility: the consumer refuses to start (at init) when a crashed
// invocation's lease (timeout + grace) would outlive its message's visibility timeout.
func TestLeaseFitsVisibility(t *testing.T) {
	base := minimalEnv(t, newFixture(t)) // the required variables only
	for _, tc := range []struct {
		timeout, grace, visibility string
		ok                         bool
	}{
		{"30s", "120s", "180s", true},  // the template's largest values
		{"30s", "149s", "180s", true},  // 179 s < 180 s
		{"30s", "150s", "180s", false}, // equal: the lease may still hold at the redelivery
		{"30s", "900s", "180s", false}, // the old LeaseGraceSeconds maximum
		{"", "900s", "180s", true},     // no timeout known: not checked
	} {
		env := map[string]string{"LEASE_GRACE": tc.grace, "VISIBILITY_TIMEOUT": tc.visibility}
		if tc.timeout != "" {
			env["FUNCTION_TIMEOUT"] = tc.timeout
		}
		for k, v := range base {
			env[k] = v
		}
		// FromEnv checks the configuration (Config.Check), and New checks it again for a
		// Config built by hand: either refuses.
		cfg, err := consumerapp.FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err == nil {
			_, err = consumerapp.New(cfg, consumerapp.Deps{DynamoDB: awstest.DynamoDB(t), SQS: awstest.SQS(t), Logs: io.Discard, Metrics: io.Discard})
		}
		if !tc.ok && err != nil {
			cfg.FunctionTimeout, cfg.VisibilityTimeout = 30*time.Second, 180*time.Second
			cfg.LeaseGrace = 150 * time.Second
			if _, nerr := consumerapp.New(cfg, consumerapp.Deps{DynamoDB: awstest.DynamoDB(t), SQS: awstest.SQS(t), Logs: io.Discard, Metrics: io.Discard}); nerr == nil {
				t.Errorf("New accepted a hand-built Config whose lease outlives the visibility timeout")
			}
		}
		switch {
		case tc.ok && err != nil:
			t.Errorf("timeout %s grace %s visibility %s: %v", tc.timeout, tc.grace, tc.visibility, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "must be below VISIBILITY_TIMEOUT")):
			t.Errorf("timeout %s grace %s visibility %s: error %v, want a refusal", tc.timeout, tc.grace, tc.visibility, err)
		}
	}
}
