package demo

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

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

// TestChaosTriesAPhaseAgain: a child that does not reach its crash phase in time is killed
// from outside, and the phase gets maxPhaseRetries more children before the cycle moves
// on to the random kill. The children here never reach any phase: each writes its
// arguments and sleeps.
func TestChaosTriesAPhaseAgain(t *testing.T) {
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	res, err := Chaos(context.Background(), ChaosConfig{
		Exe: "/bin/sh", Args: []string{"-c", `echo "child $*" >> "$ARGS_FILE"; exec sleep 30`, "child"}, Env: []string{"ARGS_FILE=" + argsFile},
		Kills: 4, MinUp: 300 * time.Millisecond, MaxUp: 400 * time.Millisecond, Phases: []string{PhaseSent}, PhaseWait: 300 * time.Millisecond,
		Out: io.Discard, Rand: rand.New(rand.NewPCG(1, 2)),
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatal(err)
	}
	var phases []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if strings.Contains(line, "--crash-at "+PhaseSent) {
			phases = append(phases, PhaseSent)
		} else {
			phases = append(phases, RandomKill)
		}
	}
	want := []string{PhaseSent, PhaseSent, PhaseSent, RandomKill}
	if !slices.Equal(phases, want) || res.Killed != 4 || res.ByPhase[RandomKill] != 4 || res.ByPhase[PhaseSent] != 0 {
		t.Errorf("children %v, result %+v; want %v, 4 kills from outside", phases, res, want)
	}
}
