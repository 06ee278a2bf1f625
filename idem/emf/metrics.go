package emf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sync"
	"time"
)

// Metric names used by this package. Counters have the unit Count, HandlerDuration the
// unit Milliseconds.
const (
	// MetricAcquired counts records whose handler ran to completion under a lease.
	MetricAcquired = "Acquired"
	// MetricDuplicate counts deliveries answered from a stored result (handler not run).
	MetricDuplicate = "DuplicateSuppressed"
	// MetricGuarded counts deliveries whose handler ran but whose business writes were
	// found already applied by a guard write (Result.Guards): a redelivery that came
	// after its record expired.
	MetricGuarded = "GuardedDuplicate"
	// MetricInProgress counts deliveries refused because another holder has the lease.
	MetricInProgress = "InProgress"
	// MetricLeaseLost counts writes refused because the lease was taken over or reaped.
	MetricLeaseLost = "LeaseLost"
	// MetricPermanentFailure counts records whose handler failed permanently, whether or
	// not they were then dead-lettered.
	MetricPermanentFailure = "PermanentFailure"
	// MetricRetry counts records that ran and failed with an error that is not
	// permanent (a panic included); they are returned to SQS for redelivery.
	MetricRetry = "RetryableFailure"
	// MetricDeadLettered counts records moved to the dead-letter queue by the consumer.
	// PermanentFailure minus DeadLettered is the number of permanent failures that were
	// returned to SQS instead (no DeadLetterer, or dead-lettering failed).
	MetricDeadLettered = "DeadLettered"
	// MetricSkipped counts records returned to SQS without running: after an earlier
	// failure in their FIFO group, or too close to the invocation deadline.
	MetricSkipped = "SkippedRecords"
	// MetricHandlerDuration observes how long the idempotent handler took, store round
	// trips included, in milliseconds.
	MetricHandlerDuration = "HandlerDuration"
	// MetricReaped counts stale leases failed by the reaper.
	MetricReaped = "StaleLocksReaped"
	// MetricOutboundSent counts outbound messages sent after their commit.
	MetricOutboundSent = "OutboundSent"
	// MetricOutboundUnsent counts records whose committed outbound messages could not be
	// sent; they are sent by the record's redelivery or by the reaper.
	MetricOutboundUnsent = "OutboundUnsent"
	// MetricOutboundByReaper counts records whose outbound messages the reaper sent.
	MetricOutboundByReaper = "OutboundSentByReaper"
	// MetricOutboundDeadLettered counts outbound messages SQS refused for good (too
	// large for their queue, ...), dead-lettered instead of sent.
	MetricOutboundDeadLettered = "OutboundDeadLettered"
)

// Limits of CloudWatch Embedded Metric Format: metric definitions per directive and
// values per metric.
const (
	emfMaxMetrics = 100
	emfMaxValues  = 100
	emfMaxName    = 255
)

// Metrics accumulates counters and observations and writes them as CloudWatch Embedded
// Metric Format (EMF) lines: CloudWatch Logs turns each line a Lambda function prints
// into metrics, with no API call. Every metric has the dimension Service.
//
// Call Flush once per invocation, after the work (for a consumer: after
// BatchProcessor.Process). A nil *Metrics is valid and does nothing, so metrics are
// optional everywhere. Metrics is safe for concurrent use.
type Metrics struct {
	w         io.Writer
	namespace string
	service   string
	now       func() time.Time

	mu       sync.Mutex
	counters map[string]float64
	values   map[string][]float64
}

// NewMetrics returns Metrics that writes to w (io.Discard when nil) under namespace
// ("idem" when empty) with the dimension Service=service. With an empty service the
// metrics have no dimension.
func NewMetrics(w io.Writer, namespace, service string) *Metrics {
	if w == nil {
		w = io.Discard
	}
	if namespace == "" {
		namespace = "idem"
	}
	return &Metrics{
		w: w, namespace: namespace, service: service, now: time.Now,
		counters: map[string]float64{}, values: map[string][]float64{},
	}
}

// Add adds n to the counter name. Add(name, 0) makes the counter appear with 0, which
// keeps alarms on it fed with data.
func (m *Metrics) Add(name string, n int) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.counters[name] += float64(n)
	m.mu.Unlock()
}

// Observe records one value of name in milliseconds, e.g. a handler's duration. Each
// value is kept (EMF carries them as an array), so CloudWatch computes percentiles.
// NaN and infinite values cannot be encoded and are dropped.
func (m *Metrics) Observe(name string, ms float64) {
	if m == nil || math.IsNaN(ms) || math.IsInf(ms, 0) {
		return
	}
	m.mu.Lock()
	m.values[name] = append(m.values[name], ms)
	m.mu.Unlock()
}

// Snapshot returns the counters accumulated since the last Flush. Observations are not
// included.
func (m *Metrics) Snapshot() map[string]float64 {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.counters)
}

type emfMetric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

type emfDirective struct {
	Namespace  string      `json:"Namespace"`
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []emfMetric `json:"Metrics"`
}

type emfMeta struct {
	Timestamp         int64          `json:"Timestamp"`
	CloudWatchMetrics []emfDirective `json:"CloudWatchMetrics"`
}

type emfEntry struct {
	name, unit string
	value      any
}

// Flush writes what was accumulated since the last Flush and resets it; it writes
// nothing when nothing was accumulated. Normally that is one line. EMF allows at most
// 100 metrics per line and 100 values per metric, so more are split over several
// lines (all written with one Write call). Names that CloudWatch would reject or that
// clash with the line's own keys ("", longer than 255 bytes, "_aws", "Service", or one
// name used both with Add and Observe) are dropped and reported in the error; the rest
// is still written. The accumulated data is reset even when writing fails: metrics are
// best effort and must not pile up.
func (m *Metrics) Flush() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	counters, values := m.counters, m.values
	m.counters, m.values = map[string]float64{}, map[string][]float64{}
	m.mu.Unlock()
	if len(counters) == 0 && len(values) == 0 {
		return nil
	}

	var errs []error
	valid := func(name string) bool {
		if err := m.checkName(name, counters, values); err != nil {
			errs = append(errs, err)
			return false
		}
		return true
	}
	var first []emfEntry
	for _, name := range sortedKeys(counters) {
		if valid(name) {
			first = append(first, emfEntry{name: name, unit: "Count", value: counters[name]})
		}
	}
	// Observation i*100..i*100+99 of every metric goes on round i.
	rounds := [][]emfEntry{first}
	for _, name := range sortedKeys(values) {
		if _, both := counters[name]; both || !valid(name) {
			continue // a clash with a counter was reported above
		}
		vs := values[name]
		for i := 0; len(vs) > 0; i++ {
			n := min(len(vs), emfMaxValues)
			if i == len(rounds) {
				rounds = append(rounds, nil)
			}
			rounds[i] = append(rounds[i], emfEntry{name: name, unit: "Milliseconds", value: vs[:n]})
			vs = vs[n:]
		}
	}

	var buf bytes.Buffer
	ts := m.now().UnixMilli()
	for _, entries := range rounds {
		for len(entries) > 0 {
			n := min(len(entries), emfMaxMetrics)
			if err := m.writeLine(&buf, ts, entries[:n]); err != nil {
				errs = append(errs, err)
			}
			entries = entries[n:]
		}
	}
	if buf.Len() > 0 {
		if _, err := m.w.Write(buf.Bytes()); err != nil {
			errs = append(errs, fmt.Errorf("idem: metrics: write: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (m *Metrics) checkName(name string, counters map[string]float64, values map[string][]float64) error {
	_, counted := counters[name]
	_, observed := values[name]
	switch {
	case name == "" || len(name) > emfMaxName:
		return fmt.Errorf("idem: metrics: name %q must be 1 to %d bytes; dropped", name, emfMaxName)
	case name == "_aws" || name == "Service":
		return fmt.Errorf("idem: metrics: name %q is reserved; dropped", name)
	case counted && observed:
		return fmt.Errorf("idem: metrics: %q used both as a counter and an observation; dropped", name)
	}
	return nil
}

func (m *Metrics) writeLine(buf *bytes.Buffer, ts int64, entries []emfEntry) error {
	dir := emfDirective{Namespace: m.namespace, Dimensions: [][]string{{}}}
	line := make(map[string]any, len(entries)+2)
	if m.service != "" {
		dir.Dimensions = [][]string{{"Service"}}
		line["Service"] = m.service
	}
	for _, e := range entries {
		dir.Metrics = append(dir.Metrics, emfMetric{Name: e.name, Unit: e.unit})
		line[e.name] = e.value
	}
	line["_aws"] = emfMeta{Timestamp: ts, CloudWatchMetrics: []emfDirective{dir}}
	b, err := json.Marshal(line)
	if err != nil {
		return fmt.Errorf("idem: metrics: encode: %w", err)
	}
	buf.Write(b)
	buf.WriteByte('\n')
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
