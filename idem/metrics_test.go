package idem_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem/emf"
)

// emfLine is the shape of one Embedded Metric Format line.
type emfLine struct {
	AWS struct {
		Timestamp         int64 `json:"Timestamp"`
		CloudWatchMetrics []struct {
			Namespace  string     `json:"Namespace"`
			Dimensions [][]string `json:"Dimensions"`
			Metrics    []struct {
				Name string `json:"Name"`
				Unit string `json:"Unit"`
			} `json:"Metrics"`
		} `json:"CloudWatchMetrics"`
	} `json:"_aws"`
}

func parseEMF(t *testing.T, out string) ([]emfLine, []map[string]any) {
	t.Helper()
	var lines []emfLine
	var raw []map[string]any
	for _, s := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var l emfLine
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("not JSON: %v: %s", err, s)
		}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("not JSON: %v: %s", err, s)
		}
		lines, raw = append(lines, l), append(raw, m)
	}
	return lines, raw
}

func TestMetricsFlushEMF(t *testing.T) {
	var buf bytes.Buffer
	m := emf.NewMetrics(&buf, "Payments", "consumer")
	before := time.Now().UnixMilli()
	m.Add(emf.MetricAcquired, 2)
	m.Add(emf.MetricAcquired, 1)
	m.Add(emf.MetricDuplicate, 0)
	m.Observe(emf.MetricHandlerDuration, 12.5)
	m.Observe(emf.MetricHandlerDuration, 3)
	if got := m.Snapshot(); got[emf.MetricAcquired] != 3 || got[emf.MetricDuplicate] != 0 || len(got) != 2 {
		t.Errorf("Snapshot = %v", got)
	}
	if err := m.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if strings.Count(buf.String(), "\n") != 1 || !strings.HasSuffix(buf.String(), "\n") {
		t.Fatalf("want exactly one line, got %q", buf.String())
	}
	lines, raw := parseEMF(t, buf.String())
	l, r := lines[0], raw[0]
	if l.AWS.Timestamp < before || l.AWS.Timestamp > time.Now().UnixMilli() {
		t.Errorf("Timestamp %d is not now in epoch ms", l.AWS.Timestamp)
	}
	if len(l.AWS.CloudWatchMetrics) != 1 {
		t.Fatalf("CloudWatchMetrics = %+v, want one directive", l.AWS.CloudWatchMetrics)
	}
	d := l.AWS.CloudWatchMetrics[0]
	if d.Namespace != "Payments" {
		t.Errorf("Namespace = %q", d.Namespace)
	}
	if fmt.Sprint(d.Dimensions) != "[[Service]]" || r["Service"] != "consumer" {
		t.Errorf("Dimensions = %v, Service = %v", d.Dimensions, r["Service"])
	}
	units := map[string]string{}
	for _, md := range d.Metrics {
		units[md.Name] = md.Unit
	}
	wantUnits := map[string]string{
		emf.MetricAcquired: "Count", emf.MetricDuplicate: "Count", emf.MetricHandlerDuration: "Milliseconds",
	}
	if fmt.Sprint(units) != fmt.Sprint(wantUnits) {
		t.Errorf("metric definitions = %v, want %v", units, wantUnits)
	}
	if r[emf.MetricAcquired] != 3.0 || r[emf.MetricDuplicate] != 0.0 {
		t.Errorf("counter values: %v", r)
	}
	if fmt.Sprint(r[emf.MetricHandlerDuration]) != "[12.5 3]" {
		t.Errorf("HandlerDuration = %v, want [12.5 3]", r[emf.MetricHandlerDuration])
	}

	// Flush resets: the next Flush writes nothing.
	if got := m.Snapshot(); len(got) != 0 {
		t.Errorf("Snapshot after Flush = %v, want empty", got)
	}
	buf.Reset()
	if err := m.Flush(); err != nil || buf.Len() != 0 {
		t.Errorf("empty Flush wrote %q, %v", buf.String(), err)
	}
}

func TestMetricsNoService(t *testing.T) {
	var buf bytes.Buffer
	m := emf.NewMetrics(&buf, "", "")
	m.Add("X", 1)
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	lines, raw := parseEMF(t, buf.String())
	d := lines[0].AWS.CloudWatchMetrics[0]
	if d.Namespace != "idem" || fmt.Sprint(d.Dimensions) != "[[]]" {
		t.Errorf("directive = %+v, want namespace idem and no dimension", d)
	}
	if _, ok := raw[0]["Service"]; ok {
		t.Errorf("line has a Service key without a service: %v", raw[0])
	}
}

func TestMetricsNil(t *testing.T) {
	var m *emf.Metrics
	m.Add(emf.MetricAcquired, 1)
	m.Observe(emf.MetricHandlerDuration, 1)
	if err := m.Flush(); err != nil {
		t.Errorf("nil Flush = %v", err)
	}
	if got := m.Snapshot(); len(got) != 0 {
		t.Errorf("nil Snapshot = %v", got)
	}
}

// TestMetricsWithoutAWriter: metrics made without a writer count (Snapshot) and flush
// into nothing.
func TestMetricsWithoutAWriter(t *testing.T) {
	m := emf.NewMetrics(nil, "ns", "svc")
	m.Add(emf.MetricAcquired, 2)
	m.Observe(emf.MetricHandlerDuration, 1)
	if got := m.Snapshot()[emf.MetricAcquired]; got != 2 {
		t.Errorf("Snapshot %s = %v, want 2", emf.MetricAcquired, got)
	}
	if err := m.Flush(); err != nil {
		t.Errorf("Flush without a writer: %v", err)
	}
}

func TestMetricsLimits(t *testing.T) {
	var buf bytes.Buffer
	m := emf.NewMetrics(&buf, "ns", "svc")
	for i := range 250 {
		m.Observe(emf.MetricHandlerDuration, float64(i))
	}
	m.Observe(emf.MetricHandlerDuration, math.NaN())
	m.Observe(emf.MetricHandlerDuration, math.Inf(1))
	for i := range 150 {
		m.Add(fmt.Sprintf("C%03d", i), i)
	}
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	lines, raw := parseEMF(t, buf.String())
	var values, counters int
	for i, l := range lines {
		defs := l.AWS.CloudWatchMetrics[0].Metrics
		if len(defs) == 0 || len(defs) > 100 {
			t.Errorf("line %d defines %d metrics, want 1..100", i, len(defs))
		}
		for _, d := range defs {
			v, ok := raw[i][d.Name]
			if !ok {
				t.Errorf("line %d defines %s without a value", i, d.Name)
			}
			if arr, ok := v.([]any); ok {
				if len(arr) > 100 {
					t.Errorf("line %d: %s has %d values, want <= 100", i, d.Name, len(arr))
				}
				values += len(arr)
			} else {
				counters++
			}
		}
	}
	if values != 250 || counters != 150 {
		t.Errorf("wrote %d values and %d counters, want 250 and 150", values, counters)
	}
}

func TestMetricsBadNames(t *testing.T) {
	var buf bytes.Buffer
	m := emf.NewMetrics(&buf, "ns", "svc")
	m.Add("Service", 1)
	m.Add("", 1)
	m.Add("Both", 1)
	m.Observe("Both", 1)
	m.Add("Good", 1)
	err := m.Flush()
	if err == nil || !strings.Contains(err.Error(), `"Service"`) || !strings.Contains(err.Error(), `"Both"`) {
		t.Errorf("Flush error = %v, want one naming the dropped metrics", err)
	}
	_, raw := parseEMF(t, buf.String())
	if raw[0]["Good"] != 1.0 || raw[0]["Service"] != "svc" || raw[0]["Both"] != nil {
		t.Errorf("line = %v", raw[0])
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("closed") }

func TestMetricsWriteError(t *testing.T) {
	m := emf.NewMetrics(failingWriter{}, "ns", "svc")
	m.Add("X", 1)
	if err := m.Flush(); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Flush = %v, want the write error", err)
	}
}

func TestMetricsConcurrent(t *testing.T) {
	var buf bytes.Buffer
	m := emf.NewMetrics(&buf, "ns", "svc")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				m.Add(emf.MetricAcquired, 1)
				m.Observe(emf.MetricHandlerDuration, 1)
			}
		})
	}
	wg.Wait()
	if got := m.Snapshot()[emf.MetricAcquired]; got != 800 {
		t.Errorf("Acquired = %v, want 800", got)
	}
}

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
