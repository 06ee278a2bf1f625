package persistence

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Errors of the store. Check them with errors.Is.
var (
	// ErrLeaseLost means the caller's lease was taken over or reaped before one of its
	// fenced writes; the write (and any business writes with it) did not happen.
	ErrLeaseLost = errors.New("idem: lease lost")
	// ErrResponseTooLarge means the handler's response would not fit in the record.
	ErrResponseTooLarge = errors.New("idem: response too large to store")
	// ErrAnswerTooLarge means a step's answer would take the record's step answers
	// past MaxStepAnswers; the step was not recorded.
	ErrAnswerTooLarge = errors.New("idem: step answer too large to store")
	// ErrNotFound is returned by Store.Get when there is no live record for the key.
	ErrNotFound = errors.New("idem: record not found")
	// ErrInvalidRequest means DynamoDB refused a request as invalid (a ValidationException,
	// or a transaction item cancelled with ValidationError): an item over 400 KB, two
	// actions on one item, a transaction over 4 MB, a malformed expression. The same
	// request can never pass, so it is permanent; it usually needs a code fix, after
	// which the dead-lettered message can be redriven.
	ErrInvalidRequest = errors.New("idem: DynamoDB refused the request as invalid")
)

// ErrRefused is matched (errors.Is) by every refusal of a business rule: a handler's
// RefusedError before the commit, and a WriteConditionError at it. Such a message is
// dead-lettered with its reason, and its record left retryable, so that redriven once the
// state the rule read has changed, it runs again, and applies once.
var ErrRefused = errors.New("idem: refused by a business rule")

// WriteConditionError means a business write's own condition failed inside the
// completion transaction; nothing was committed. Index is the position of the first
// failed write in Result.Writes. It is permanent for this delivery: a condition on a
// business write states a business rule (the account's currency, stock that may not go
// below zero), and the same message against the same state cannot pass it, so the
// message is dead-lettered with the reason. The record is left FAILED and retryable, so
// the message redriven after the cause was removed runs again.
type WriteConditionError struct {
	Index int
	// Reason is the handler's explanation (Result.Explain) when it gave one, else
	// DynamoDB's cancellation message.
	Reason string
	// Explained is set when Reason comes from the handler.
	Explained bool
	// Failed lists every write whose condition failed, with the item as it was when
	// DynamoDB returned it (nil when it did not).
	Failed []FailedWrite
}

// FailedWrite is one business write whose condition failed at commit.
type FailedWrite struct {
	Index int                             // position in Result.Writes
	Item  map[string]types.AttributeValue // the item as it was, when returned
}

// Is makes a WriteConditionError a business refusal (ErrRefused): a write's condition is a
// business rule.
func (e *WriteConditionError) Is(target error) bool { return target == ErrRefused }

func (e *WriteConditionError) Error() string {
	if e.Explained {
		return "idem: refused by a business rule: " + e.Reason
	}
	return fmt.Sprintf("idem: business write %d condition failed: %s", e.Index, e.Reason)
}

// redact turns a record key into what errors may show: its scope alone ("payments#…"),
// for the reasons of redactKey. `idemctl inspect` takes the raw key.
func Redact(pk string) string {
	scope, _, ok := strings.Cut(pk, "#")
	if !ok {
		return "…"
	}
	return scope + "#…"
}
