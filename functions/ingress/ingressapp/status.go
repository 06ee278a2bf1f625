package ingressapp

import (
	"encoding/base64"
	"encoding/json"
	"unicode/utf8"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
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
	// removes the cause and redrives it from the dead-letter queue (Redrivable); Category
	// says what kind of refusal.
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
	// Category is what kind of failure it is (failed), or the last attempt's was
	// (in_progress): retrying, refused (by a business rule) or invalid (persistence.Category).
	// The error itself, which may name the account, roles, tables and other parties'
	// data, stays in the consumer's record and logs.
	Category string `json:"category,omitempty"`
	// Reason is what the example chose to show of the failure (idem.PublicReason), or,
	// for a key the consumer knows with another body, the ingress's own words.
	Reason string `json:"reason,omitempty"`
	// RequestID is the consumer invocation that recorded the failure (its Lambda request
	// id: the aws_request_id of its log line, which has the error).
	RequestID string `json:"request_id,omitempty"`
	// Redrivable: failed, and the consumer left the key retryable: once the cause is
	// removed (a business rule's state, a code fix), `idemctl redrive` applies it.
	Redrivable bool `json:"redrivable,omitempty"`
	// Attempts is how many times a consumer took the key (takeovers included).
	Attempts int    `json:"attempts,omitempty"`
	Location string `json:"location"`
}

// Final reports whether the status will not change by itself.
func (s Status) Final() bool { return s.Status == StatusCompleted || s.Status == StatusFailed }

// payloadMismatch is the reason a request reports when the consumer's record of its key
// is another body's.
const payloadMismatch = "the consumer's record of this key holds another body's fingerprint: the key (or, for a guarded " +
	"example, the business id in the body) was used before with another body, so the consumer refused this one as a " +
	"payload mismatch and dead-lettered it with that reason"

// statusOf is what the consumer's record rec (nil: none) says of the request whose body
// has the fingerprint hash.
func statusOf(key, hash string, rec *persistence.Record) Status {
	st := Status{Key: key, Location: location(key)}
	if rec == nil {
		st.Status = StatusAccepted
		return st
	}
	st.Attempts = rec.Attempt
	if rec.PayloadHash != "" && rec.PayloadHash != hash {
		st.Status, st.Category, st.Reason = StatusFailed, string(persistence.CategoryInvalid), payloadMismatch
		return st
	}
	switch rec.Status {
	case persistence.StatusCompleted:
		st.Status = StatusCompleted
		st.Response, st.ResponseEncoding = responseJSON(rec.Response)
	case persistence.StatusFailed:
		category := failureCategory(rec)
		st.Category, st.Reason, st.RequestID = string(category), rec.Public, rec.Owner
		switch {
		case !rec.Retryable:
			st.Status = StatusFailed // replayed to every delivery
		case category != persistence.CategoryRetrying:
			// Dead-lettered, the key left retryable: a fix and a redrive apply it.
			st.Status, st.Redrivable = StatusFailed, true
		default:
			// Reaped after a crash, or a retryable error: the message comes back.
			st.Status = StatusInProgress
		}
	default:
		st.Status = StatusInProgress
	}
	return st
}

// failureCategory is the category of a FAILED record: the one the consumer stored from
// its error (idem.CategoryOf), or, for a record without one (reaped, or written before
// categories were kept), what its state says: retrying when retryable, invalid when not.
func failureCategory(rec *persistence.Record) persistence.Category {
	switch {
	case rec.Category != "":
		return rec.Category
	case rec.Retryable:
		return persistence.CategoryRetrying
	}
	return persistence.CategoryInvalid
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
