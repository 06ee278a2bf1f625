package demo

import "testing"

// TestChildLogCounts: a consumer process's record lines count as received messages,
// its "applied" lines as applied, and a line cut short by a kill counts as nothing.
func TestChildLogCounts(t *testing.T) {
	var msgs, applied int
	l := ChildLog{OnMessage: func(string) { msgs++ }, OnApplied: func() { applied++ }}
	w := &lineReader{fn: l.line}
	_, _ = w.Write([]byte(`{"msg":"sqs record","message_id":"m1","outcome":"applied"}` + "\n" +
		`{"msg":"sqs record","message_id":"m2","outcome":"duplicate"}` + "\n" +
		`{"msg":"sqs record","message_id":"m3","outcome":"applied"}` + "\n" +
		`{"msg":"sweep done","reaped":0}` + "\n" +
		`{"msg":"sqs record","message_id":"m4","outc`))
	if msgs != 3 || applied != 2 {
		t.Errorf("%d messages and %d applied, want 3 and 2", msgs, applied)
	}
}
