package idem_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/idem/emf"
)

// countingWriter counts the Write calls it gets.
type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// Observations alone, with no counter, are a line of their own: Flush writes them.
func TestMetricsFlushWritesObservationsWithoutCounters(t *testing.T) {
	var buf bytes.Buffer
	m := emf.NewMetrics(&buf, "ns", "svc")
	m.Observe(emf.MetricHandlerDuration, 7)
	m.Observe(emf.MetricHandlerDuration, 9.5)
	if err := m.Flush(); err != nil {
		t.Fatalf("Flush = %v", err)
	}
	if buf.Len() == 0 {
		t.Fatal("Flush wrote nothing, want the observations")
	}
	lines, raw := parseEMF(t, buf.String())
	got, _ := raw[0][emf.MetricHandlerDuration].([]any)
	if len(lines) != 1 || len(got) != 2 || got[0] != 7.0 || got[1] != 9.5 {
		t.Errorf("wrote %s, want one line with %s [7 9.5]", buf.String(), emf.MetricHandlerDuration)
	}
	if ms := lines[0].AWS.CloudWatchMetrics[0].Metrics; len(ms) != 1 || ms[0].Name != emf.MetricHandlerDuration || ms[0].Unit != "Milliseconds" {
		t.Errorf("metric definitions %+v, want %s in Milliseconds", ms, emf.MetricHandlerDuration)
	}
}

// An observation dropped for its name (empty, or also a counter) is reported, and the
// observations of the names after it in order are still written.
func TestMetricsDroppedObservationNameKeepsTheOthers(t *testing.T) {
	var buf bytes.Buffer
	m := emf.NewMetrics(&buf, "ns", "svc")
	m.Observe("", 1)
	m.Add("Both", 1)
	m.Observe("Both", 2)
	m.Observe("Latency", 3)
	m.Add("Good", 1)
	err := m.Flush()
	if err == nil || !strings.Contains(err.Error(), `""`) || !strings.Contains(err.Error(), `"Both"`) {
		t.Errorf("Flush = %v, want an error naming \"\" and \"Both\"", err)
	}
	_, raw := parseEMF(t, buf.String())
	for _, line := range raw {
		if v, ok := line["Latency"].([]any); ok && len(v) == 1 && v[0] == 3.0 {
			return
		}
	}
	t.Errorf("wrote %s, want Latency [3] written", buf.String())
}

// Flush with nothing accumulated writes nothing and returns nil: on fresh Metrics, after
// an earlier Flush, and on a Metrics not made by NewMetrics (the zero value).
func TestMetricsFlushWithNothingAccumulatedWritesNothing(t *testing.T) {
	var w countingWriter
	m := emf.NewMetrics(&w, "ns", "svc")
	if err := m.Flush(); err != nil || w.writes != 0 {
		t.Errorf("fresh Metrics: Flush = %v with %d writes, want nil and none", err, w.writes)
	}
	m.Add("X", 1)
	if err := m.Flush(); err != nil || w.writes != 1 {
		t.Fatalf("Flush = %v with %d writes, want nil and one", err, w.writes)
	}
	if err := m.Flush(); err != nil || w.writes != 1 {
		t.Errorf("second Flush = %v with %d writes in all, want nil and no more", err, w.writes)
	}
	var zero emf.Metrics
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("zero Metrics: Flush panicked: %v", p)
			}
		}()
		if err := zero.Flush(); err != nil {
			t.Errorf("zero Metrics: Flush = %v, want nil", err)
		}
	}()
}
