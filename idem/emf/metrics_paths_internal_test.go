package emf

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// A line that cannot be encoded as JSON is not written and Flush reports it: metrics
// are best effort, but not silently lost. (Add and Observe cannot accumulate such a
// value; this puts one in directly.)
func TestMetricsFlushReportsALineThatCannotBeEncoded(t *testing.T) {
	var buf bytes.Buffer
	m := NewMetrics(&buf, "ns", "svc")
	m.values["Latency"] = []float64{math.Inf(1)}
	err := m.Flush()
	if err == nil || !strings.Contains(err.Error(), "encode") {
		t.Errorf("Flush = %v, want the encoding error", err)
	}
	if buf.Len() != 0 {
		t.Errorf("wrote %q, want nothing", buf.String())
	}
}
