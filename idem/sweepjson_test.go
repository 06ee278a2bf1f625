package idem_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
)

// TestSweepResultJSON: the reaper's response gives the lateness in milliseconds, as its
// log line does, not a time.Duration's nanoseconds, and reads back unchanged.
func TestSweepResultJSON(t *testing.T) {
	in := reaper.SweepResult{Scanned: 3, Reaped: 2, Lost: 1, Truncated: true, MaxLate: 369722291742 * time.Nanosecond}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); !strings.Contains(got, `"MaxLateMs":369722`) || strings.Contains(got, `"MaxLate":`) ||
		!strings.Contains(got, `"Scanned":3,"Reaped":2,"Lost":1,"Truncated":true`) {
		t.Errorf("JSON %s, want the counts and MaxLateMs 369722, no MaxLate", got)
	}
	var out reaper.SweepResult
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	want := in
	want.MaxLate = 369722 * time.Millisecond
	if out != want {
		t.Errorf("read back %+v, want %+v", out, want)
	}
	if err := json.Unmarshal([]byte(`{"Reaped":"two"}`), &out); err == nil || !strings.Contains(err.Error(), "idem: sweep result") {
		t.Errorf("a bad document: %v", err)
	}
}
