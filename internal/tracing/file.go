package tracing

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Span is one span of a trace file: a JSON object on a line of its own, as FileExporter
// writes it and `idemctl trace` reads it (docs/idemctl.md, "idemctl trace").
type Span struct {
	Trace   string         `json:"trace"`            // trace id, 32 hex digits
	ID      string         `json:"span"`             // span id, 16 hex digits
	Parent  string         `json:"parent,omitempty"` // the parent's span id ("": a root)
	Name    string         `json:"name"`
	Kind    string         `json:"kind,omitempty"`
	Service string         `json:"service,omitempty"` // service.name: consumer, reaper, ingress
	PID     int            `json:"pid,omitempty"`     // the process that recorded it
	Start   time.Time      `json:"start"`
	End     time.Time      `json:"end"`
	Error   string         `json:"error,omitempty"` // the status description of a span that failed
	Attrs   map[string]any `json:"attrs,omitempty"`
	Links   []Link         `json:"links,omitempty"`
}

// Link is a span a Span links to.
type Link struct {
	Trace string `json:"trace"`
	ID    string `json:"span"`
}

// Attr returns the attribute key as text ("" when absent).
func (s Span) Attr(key string) string {
	switch v := s.Attrs[key].(type) {
	case nil:
		return ""
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return fmt.Sprint(v)
	}
}

// FileExporter appends each span to a file as a JSON line. Several processes may share
// the file: each batch is one write to a file opened for appending.
type FileExporter struct {
	mu sync.Mutex
	f  *os.File
}

// NewFileExporter opens (creating) path for appending.
func NewFileExporter(path string) (*FileExporter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("tracing: trace file: %w", err)
	}
	return &FileExporter{f: f}, nil
}

// ExportSpans writes spans, one line each, in one write.
func (e *FileExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, s := range spans {
		if err := enc.Encode(fromSDK(s)); err != nil {
			return fmt.Errorf("tracing: encode span %s: %w", s.Name(), err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return errors.New("tracing: trace file closed")
	}
	if _, err := e.f.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("tracing: write trace file: %w", err)
	}
	return nil
}

// Shutdown closes the file.
func (e *FileExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return nil
	}
	err := e.f.Close()
	e.f = nil
	if err != nil {
		return fmt.Errorf("tracing: close trace file: %w", err)
	}
	return nil
}

func fromSDK(s sdktrace.ReadOnlySpan) Span {
	out := Span{
		Trace: s.SpanContext().TraceID().String(), ID: s.SpanContext().SpanID().String(), Name: s.Name(),
		Kind: s.SpanKind().String(), Start: s.StartTime().UTC(), End: s.EndTime().UTC(),
	}
	if p := s.Parent(); p.IsValid() {
		out.Parent = p.SpanID().String()
	}
	if st := s.Status(); st.Code == codes.Error {
		out.Error = st.Description
		if out.Error == "" {
			out.Error = "error"
		}
	}
	if res := s.Resource(); res != nil {
		if v, ok := res.Set().Value("service.name"); ok {
			out.Service = v.AsString()
		}
		if v, ok := res.Set().Value("process.pid"); ok {
			out.PID = int(v.AsInt64())
		}
	}
	if attrs := s.Attributes(); len(attrs) > 0 {
		out.Attrs = make(map[string]any, len(attrs))
		for _, kv := range attrs {
			out.Attrs[string(kv.Key)] = value(kv.Value)
		}
	}
	for _, l := range s.Links() {
		out.Links = append(out.Links, Link{Trace: l.SpanContext.TraceID().String(), ID: l.SpanContext.SpanID().String()})
	}
	return out
}

func value(v attribute.Value) any {
	switch v.Type() {
	case attribute.BOOL:
		return v.AsBool()
	case attribute.INT64:
		return v.AsInt64()
	case attribute.FLOAT64:
		return v.AsFloat64()
	case attribute.STRING:
		return v.AsString()
	default:
		return v.String()
	}
}

// ReadFiles reads the spans of trace files, in the order they were written. A line that
// is not a span (a file cut short by a killed process) is skipped and counted.
func ReadFiles(paths ...string) (spans []Span, skipped int, err error) {
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, 0, fmt.Errorf("tracing: %w", err)
		}
		s, n, err := Read(f)
		_ = f.Close()
		if err != nil {
			return nil, 0, fmt.Errorf("tracing: %s: %w", path, err)
		}
		spans, skipped = append(spans, s...), skipped+n
	}
	return spans, skipped, nil
}

// Read reads the spans of one trace file.
func Read(r io.Reader) (spans []Span, skipped int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var s Span
		if json.Unmarshal(line, &s) != nil || s.ID == "" || s.Trace == "" {
			skipped++
			continue
		}
		spans = append(spans, s)
	}
	if err := sc.Err(); err != nil {
		return nil, 0, fmt.Errorf("read: %w", err)
	}
	return spans, skipped, nil
}
