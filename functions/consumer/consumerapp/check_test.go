package consumerapp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/consumerapp"
)

// TestFromEnvRejectsWhatCannotWork: a function timeout at or below DEADLINE_MARGIN
// leaves no time for any record, so the init fails and says which settings to change.
func TestFromEnvRejectsWhatCannotWork(t *testing.T) {
	base := minimalEnv(t, newFixture(t)) // the required variables only: no FUNCTION_TIMEOUT
	for _, tc := range []struct {
		name    string
		vars    map[string]string
		wantErr string
	}{
		{"timeout equals margin", map[string]string{"FUNCTION_TIMEOUT": "2s"}, "FUNCTION_TIMEOUT 2s is not more than DEADLINE_MARGIN 2s"},
		{"timeout below margin", map[string]string{"FUNCTION_TIMEOUT": "3s", "DEADLINE_MARGIN": "5s"}, "FUNCTION_TIMEOUT 3s is not more than DEADLINE_MARGIN 5s"},
		{"timeout above margin", map[string]string{"FUNCTION_TIMEOUT": "3s"}, ""},
		{"timeout unknown", map[string]string{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) {
				if v, ok := tc.vars[k]; ok {
					return v, true
				}
				v, ok := base[k]
				return v, ok
			}
			_, err := consumerapp.FromEnv(lookup)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("FromEnv: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("FromEnv: %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

// TestCheckRefusesALeaseWithoutGrace: Config.LeaseGrace zero (only the Go API can give
// it: FromEnv refuses LEASE_GRACE=0s) would cap the longest lease at the function
// timeout, so that a lease ended at its deadline; the simulator found takeovers of holders
// that still ran, under clock drift. The init refuses it and says why.
func TestCheckRefusesALeaseWithoutGrace(t *testing.T) {
	cfg := consumerapp.Config{FunctionTimeout: 10 * time.Second, DeadlineMargin: 2 * time.Second}
	if err := cfg.Check(); err == nil || !strings.Contains(err.Error(), "LEASE_GRACE 0s is not positive") {
		t.Fatalf("Check with no lease grace: %v, want the refusal", err)
	}
	cfg.LeaseGrace = time.Second
	if err := cfg.Check(); err != nil {
		t.Fatalf("Check with a grace: %v", err)
	}
}
