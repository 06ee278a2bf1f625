package idem

import (
	"errors"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// CategoryOf is the category of err: the one mapping from an error to what its sender is
// told. A business rule's refusal (errors.Is(err, ErrRefused)) is CategoryRefused, any
// other error retrying cannot fix (IsPermanent) CategoryInvalid, the rest
// CategoryRetrying.
func CategoryOf(err error) persistence.Category {
	switch {
	case errors.Is(err, persistence.ErrRefused):
		return persistence.CategoryRefused
	case IsPermanent(err):
		return persistence.CategoryInvalid
	}
	return persistence.CategoryRetrying
}

// PublicError is an error with a reason its handler chose to show to whoever sent the
// message (an HTTP caller of the ingress): one that names no other party's data, such as
// "the currency does not match the account's" for a refusal whose text names both
// currencies. The consumer stores the reason in the record beside the error
// (Record.Public).
type PublicError struct {
	Err    error
	Reason string
}

// Public wraps err with reason, the part of it its sender may read. Public(nil, ...) is
// nil.
func Public(err error, reason string) error {
	if err == nil {
		return nil
	}
	return &PublicError{Err: err, Reason: reason}
}

func (e *PublicError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error: errors.Is and IsPermanent see through.
func (e *PublicError) Unwrap() error { return e.Err }

// PublicReason returns the reason err's handler chose to show to the message's sender
// (the first PublicError in its chain), or "".
func PublicReason(err error) string {
	if pe, ok := errors.AsType[*PublicError](err); ok {
		return pe.Reason
	}
	return ""
}

// failureOf is the Failure a handler's or a commit's error err records.
func failureOf(err error, retryable bool) persistence.Failure {
	return persistence.Failure{Reason: persistence.Truncate(err.Error(), 1024), Retryable: retryable, Category: CategoryOf(err), Public: persistence.Truncate(PublicReason(err), 1024)}
}
