package consumerapp_test

import (
	"strings"
	"testing"

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
