package persistence

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Status is the state of an idempotency record.
type Status string

// The states of a record. A record is created IN_PROGRESS by an acquire and ends
// COMPLETED (response stored) or FAILED (retryable or not). A retryable FAILED record, or
// an IN_PROGRESS one whose lease ran out, is taken over by the next acquire.
const (
	StatusInProgress Status = "IN_PROGRESS"
	StatusCompleted  Status = "COMPLETED"
	StatusFailed     Status = "FAILED"
)

// Record is an idempotency record as stored. Times are UTC; LeaseUntil has millisecond
// and ExpiresAt second precision, as stored.
type Record struct {
	Key         string // partition key: "<scope>#<key>"
	Status      Status
	LeaseToken  string    // fencing token of the current (or last) holder
	LeaseUntil  time.Time // the lease is live while now < LeaseUntil
	Inflight    string    // shard of the sparse index, set only while IN_PROGRESS
	ExpiresAt   time.Time // TTL: the record counts as absent from then on; zero = never
	PayloadHash string
	Response    []byte // as given to Complete (decompressed)
	Error       string // FAILED: the reason
	Retryable   bool   // FAILED: whether the next delivery may take over
	// Category is what kind of failure Error is (CategoryOf), Public the reason its
	// handler chose to show (PublicReason): what the message's sender may be told of a
	// FAILED record. "" in records written before they were kept, and in reaped ones
	// (retrying).
	Category Category
	Public   string
	// RefusedBy is the delivery whose business rule refused the key (Category refused),
	// kept until a takeover: a copy of that message no newer than it is dead-lettered
	// again instead of taking the record over (EventTakeover).
	RefusedBy Delivery
	// RefusedHash, on a record completed for another payload (CompletedForAnother), is
	// the fingerprint of the payload that came under the key and was refused: a reader
	// holding that payload (the ingress, its own record gone) learns it was refused, not
	// that the key was used with another body. "" in records written before it was kept.
	RefusedHash string
	Attempt     int // acquisitions so far, takeovers included
	Steps       []string
	// Answers holds what each step of Steps that gave one answered (Attempt.StepAnswer),
	// by step name: recorded with the step, under the same fence, at most
	// MaxStepAnswers bytes in all.
	Answers map[string][]byte
	Outbox  []Message // COMPLETED: outbound messages committed but not yet known to be sent
	// OutboxGroup is the FIFO message group of the delivery that committed the outbox,
	// kept while it is pending: a later delivery of the key in that group sends it;
	// one in another group leaves it to that group (or the reaper), so messages never
	// overtake the pending ones of records committed before them in the group.
	OutboxGroup string
	Sent        int           // COMPLETED: how many outbound messages were sent
	Dead        []DeadMessage // COMPLETED: outbound messages SQS refused for good, dead-lettered instead
	Owner       string        // diagnostics: who holds or held the lease (Lambda request id)
	CreatedAt   time.Time
	UpdatedAt   time.Time

	Home int // ModeSingleTransaction's Put: 1 + the position of the home write (Completion.Home)
}

// CompletedForAnother reports whether the record was completed for another payload than
// the one that came under its key, which was refused (Completion.Refusal: a guard held
// that other payload's effect). Its error says why.
func (r *Record) CompletedForAnother() bool {
	return r.Status == StatusCompleted && r.Error != ""
}

// HoldsAnother reports whether the record stands for another payload than the one whose
// fingerprint is hash: it was keyed by another, and did not refuse this one for another's
// effect (RefusedHash). A record without a fingerprint holds none.
func (r *Record) HoldsAnother(hash string) bool {
	refused := r.CompletedForAnother() && r.RefusedHash != "" && r.RefusedHash == hash
	return r.PayloadHash != "" && r.PayloadHash != hash && !refused
}

// expired reports whether the record's TTL has passed: DynamoDB deletes such items late,
// so every read and condition treats them as absent. Like DynamoDB's condition
// (CondAbsent), it compares whole seconds.
func (r *Record) Expired(now time.Time) bool {
	return !r.ExpiresAt.IsZero() && PastExpiry(r.ExpiresAt, now)
}

// PastExpiry is the one rule for every record with an expires_at (the consumer's, the
// ingress's): stored in whole seconds, as DynamoDB's TTL reads it, a record lives through
// the whole second of its expiry and has expired from the next one on.
func PastExpiry(expiresAt, now time.Time) bool { return expiresAt.Unix() < now.Unix() }

// Delivery is one receive of an SQS message: its id, and its receive count then.
type Delivery struct {
	MessageID    string
	ReceiveCount int
}

// String is the delivery as the record stores it: "<receive count>/<message id>".
func (d Delivery) String() string {
	if d.MessageID == "" {
		return ""
	}
	return strconv.Itoa(d.ReceiveCount) + "/" + d.MessageID
}

// parseDelivery reads a Delivery as String writes it.
func parseDelivery(s string) (Delivery, error) {
	if s == "" {
		return Delivery{}, nil
	}
	n, id, ok := strings.Cut(s, "/")
	count, err := strconv.Atoi(n)
	if !ok || err != nil || id == "" || count < 0 {
		return Delivery{}, fmt.Errorf("idem: delivery %q is not <receive count>/<message id>", s)
	}
	return Delivery{MessageID: id, ReceiveCount: count}, nil
}

// copyOf reports whether d is a copy of the delivery by that is no newer: the same
// message, received no later. Such a copy was handed out before the visibility timeout
// of its receive ran out, and runs late.
func (d Delivery) CopyOf(by Delivery) bool {
	return d.MessageID != "" && d.MessageID == by.MessageID && d.ReceiveCount <= by.ReceiveCount
}

// hasStep reports whether step was recorded as completed.
func (r *Record) HasStep(step string) bool {
	for _, s := range r.Steps {
		if s == step {
			return true
		}
	}
	return false
}

func (r *Record) Clone() *Record {
	c := *r
	c.Response = append([]byte(nil), r.Response...)
	c.Steps = append([]string(nil), r.Steps...)
	c.Answers = CloneAnswers(r.Answers)
	c.Outbox = append([]Message(nil), r.Outbox...)
	c.Dead = append([]DeadMessage(nil), r.Dead...)
	return &c
}

// CloneAnswers copies a record's step answers (nil stays nil).
func CloneAnswers(answers map[string][]byte) map[string][]byte {
	if answers == nil {
		return nil
	}
	c := make(map[string][]byte, len(answers))
	for name, a := range answers {
		c[name] = append([]byte{}, a...)
	}
	return c
}

func EpochMillis(t time.Time) int64 { return t.UnixMilli() }
func FromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// DeadMessage is an outbound message that SQS refused for good and that was
// dead-lettered instead of sent.
type DeadMessage struct {
	Index  int    `json:"i"` // position in the record's messages
	Queue  string `json:"q"` // the queue that refused it
	Reason string `json:"r"` // what SQS said
}
