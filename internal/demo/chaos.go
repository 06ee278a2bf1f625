package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	OnMessage func(messageID string)                   // a record the child received
	OnApplied func()                                   // a record the child reported applied
	OnReaped  func(n int, maxLate, took time.Duration) // a child's reaper sweep: locks failed, how late, how long it took
}

// RandomKill names, in ChaosResult.ByPhase, the kills sent from outside at a random moment.
const RandomKill = "random moment"

// ChaosConfig configures Chaos.
type ChaosConfig struct {
	Exe    string   // the consumer program (idemctl)
	Args   []string // its arguments (`run ...`)
	Env    []string // added to the environment
	Kills  int      // stop after this many kills
	MinUp  time.Duration
	MaxUp  time.Duration // a random kill comes after a random time in [MinUp, MaxUp]
	Phases []string      // crash phases to cycle through (see CrashAt); empty: random kills only
	// PhaseWait is how long a child may take to reach its phase before it is killed from
	// outside (default 30s); the phase then gets up to 2 more children (maxPhaseRetries).
	PhaseWait time.Duration
	Out       io.Writer
	Logs      ChildLog
	Rand      *rand.Rand
}

// ChaosResult counts the kills.
type ChaosResult struct {
	Killed  int
	ByPhase map[string]int // phase (or RandomKill) → kills; every phase of the cycle is there, 0 when none died at it
}

// Chaos runs consumer child processes one after another and kills every one of them with
// SIGKILL, restarting a new one each time, until it has killed c.Kills or ctx ends.
// Children take turns: one is sent SIGKILL from outside after a random time (it dies
// wherever it is: in a long poll, after an acquire, between a commit and the SQS delete,
// in a sweep), and the next one is started with `--crash-at PHASE --crash-after N` and
// sends SIGKILL to itself at that exact point (see CrashAt), cycling through c.Phases (a
// phase no child reached in time is tried again, at most maxPhaseRetries times).
func Chaos(ctx context.Context, c ChaosConfig) (ChaosResult, error) {
	res := ChaosResult{ByPhase: map[string]int{RandomKill: 0}}
	for _, p := range c.Phases {
		res.ByPhase[p] = 0
	}
	if c.PhaseWait <= 0 {
		c.PhaseWait = 30 * time.Second
	}
	slots := append(append([]string(nil), c.Phases...), RandomKill)
	retried := 0 // tries again of the current phase slot
	for i := 0; res.Killed < c.Kills && ctx.Err() == nil; i++ {
		slot := slots[i%len(slots)]
		args := c.Args
		wait := c.MinUp + time.Duration(c.Rand.Int64N(int64(c.MaxUp-c.MinUp)+1))
		if slot != RandomKill {
			n := 1 // the first reap, or the first or second acquire, commit or send
			if slot != PhaseReap {
				n += c.Rand.IntN(2)
			}
			args = append(append([]string(nil), c.Args...), "--crash-at", slot, "--crash-after", fmt.Sprint(n))
			wait = c.PhaseWait
		}
		cmd := exec.Command(c.Exe, args...)
		cmd.Env = append(os.Environ(), c.Env...)
		cmd.Stdout, cmd.Stderr = &lineReader{fn: c.Logs.line}, io.Discard
		if err := cmd.Start(); err != nil {
			return res, fmt.Errorf("demo: start consumer child: %w", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-time.After(wait):
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				return res, fmt.Errorf("demo: kill consumer child: %w", err)
			}
			if werr := <-exited; werr == nil {
				return res, fmt.Errorf("demo: consumer child exited cleanly instead of being killed")
			}
			res.ByPhase[RandomKill]++
			// A child that never reached its phase (it found no record to take there: the
			// others had them, or they were duplicates) gives the phase up to
			// maxPhaseRetries more children before the cycle moves on.
			if slot != RandomKill && retried < maxPhaseRetries {
				retried++
				i--
			} else {
				retried = 0
			}
		case err := <-exited:
			if slot == RandomKill || !killedBySIGKILL(err) {
				return res, fmt.Errorf("demo: consumer child exited by itself (crash slot %q): %w", slot, err)
			}
			res.ByPhase[slot]++
			retried = 0
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-exited //nolint:errcheck // killed on purpose at the end of the run: its exit status says nothing
			return res, nil
		}
		res.Killed++
		if res.Killed%10 == 0 || res.Killed == c.Kills {
			fmt.Fprintf(c.Out, "demo: %d consumers killed with SIGKILL so far\n", res.Killed)
		}
	}
	return res, nil
}

// maxPhaseRetries is how many more children a phase of the cycle gets when one did not
// reach it before PhaseWait.
const maxPhaseRetries = 2

// killedBySIGKILL reports whether a child's Wait error says SIGKILL ended it.
func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// line reads one JSON log line of a child.
func (l ChildLog) line(b []byte) {
	var rec struct {
		Msg        string `json:"msg"`
		MessageID  string `json:"message_id"`
		Outcome    string `json:"outcome"`
		Reaped     int    `json:"reaped"`
		MaxLateMS  int64  `json:"max_late_ms"`
		DurationMS int64  `json:"duration_ms"`
	}
	if json.Unmarshal(b, &rec) != nil { // a line cut short by the kill
		return
	}
	switch {
	case rec.Msg == "sqs record" && rec.MessageID != "":
		if l.OnMessage != nil {
			l.OnMessage(rec.MessageID)
		}
		if rec.Outcome == "applied" && l.OnApplied != nil {
			l.OnApplied()
		}
	case rec.Msg == "sweep done" && l.OnReaped != nil:
		l.OnReaped(rec.Reaped, time.Duration(rec.MaxLateMS)*time.Millisecond, time.Duration(rec.DurationMS)*time.Millisecond)
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
