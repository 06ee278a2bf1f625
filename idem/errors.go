package idem

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem/canonjson"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// Errors returned by the package. Check them with errors.Is.
var (
	// ErrInProgress means another holder has a live lease on the key. The message should
	// be retried later (for SQS: reported as a batch item failure).
	ErrInProgress = errors.New("idem: key is in progress")
	// ErrPayloadMismatch means the key was seen before with a different payload. It is
	// permanent: retrying the same message cannot succeed.
	ErrPayloadMismatch = errors.New("idem: payload does not match the stored payload for this key")
	// ErrHomeKey means a handler folded the key's record into a guard (Result.HomeGuard)
	// that stands for another key (Result.HomeKey): the guard would then sit at the
	// record's key and no longer at its own, and the same operation sent under a second
	// key would pass it. It is permanent: the consumer must key such messages by the
	// guard's business id (KeyFromField).
	ErrHomeKey = errors.New("idem: the record is folded into the guard of another key")
	// ErrInvalidKey means the idempotency key is empty or not valid UTF-8.
	ErrInvalidKey = errors.New("idem: invalid idempotency key")
	// ErrNoLease is returned by Lease methods called on a nil Lease (a handler run
	// outside the middleware).
	ErrNoLease = errors.New("idem: no lease in this request")
	// ErrNotInThisMode is returned by Attempt.Step and Attempt.Extend under
	// ModeSingleTransaction, where the handler may run more than once for a key and has
	// no lease to extend.
	ErrNotInThisMode = errors.New("idem: not available in single-transaction mode (Config.Mode): the handler may run on two deliveries at once and only its Writes and Messages commit; use ModeLease for calls outside DynamoDB")
	// ErrPastKeyWindow is returned by Attempt.StepWith for a step that an earlier
	// execution may have called longer ago than its service keeps keys, when the service
	// has no lookup: calling again could apply it twice. It is permanent: the message is
	// parked in the dead-letter queue with the reason, its record kept, for a person to
	// reconcile with the service.
	ErrPastKeyWindow = errors.New("idem: past the service's key window: not called again, parked for reconciliation")
)

// PermanentError marks an error that retrying cannot fix (bad input, a business rule).
// A handler returns one (see Permanent) to have the record failed for good: later
// deliveries of the key get the same error without running the handler.
type PermanentError struct {
	Err error
}

// Permanent wraps err as a permanent error. Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// StoredError is the permanent error replayed from a FAILED record: the handler is not
// run again for the key.
type StoredError struct {
	Key     string
	Message string
}

func (e *StoredError) Error() string {
	return fmt.Sprintf("idem: key %s failed permanently earlier: %s", persistence.Redact(e.Key), e.Message)
}

// RefusedError is a handler's refusal before anything is committed or called out: what
// the handler read says no (a disabled endpoint, a closed account), so it returns
// Refuse(reason) instead of calling an outside service or writing. Like a write's failed
// condition (WriteConditionError), it is permanent for this delivery (dead-lettered with
// Reason), and redrivable: the record stays retryable, and the message redriven after the
// cause is removed runs again and applies once. Reason is what a person reads in the
// dead-letter queue.
type RefusedError struct {
	Reason string
}

// Refuse returns a handler's refusal for reason (see RefusedError).
func Refuse(reason string) error { return &RefusedError{Reason: reason} }

func (e *RefusedError) Error() string { return "idem: refused by a business rule: " + e.Reason }

// Is makes a RefusedError a business refusal (ErrRefused).
func (e *RefusedError) Is(target error) bool { return target == persistence.ErrRefused }

// refusedCopyError is a late copy of a delivery that a business rule refused: the record
// keeps the refusal, and the copy is dead-lettered like the delivery it copies.
type refusedCopyError struct {
	key, stored string
	by          persistence.Delivery
}

func (e *refusedCopyError) Error() string {
	return fmt.Sprintf("idem: %s: a copy of message %s (receive %d) that was refused and dead-lettered: %s",
		persistence.Redact(e.key), e.by.MessageID, e.by.ReceiveCount, e.stored)
}

// Is makes the copy a business refusal (ErrRefused), as its original was.
func (e *refusedCopyError) Is(target error) bool { return target == persistence.ErrRefused }

// IsPermanent reports whether err can never succeed on retry: a PermanentError, a
// business refusal (ErrRefused: a RefusedError or a WriteConditionError), a StoredError,
// a payload mismatch, an invalid key, an invalid outbound message, a request DynamoDB
// refused as invalid, a response or a step's answer too large to store, or a step past its
// service's key window with no lookup (ErrPastKeyWindow).
func IsPermanent(err error) bool {
	if _, ok := errors.AsType[*unrecordedError](err); ok {
		return false
	}
	var pe *PermanentError
	var se *StoredError
	var we *persistence.WriteConditionError
	return errors.As(err, &pe) || errors.As(err, &se) || errors.As(err, &we) || errors.Is(err, persistence.ErrRefused) ||
		errors.Is(err, ErrPayloadMismatch) || errors.Is(err, ErrInvalidKey) ||
		errors.Is(err, persistence.ErrResponseTooLarge) || errors.Is(err, persistence.ErrAnswerTooLarge) || errors.Is(err, ErrPastKeyWindow) || errors.Is(err, outbox.ErrInvalidMessage) ||
		errors.Is(err, persistence.ErrInvalidRequest)
}

// redrivable reports whether a permanent failure may pass once its cause is removed
// outside the message: a business rule's refusal (the state changes), or a request
// DynamoDB refused (the code changes). Its record is left retryable, so the message
// redriven from the dead-letter queue runs again; other permanent failures (invalid
// input, a payload mismatch) replay their stored error.
func redrivable(err error) bool {
	return errors.Is(err, persistence.ErrRefused) || errors.Is(err, persistence.ErrInvalidRequest)
}

// unrecordedError is a failure, permanent or not, whose record could not be marked FAILED
// (the release was throttled, or DynamoDB was down): the record stays IN_PROGRESS until
// its lease ends. It is never permanent, whatever err is: dead-lettered now, the message
// would leave the record to the reaper, which fails it as a lease that expired (a
// retryable failure that no delivery will ever follow), and the ingress's status would
// read in_progress for good. Retried, the next delivery takes the key over once the
// lease ended, meets the same refusal and records it; if every delivery fails so, SQS
// parks the message in the dead-letter queue after maxReceiveCount receives, for a
// redrive.
type unrecordedError struct {
	err, record error
}

func unrecorded(err, record error) error { return &unrecordedError{err: err, record: record} }

func (e *unrecordedError) Error() string {
	return e.err.Error() + " (not recorded, so retried: " + e.record.Error() + ")"
}

// Unwrap returns both errors: errors.Is sees the failure and the store's error.
func (e *unrecordedError) Unwrap() []error { return []error{e.err, e.record} }

// The store's errors (package persistence) that a handler meets: a fenced call whose
// lease was taken over, a business write's failed condition, a refusal, a request
// DynamoDB refused, a response or a step's answer too large to store. Each is the store's own value, so
// errors.Is matches either name.
var (
	ErrLeaseLost        = persistence.ErrLeaseLost
	ErrRefused          = persistence.ErrRefused
	ErrInvalidRequest   = persistence.ErrInvalidRequest
	ErrResponseTooLarge = persistence.ErrResponseTooLarge
	ErrAnswerTooLarge   = persistence.ErrAnswerTooLarge
	ErrNotFound         = persistence.ErrNotFound
)

// WriteConditionError is a business write's failed condition at commit
// (persistence.WriteConditionError).
type WriteConditionError = persistence.WriteConditionError

// FailedWrite is one business write whose condition failed (persistence.FailedWrite).
type FailedWrite = persistence.FailedWrite

// LeaseHeldError is ErrInProgress with the end of the lease that holds the key:
// errors.Is(err, ErrInProgress) is true for it, and errors.As gives Until.
type LeaseHeldError struct {
	Key   string    // the record's key, redacted
	Owner string    // the holder, as recorded
	Until time.Time // when the holder's lease ends unless extended
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("idem: acquire %s: %v (lease held by %q until %s)", e.Key, ErrInProgress, e.Owner, e.Until.Format(time.RFC3339Nano))
}

// Unwrap returns ErrInProgress.
func (e *LeaseHeldError) Unwrap() error { return ErrInProgress }

// The fingerprint's refusals (package canonjson): a payload too large or too deep to
// fingerprint, and one two decoders would read as different values.
var (
	ErrJSONTooLarge  = canonjson.ErrJSONTooLarge
	ErrAmbiguousJSON = canonjson.ErrAmbiguousJSON
)
