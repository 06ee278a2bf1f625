package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// StallMarker is the line a stalling consumer prints when it holds a lease and has
// stopped before its commit.
const StallMarker = "stalled before commit"

// StallCommits wraps a DynamoDB client so that every completion transaction waits d
// first, announcing the first stall on w with StallMarker: a consumer that has acquired
// its leases and is about to commit, frozen in place to be killed.
func StallCommits(api persistence.DynamoDBAPI, d time.Duration, w io.Writer) persistence.DynamoDBAPI {
	return &stall{DynamoDBAPI: api, d: d, w: w}
}

type stall struct {
	persistence.DynamoDBAPI
	d    time.Duration
	w    io.Writer
	once sync.Once
}

func (s *stall) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	s.once.Do(func() { fmt.Fprintln(s.w, StallMarker) })
	select {
	case <-time.After(s.d):
	case <-ctx.Done():
		return nil, fmt.Errorf("demo: stalled commit: %w", ctx.Err())
	}
	return s.DynamoDBAPI.TransactWriteItems(ctx, in, o...)
}

// ChildCrasher returns a Crasher that runs exe with args (a consumer that stalls its
// commits, e.g. `idemctl run --stall-commit 1m`) and extra environment, waits for
// StallMarker on its stderr and kills it with SIGKILL: leases held, nothing committed.
func ChildCrasher(exe string, args, env []string, out io.Writer) Crasher {
	return func(ctx context.Context) (int, error) {
		cmd := exec.CommandContext(ctx, exe, args...)
		cmd.Env = append(os.Environ(), env...)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return 0, fmt.Errorf("child stderr: %w", err)
		}
		if err := cmd.Start(); err != nil {
			return 0, fmt.Errorf("start %s: %w", exe, err)
		}
		stalled := make(chan struct{})
		var tail []string
		var mu sync.Mutex
		go func() {
			sc := bufio.NewScanner(stderr)
			once := sync.Once{}
			for sc.Scan() {
				line := sc.Text()
				mu.Lock()
				tail = append(tail, line)
				if len(tail) > 10 {
					tail = tail[1:]
				}
				mu.Unlock()
				if strings.Contains(line, StallMarker) {
					once.Do(func() { close(stalled) })
				}
			}
		}()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-stalled:
			// Let the rest of the batch reach its commit too, then kill.
			time.Sleep(500 * time.Millisecond)
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				return 0, fmt.Errorf("kill child: %w", err)
			}
			if werr := <-exited; werr == nil {
				return 0, errors.New("child consumer exited cleanly instead of being killed")
			}
			fmt.Fprintf(out, "demo: killed consumer pid %d with SIGKILL while it held leases mid-batch\n", cmd.Process.Pid)
			return 1, nil
		case err := <-exited:
			mu.Lock()
			defer mu.Unlock()
			return 0, fmt.Errorf("child consumer exited before it stalled (%w); its last lines:\n%s", err, strings.Join(tail, "\n"))
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			if werr := <-exited; werr == nil {
				return 0, errors.New("child consumer did not reach a commit within 60s and then exited")
			}
			return 0, errors.New("child consumer did not reach a commit within 60s")
		}
	}
}

// Crash phases: where a consumer process kills itself with CrashAt.
const (
	PhaseAcquire = "acquire" // right after a lease is acquired (the conditional PutItem)
	// PhaseStepCalled is after a step's call returned and before the step is recorded:
	// the process dies as the request that records it is about to go out. The step's
	// outside call was made, and the takeover makes it again, with the same key.
	PhaseStepCalled = "step-called"
	// PhaseStepRecorded is right after a step was recorded, before the commit: the
	// takeover skips the step.
	PhaseStepRecorded = "step-recorded"
	PhaseCommit       = "commit" // right after the completion: the outbound message committed, not sent
	PhaseSent         = "sent"   // right after a record's outbound messages were sent and marked sent, before the SQS delete
	PhaseReap         = "reap"   // in a reaper sweep, right after its first reap
)

// Phases lists the crash phases in the order Chaos cycles through them: a reap crash
// comes right after an acquire crash, whose abandoned locks it has to reap.
var Phases = []string{PhaseAcquire, PhaseReap, PhaseStepCalled, PhaseStepRecorded, PhaseCommit, PhaseSent}

// PhasesOf returns the crash phases a consumer in mode goes through, in Phases' order:
// the single-transaction mode takes no lease and runs no step, so it has no acquire,
// leaves nothing to reap and has no step phases; a handler without steps (steps false:
// its example is no example.Caller) has no step phases.
func PhasesOf(mode string, steps bool) []string {
	var out []string
	for _, p := range Phases {
		lease := p == PhaseAcquire || p == PhaseReap || p == PhaseStepCalled || p == PhaseStepRecorded
		if (lease && mode == idem.ModeSingleTransaction.String()) || (!steps && (p == PhaseStepCalled || p == PhaseStepRecorded)) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// PhaseOf names the crash phase a DynamoDB call of operation op, with its update and
// condition expressions, completes: the conditional PutItem of an acquire, the fenced
// update that records a step, a completion (a transaction, or the update that sets
// COMPLETED when the handler had no business writes), the mark that a record's outbound
// messages were sent, the reaper's fenced update to FAILED; "" for any other call. It
// reads the expressions' value placeholders, which idem names the same whatever the
// table's attribute names (see persistence.Layout).
func PhaseOf(op, update, condition string) string {
	switch {
	case op == "PutItem" && strings.HasPrefix(condition, "attribute_not_exists("):
		return PhaseAcquire
	case op == "UpdateItem" && strings.Contains(update, " ADD ") && strings.Contains(update, " :step"):
		return PhaseStepRecorded
	case op == "UpdateItem" && strings.HasPrefix(update, "SET ") && strings.Contains(update, " = :sent,"):
		return PhaseSent
	case op == "UpdateItem" && strings.Contains(update, " = :failed,") && strings.Contains(condition, " = :cond_lu"):
		return PhaseReap
	case op == "UpdateItem" && strings.HasPrefix(update, "SET ") && strings.Contains(update, " = :completed,"):
		return PhaseCommit
	case op == "TransactWriteItems":
		return PhaseCommit
	}
	return ""
}

// crashPoint is where CrashAt and FaultProxy kill the process for phase: at the calls
// PhaseOf names request, before the call goes out (before) or once it succeeded.
func crashPoint(phase string) (request string, before bool) {
	if phase == PhaseStepCalled {
		return PhaseStepRecorded, true
	}
	return phase, false
}

// CrashMarker starts the line a consumer prints just before it kills itself.
const CrashMarker = "crashing at"

// CrashAt wraps a DynamoDB client so that die is called at the n-th call of the phase:
// right after it succeeded, or, for PhaseStepCalled, right before the call that records
// the step goes out. The process is then expected to be gone (idemctl run --crash-at
// sends itself SIGKILL), leaving whatever that moment leaves behind.
func CrashAt(api persistence.DynamoDBAPI, phase string, n int, die func()) (persistence.DynamoDBAPI, error) {
	if !slices.Contains(Phases, phase) {
		return nil, fmt.Errorf("demo: unknown crash phase %q (want one of %s)", phase, strings.Join(Phases, ", "))
	}
	if n < 1 {
		return nil, fmt.Errorf("demo: crash after %d calls: must be at least 1", n)
	}
	request, before := crashPoint(phase)
	return &crashAt{DynamoDBAPI: api, request: request, before: before, n: int64(n), die: die}, nil
}

type crashAt struct {
	persistence.DynamoDBAPI
	request string // the calls' phase (PhaseOf)
	before  bool   // die before the call goes out, not after it succeeded
	n       int64
	seen    atomic.Int64
	die     func()
}

// call runs do, dying before or after it at the n-th call of the phase.
func (c *crashAt) call(phase string, do func() error) {
	if phase != c.request {
		_ = do()
		return
	}
	if c.before {
		if c.seen.Add(1) == c.n {
			c.die()
		}
		_ = do()
		return
	}
	if do() == nil && c.seen.Add(1) == c.n {
		c.die()
	}
}

func (c *crashAt) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (out *dynamodb.PutItemOutput, err error) {
	c.call(PhaseOf("PutItem", "", aws.ToString(in.ConditionExpression)), func() error {
		out, err = c.DynamoDBAPI.PutItem(ctx, in, o...)
		return err
	})
	return out, err
}

func (c *crashAt) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (out *dynamodb.UpdateItemOutput, err error) {
	c.call(PhaseOf("UpdateItem", aws.ToString(in.UpdateExpression), aws.ToString(in.ConditionExpression)), func() error {
		out, err = c.DynamoDBAPI.UpdateItem(ctx, in, o...)
		return err
	})
	return out, err
}

func (c *crashAt) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (out *dynamodb.TransactWriteItemsOutput, err error) {
	c.call(PhaseOf("TransactWriteItems", "", ""), func() error {
		out, err = c.DynamoDBAPI.TransactWriteItems(ctx, in, o...)
		return err
	})
	return out, err
}
