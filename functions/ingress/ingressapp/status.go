package ingressapp

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// The statuses a request reports (docs/ingress.md).
const (
	// StatusAccepted: the message is on the input queue; no consumer has taken it yet.
	StatusAccepted = "accepted"
	// StatusInProgress: a consumer holds the key, or its last attempt failed in a way a
	// redelivery retries (a crash reaped, a throttled commit).
	StatusInProgress = "in_progress"
	// StatusCompleted: the consumer committed; Response is what it stored.
	StatusCompleted = "completed"
	// StatusFailed: the consumer refused the message for good, or until an operator
	// removes the cause and redrives it from the dead-letter queue (Redrivable); Error
	// is its reason, the text of the dead letter's dlq-reason.
	StatusFailed = "failed"
)

// Status is the body of a status answer: GET /requests/{key}, and a POST retried.
type Status struct {
	Key    string `json:"key"`
	Status string `json:"status"`
	// Response is the consumer's stored response when completed: as is when it is
	// JSON, else a JSON string (ResponseEncoding "base64" when it is not UTF-8).
	Response         json.RawMessage `json:"response,omitempty"`
	ResponseEncoding string          `json:"response_encoding,omitempty"`
	// Error is why it failed (failed), or why the last attempt failed (in_progress).
	Error string `json:"error,omitempty"`
	// Redrivable: failed, and the consumer left the key retryable: once the cause is
	// removed (a business rule's state, a code fix), `idemctl redrive` applies it.
	Redrivable bool `json:"redrivable,omitempty"`
	// Attempts is how many times a consumer took the key (takeovers included).
	Attempts int    `json:"attempts,omitempty"`
	Location string `json:"location"`
}

// Final reports whether the status will not change by itself.
func (s Status) Final() bool { return s.Status == StatusCompleted || s.Status == StatusFailed }

// The texts by which a consumer's stored error says the message was dead-lettered while
// the record was left retryable (idem's redrivable failures): a business write's
// condition refused it (with the handler's reason, or DynamoDB's), or DynamoDB refused
// the commit as invalid. Taken from idem's own errors, so they follow its wording.
var deadLetteredRetryable = [][]string{
	{strings.TrimSuffix((&idem.WriteConditionError{Explained: true, Reason: "\x00"}).Error(), "\x00")},
	strings.Split((&idem.WriteConditionError{Index: 0, Reason: "\x00"}).Error(), "0"), // "…write ", " condition failed: \x00"
	{idem.ErrInvalidRequest.Error()},
}

// deadLettered reports whether a FAILED, retryable record's error is one the consumer
// dead-letters (and keeps retryable for a redrive after a fix), rather than one a
// redelivery retries.
func deadLettered(errText string) bool {
	for _, parts := range deadLetteredRetryable {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(errText, strings.TrimSuffix(p, "\x00"))
		}
		if all {
			return true
		}
	}
	return false
}

// payloadMismatch is the reason a request reports when the consumer's record of its key
// is another body's.
const payloadMismatch = "the consumer's record of this key holds another body's fingerprint: the key (or, for a guarded " +
	"example, the business id in the body) was used before with another body, so the consumer refused this one as a " +
	"payload mismatch and dead-lettered it with that reason"

// statusOf is what the consumer's record rec (nil: none) says of the request whose body
// has the fingerprint hash.
func statusOf(key, hash string, rec *idem.Record) Status {
	st := Status{Key: key, Location: location(key)}
	if rec == nil {
		st.Status = StatusAccepted
		return st
	}
	st.Attempts = rec.Attempt
	if rec.PayloadHash != "" && rec.PayloadHash != hash {
		st.Status, st.Error = StatusFailed, payloadMismatch
		return st
	}
	switch {
	case rec.Status == idem.StatusCompleted:
		st.Status = StatusCompleted
		st.Response, st.ResponseEncoding = responseJSON(rec.Response)
	case rec.Status == idem.StatusFailed && !rec.Retryable:
		st.Status, st.Error = StatusFailed, rec.Error
	case rec.Status == idem.StatusFailed && deadLettered(rec.Error):
		st.Status, st.Error, st.Redrivable = StatusFailed, rec.Error, true
	case rec.Status == idem.StatusFailed:
		// Reaped after a crash, or a retryable error: the message comes back.
		st.Status, st.Error = StatusInProgress, rec.Error
	default:
		st.Status = StatusInProgress
	}
	return st
}

// responseJSON returns a stored response as JSON.
func responseJSON(resp []byte) (json.RawMessage, string) {
	switch {
	case len(resp) == 0:
		return nil, ""
	case json.Valid(resp):
		return json.RawMessage(resp), ""
	case utf8.Valid(resp):
		b, _ := json.Marshal(string(resp))
		return b, ""
	default:
		b, _ := json.Marshal(base64.StdEncoding.EncodeToString(resp))
		return b, "base64"
	}
}
