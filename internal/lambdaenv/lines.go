package lambdaenv

import (
	"bytes"
	"io"
	"sync"
)

// lineWriter passes only whole lines to w, so that the output of several processes
// sharing w never interleaves within a line (log and EMF lines stay parseable).
type lineWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if i := bytes.LastIndexByte(l.buf, '\n'); i >= 0 {
		_, err := l.w.Write(l.buf[:i+1])
		l.buf = append(l.buf[:0], l.buf[i+1:]...)
		if err != nil {
			return len(p), err
		}
	}
	return len(p), nil
}

// flush writes what is left, a last line without its newline.
func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		_, _ = l.w.Write(append(l.buf, '\n'))
		l.buf = l.buf[:0]
	}
}
