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
)

// StallMarker is the line a stalling consumer prints when it holds a lease and has
// stopped before its commit.
const StallMarker = "stalled before commit"

// StallCommits wraps a DynamoDB client so that every completion transaction waits d
// first, announcing the first stall on w with StallMarker: a consumer that has acquired
// its leases and is about to commit, frozen in place to be killed.
func StallCommits(api idem.DynamoDBAPI, d time.Duration, w io.Writer) idem.DynamoDBAPI {
	return &stall{DynamoDBAPI: api, d: d, w: w}
}

type stall struct {
	idem.DynamoDBAPI
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
	PhaseCommit  = "commit"  // right after the completion transaction: the outbound message committed, not sent
	PhaseSent    = "sent"    // right after a record's outbound messages were sent and marked sent, before the SQS delete
	PhaseReap    = "reap"    // in a reaper sweep, right after its first reap
)

// Phases lists the crash phases in the order Chaos cycles through them: a reap crash
// comes right after an acquire crash, whose abandoned locks it has to reap.
var Phases = []string{PhaseAcquire, PhaseReap, PhaseCommit, PhaseSent}

// PhasesOf returns the crash phases a consumer in mode goes through: the
// single-transaction mode takes no lease, so it has no acquire and leaves nothing to reap.
func PhasesOf(mode string) []string {
	if mode == idem.ModeSingleTransaction.String() {
		return []string{PhaseCommit, PhaseSent}
	}
	return Phases
}

// PhaseOf names the crash phase a DynamoDB call of operation op, with its update and
// condition expressions, completes: the conditional PutItem of an acquire, the mark that
// a record's outbound messages were sent, the reaper's fenced update to FAILED, a
// completion transaction (in either mode: the payments handler always has business
// writes); "" for any other call. It reads the expressions' value placeholders, which
// idem names the same whatever the table's attribute names (see idem.Layout).
func PhaseOf(op, update, condition string) string {
	switch {
	case op == "PutItem" && strings.HasPrefix(condition, "attribute_not_exists("):
		return PhaseAcquire
	case op == "UpdateItem" && strings.HasPrefix(update, "SET ") && strings.Contains(update, " = :sent,"):
		return PhaseSent
	case op == "UpdateItem" && strings.Contains(update, " = :failed,") && strings.Contains(condition, " = :lu"):
		return PhaseReap
	case op == "TransactWriteItems":
		return PhaseCommit
	}
	return ""
}

// CrashMarker starts the line a consumer prints just before it kills itself.
const CrashMarker = "crashing at"

// CrashAt wraps a DynamoDB client so that die is called right after the n-th successful
// call of the phase: the process is then expected to be gone (idemctl run --crash-at
// sends itself SIGKILL), leaving whatever that moment leaves behind.
func CrashAt(api idem.DynamoDBAPI, phase string, n int, die func()) (idem.DynamoDBAPI, error) {
	if !slices.Contains(Phases, phase) {
		return nil, fmt.Errorf("demo: unknown crash phase %q (want one of %s)", phase, strings.Join(Phases, ", "))
	}
	if n < 1 {
		return nil, fmt.Errorf("demo: crash after %d calls: must be at least 1", n)
	}
	return &crashAt{DynamoDBAPI: api, phase: phase, n: int64(n), die: die}, nil
}

type crashAt struct {
	idem.DynamoDBAPI
	phase string
	n     int64
	seen  atomic.Int64
	die   func()
}

func (c *crashAt) hit(phase string, err error) {
	if err == nil && phase == c.phase && c.seen.Add(1) == c.n {
		c.die()
	}
}

func (c *crashAt) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := c.DynamoDBAPI.PutItem(ctx, in, o...)
	c.hit(PhaseOf("PutItem", "", aws.ToString(in.ConditionExpression)), err)
	return out, err
}

func (c *crashAt) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := c.DynamoDBAPI.UpdateItem(ctx, in, o...)
	c.hit(PhaseOf("UpdateItem", aws.ToString(in.UpdateExpression), aws.ToString(in.ConditionExpression)), err)
	return out, err
}

func (c *crashAt) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := c.DynamoDBAPI.TransactWriteItems(ctx, in, o...)
	c.hit(PhaseOf("TransactWriteItems", "", ""), err)
	return out, err
}
