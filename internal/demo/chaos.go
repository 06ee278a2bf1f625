package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// ChildLog is what Chaos reads from its children's JSON log lines on stdout.
type ChildLog struct {
	OnMessage func(messageID string) // a record the child received
	OnReaped  func(n int)            // locks a child's reaper failed in one sweep
}

// Chaos runs consumer child processes (exe args, with env added) and kills each with
// SIGKILL after a random time between minUp and maxUp, restarting a new one every time,
// until it has killed kills of them or ctx ends. Kills land wherever the child is: in a
// long poll, after an acquire, after a step, after a commit and before the SQS delete,
// in the middle of a reaper sweep. It returns how many it killed.
func Chaos(ctx context.Context, rng *rand.Rand, exe string, args, env []string, kills int, minUp, maxUp time.Duration, out io.Writer, logs ChildLog) (int, error) {
	killed := 0
	for killed < kills && ctx.Err() == nil {
		cmd := exec.Command(exe, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = &lineReader{fn: logs.line}, io.Discard
		if err := cmd.Start(); err != nil {
			return killed, fmt.Errorf("demo: start consumer child: %w", err)
		}
		up := minUp + time.Duration(rng.Int64N(int64(maxUp-minUp)+1))
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-time.After(up):
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				return killed, fmt.Errorf("demo: kill consumer child: %w", err)
			}
			if werr := <-exited; werr == nil {
				return killed, fmt.Errorf("demo: consumer child exited cleanly instead of being killed")
			}
			killed++
			if killed%10 == 0 || killed == kills {
				fmt.Fprintf(out, "demo: %d consumers killed with SIGKILL so far\n", killed)
			}
		case err := <-exited:
			return killed, fmt.Errorf("demo: consumer child exited by itself within %s: %w", up, err)
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			if werr := <-exited; werr == nil {
				return killed, nil
			}
		}
	}
	return killed, nil
}

// line reads one JSON log line of a child.
func (l ChildLog) line(b []byte) {
	var rec struct {
		Msg       string `json:"msg"`
		MessageID string `json:"message_id"`
		Reaped    int    `json:"reaped"`
	}
	if json.Unmarshal(b, &rec) != nil { // a line cut short by the kill
		return
	}
	switch {
	case rec.Msg == "sqs record" && rec.MessageID != "" && l.OnMessage != nil:
		l.OnMessage(rec.MessageID)
	case rec.Msg == "sweep done" && l.OnReaped != nil:
		l.OnReaped(rec.Reaped)
	}
}

// lineReader calls fn with every complete line written to it.
type lineReader struct {
	buf []byte
	fn  func([]byte)
}

func (r *lineReader) Write(p []byte) (int, error) {
	r.buf = append(r.buf, p...)
	for {
		i := bytes.IndexByte(r.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		r.fn(r.buf[:i])
		r.buf = r.buf[i+1:]
	}
}
