package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/reaper"
)

// defaultUnlockReason is the error recorded on an unlocked record.
const defaultUnlockReason = "operator unlock"

// runUnlock fails a key's IN_PROGRESS record, retryable, whatever its lease: for a key
// stuck behind a holder the operator knows is gone, without waiting for the lease to end
// and the reaper to run. The write is fenced on the token and lease end it read, as the
// reaper's is, so a holder that completes meanwhile wins. On a FAILED record that is not
// retryable (a permanent failure, replayed to every delivery) it clears the failure:
// the record becomes retryable, fenced on its token, and the next delivery runs again.
func runUnlock(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	flags := newFlags("unlock", stderr)
	rf := addRecordFlags(flags)
	reason := flags.String("reason", defaultUnlockReason, "the error recorded on the record")
	pos, code, ok := parseArgs(flags, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(flags, stderr, "want one KEY (the idempotency key as the producer set it, e.g. payment:pay-1-00000)")
	}
	if *reason == "" {
		return usageError(flags, stderr, "--reason must not be empty")
	}
	ref, err := rf.open(ctx, env, pos[0])
	if err != nil {
		return fail(stderr, "unlock", err)
	}
	now := time.Now()
	rec, err := reaper.Unlock(ctx, ref.store, ref.pk, *reason, now)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return fail(stderr, "unlock", fmt.Errorf("no record for key %q (scope %s) in table %s", ref.key, ref.scope, ref.table))
	case errors.Is(err, idem.ErrLeaseLost):
		return fail(stderr, "unlock", fmt.Errorf("record %s changed while unlocking (its holder completed, extended its lease or was taken over): nothing changed; see idemctl inspect %s", ref.pk, ref.key))
	case err != nil && rec != nil && rec.Status != persistence.StatusInProgress:
		return fail(stderr, "unlock", fmt.Errorf("refusing to unlock %s: it is %s%s; only a record in progress, or one failed for good, can be unlocked (nothing changed)", ref.pk, rec.Status, map[bool]string{true: " and already retryable"}[rec.Retryable]))
	case err != nil:
		return fail(stderr, "unlock", tableError(ref.table, err))
	}
	if rec.Status == persistence.StatusFailed {
		fmt.Fprintf(stdout, "cleared %s: was %s for good (attempt %d, error %q)\n", ref.pk, rec.Status, rec.Attempt, rec.Error)
		fmt.Fprintf(stdout, "now retryable, error %q: the next delivery of the message (idemctl redrive) runs the handler again (attempt %d)\n", *reason, rec.Attempt+1)
		return exitOK
	}
	fmt.Fprintf(stdout, "unlocked %s: was %s (attempt %d, owner %s, lease %s, lease until %s, %s)\n",
		ref.pk, rec.Status, rec.Attempt, orDash(rec.Owner), shortToken(rec.LeaseToken), stamp(rec.LeaseUntil), relative(rec.LeaseUntil, now))
	fmt.Fprintf(stdout, "now %s, retryable, error %q: the next delivery of the message takes the key over (attempt %d), keeping its %d completed steps\n",
		persistence.StatusFailed, *reason, rec.Attempt+1, len(rec.Steps))
	if now.Before(rec.LeaseUntil) {
		fmt.Fprintf(stderr, "idemctl unlock: warning: the lease was still live (%s): if its holder is still running, its writes now fail with lease lost and the message is retried\n",
			relative(rec.LeaseUntil, now))
	}
	return exitOK
}
