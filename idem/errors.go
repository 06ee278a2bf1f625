package idem

import (
	"errors"
	"fmt"
)

// Errors returned by the package. Check them with errors.Is.
var (
	// ErrInProgress means another holder has a live lease on the key. The message should
	// be retried later (for SQS: reported as a batch item failure).
	ErrInProgress = errors.New("idem: key is in progress")
	// ErrLeaseLost means the caller's lease was taken over or reaped before one of its
	// fenced writes; the write (and any business writes with it) did not happen.
	ErrLeaseLost = errors.New("idem: lease lost")
	// ErrPayloadMismatch means the key was seen before with a different payload. It is
	// permanent: retrying the same message cannot succeed.
	ErrPayloadMismatch = errors.New("idem: payload does not match the stored payload for this key")
	// ErrInvalidKey means the idempotency key is empty or not valid UTF-8.
	ErrInvalidKey = errors.New("idem: invalid idempotency key")
	// ErrResponseTooLarge means the handler's response would not fit in the record.
	ErrResponseTooLarge = errors.New("idem: response too large to store")
	// ErrNotFound is returned by Store.Get when there is no live record for the key.
	ErrNotFound = errors.New("idem: record not found")
	// ErrNoLease is returned by Lease methods called on a nil Lease (a handler run
	// outside the middleware).
	ErrNoLease = errors.New("idem: no lease in this request")
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
	return fmt.Sprintf("idem: key %s failed permanently earlier: %s", redact(e.Key), e.Message)
}

// WriteConditionError means a business write's own condition failed inside the
// completion transaction; nothing was committed. Index is the position of the failed
// write in Result.Writes. It is permanent: a condition on a business write states a
// business rule (the account's currency, a balance that may not go negative), and the
// same message against the same state cannot pass it; the message is dead-lettered with
// the reason, to be redriven after a fix.
type WriteConditionError struct {
	Index  int
	Reason string
}

func (e *WriteConditionError) Error() string {
	return fmt.Sprintf("idem: business write %d condition failed: %s", e.Index, e.Reason)
}

// IsPermanent reports whether err can never succeed on retry: a PermanentError, a
// StoredError, a WriteConditionError, a payload mismatch, an invalid key or a response
// too large to store.
func IsPermanent(err error) bool {
	var pe *PermanentError
	var se *StoredError
	var we *WriteConditionError
	return errors.As(err, &pe) || errors.As(err, &se) || errors.As(err, &we) ||
		errors.Is(err, ErrPayloadMismatch) || errors.Is(err, ErrInvalidKey) ||
		errors.Is(err, ErrResponseTooLarge)
}
