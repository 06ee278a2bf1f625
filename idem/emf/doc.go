// Package emf writes metrics as CloudWatch Embedded Metric Format lines, which CloudWatch
// Logs turns into metrics with no API call, and names the metrics the consumer and the
// reaper emit (Metric*). A nil *Metrics does nothing, so metrics are optional
// everywhere; names and values that EMF refuses are reported by Flush, not dropped in
// silence.
package emf
