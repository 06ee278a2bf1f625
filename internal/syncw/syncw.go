// Package syncw serializes writes to a shared io.Writer (a log, a progress stream), so
// that lines written from several goroutines never interleave or race.
package syncw

import (
	"io"
	"os"
	"sync"
)

// Writer is an io.Writer whose Write calls are serialized. It is safe for concurrent use.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// New returns w wrapped so that writes are serialized; a *Writer is returned as is.
func New(w io.Writer) *Writer {
	if sw, ok := w.(*Writer); ok {
		return sw
	}
	return &Writer{w: w}
}

// Write writes p to the underlying writer, one call at a time.
func (s *Writer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Outputs returns a function's log and metric writers, os.Stdout for a nil one (where
// Lambda sends both to CloudWatch Logs), each serialized.
func Outputs(logs, metrics io.Writer) (*Writer, *Writer) {
	if logs == nil {
		logs = os.Stdout
	}
	if metrics == nil {
		metrics = os.Stdout
	}
	return New(logs), New(metrics)
}
