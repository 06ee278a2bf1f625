package cli

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// startProgress prints line() to w every period, when it changed, until the returned
// stop is called; stop may be called more than once.
func startProgress(w io.Writer, period time.Duration, line func() string) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(period)
		defer t.Stop()
		last := ""
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if l := line(); l != last {
					fmt.Fprintln(w, l)
					last = l
				}
			}
		}
	}()
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			close(done)
		}
		<-finished
	}
}
