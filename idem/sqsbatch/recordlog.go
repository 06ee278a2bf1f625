package sqsbatch

import (
	"context"
	"log/slog"
)

// recordNote carries what a RecordFunc learned about a record (its key hash, what the
// idempotency layer did, the attempt) to the one line BatchProcessor logs for it, so a
// record run by NewSQSHandler under BatchProcessor is one log line, not two.
type recordNote struct {
	outcome string
	level   slog.Level
	attrs   []slog.Attr
}

type recordNoteKey struct{}

// withRecordNote returns a context on which noteRecord leaves its note for the caller.
func withRecordNote(ctx context.Context) context.Context {
	return context.WithValue(ctx, recordNoteKey{}, &recordNote{})
}

// recordNoteFrom returns the note on ctx, or nil.
func recordNoteFrom(ctx context.Context) *recordNote {
	n, _ := ctx.Value(recordNoteKey{}).(*recordNote)
	return n
}

// noteRecord leaves outcome, level and attrs for the line of the BatchProcessor that
// runs this record, and reports whether there is one; without one the caller logs.
func noteRecord(ctx context.Context, outcome string, level slog.Level, attrs []slog.Attr) bool {
	n := recordNoteFrom(ctx)
	if n == nil {
		return false
	}
	n.outcome, n.level, n.attrs = outcome, level, attrs
	return true
}

// refine returns the outcome to log: the note's, more precise (applied, duplicate,
// in_progress, lease_lost…), where the batch only knows "ok" or "retry"; the batch's
// where it did more (dead_lettered) or the record failed for good (permanent).
func (n *recordNote) refine(o outcome, permanent bool) string {
	if n == nil || n.outcome == "" {
		return o.String()
	}
	if o == outcomeOK || (o == outcomeRetry && !permanent) {
		return n.outcome
	}
	return o.String()
}
