package persistence

import (
	"fmt"
	"strings"
	"time"
)

// The record's state machine, written once. Each row of transitions says, for one write
// a Store makes (an Event), which states of the record it applies to, the state it leaves,
// and the conditions the write checks on the record as it is stored. DynamoStore builds
// its condition expressions from a row (Transition.expr) and MemoryStore evaluates the
// same row in Go (Transition.holds); each condition's two forms stand side by side in
// condForms below. The contract test TestTransitionTable walks every row on every store
// and layout, and docs/records.md carries the table as TransitionsMarkdown writes it
// (TestRecordsDocShowsTheTransitions).

// Event is a write of the record's state machine.
type Event string

// The events. Each is one method of Store, but for EventRefuse (FailWith with a
// business rule's refusal), EventPutOver (Put with a record seen) and EventExpire
// (DynamoDB's TTL, which writes nothing: every read and condition treats an expired
// record as absent).
const (
	EventAcquire  Event = "acquire"   // Create: the first delivery's lease
	EventTakeover Event = "takeover"  // Takeover: a new lease on a record as it was seen
	EventExtend   Event = "extend"    // Extend: the holder moves its lease end
	EventStep     Event = "step"      // AddStep: the holder records a recovery point
	EventCommit   Event = "commit"    // Complete: the holder commits its result
	EventRefuse   Event = "refuse"    // FailWith, a business rule's refusal (redrivable)
	EventFail     Event = "fail"      // FailWith, any other failure
	EventMarkSent Event = "mark-sent" // MarkSent: a pending outbox was sent
	EventClear    Event = "clear"     // Retry: the operator makes a permanent failure retryable
	EventRetain   Event = "retain"    // Retain: a FAILED record outlives a message dead-lettered against it
	EventReap     Event = "reap"      // Reap: the reaper fails a lease that ended
	EventPut      Event = "put"       // Put, no live record: the single-transaction commit
	EventPutOver  Event = "put-over"  // Put over a record as it was seen (a takeover's commit)
	EventExpire   Event = "expire"    // the TTL passed: the record counts as absent
)

// State is where a record stands for the next delivery of its key: its Status, refined by
// what decides that delivery.
type State string

// The states.
const (
	StateAbsent     State = "absent"      // no record, or an expired one
	StateInProgress State = "in-progress" // IN_PROGRESS: a lease, live or ended
	StatePending    State = "pending"     // COMPLETED with outbound messages not known to be sent
	StateCompleted  State = "completed"   // COMPLETED, nothing left to send
	StateRetryable  State = "retryable"   // FAILED, retryable: a failure, or a lease reaped
	StateRefused    State = "refused"     // FAILED, retryable, refused by a business rule (RefusedBy)
	StatePermanent  State = "permanent"   // FAILED, not retryable: replayed as a StoredError
)

// StateOf is the state of rec at now (nil: absent).
func StateOf(rec *Record, now time.Time) State {
	switch {
	case rec == nil || rec.Expired(now):
		return StateAbsent
	case rec.Status == StatusInProgress:
		return StateInProgress
	case rec.Status == StatusCompleted && len(rec.Outbox) > 0:
		return StatePending
	case rec.Status == StatusCompleted:
		return StateCompleted
	case rec.Status == StatusFailed && !rec.Retryable:
		return StatePermanent
	case rec.Category == CategoryRefused && rec.RefusedBy.MessageID != "":
		return StateRefused
	case rec.Status == StatusFailed:
		return StateRetryable
	}
	return State("unknown status " + string(rec.Status))
}

// Cond is a condition a store's write checks on the record as it is stored.
type Cond string

// The conditions.
const (
	// CondAbsent: there is no record, or it expired (expires_at before now).
	CondAbsent Cond = "absent"
	// CondToken: the record holds the writer's lease token: its own, or the one it saw.
	CondToken Cond = "token"
	// CondStatus: the record has the status the row names, or the one the writer saw.
	CondStatus Cond = "status"
	// CondLease: the record's lease ends when the writer saw (takeover) or listed (reap)
	// it: a holder that extended its lease since wins.
	CondLease Cond = "lease"
	// CondOutbox: the record has an outbox pending.
	CondOutbox Cond = "outbox"
	// CondNotRetryable: the record's failure is not retryable.
	CondNotRetryable Cond = "not-retryable"
)

// Transition is one row of the state machine.
type Transition struct {
	Event Event
	// From are the states the write applies to; the verdict (Client.verdict) chooses
	// among them for takeovers (a lease that ended, a refusal by another delivery).
	From []State
	// To are the states it may leave (a commit leaves pending or completed).
	To []State
	// Status is the status CondStatus requires; "" when it is the status the writer saw.
	Status Status
	// Conds are what the write checks, all of them, atomically with the write.
	Conds []Cond
	// Note says what the row is for, as docs/records.md shows it.
	Note string
}

// transitions is the state machine.
var transitions = []Transition{
	{Event: EventAcquire, From: []State{StateAbsent}, To: []State{StateInProgress}, Conds: []Cond{CondAbsent},
		Note: "the first delivery takes a lease; a live record comes back in the refusal and decides (verdict)"},
	{Event: EventTakeover, From: []State{StateInProgress, StateRetryable, StateRefused}, To: []State{StateInProgress},
		Conds: []Cond{CondToken, CondStatus, CondLease},
		Note:  "a lease that ended, a retryable failure, or a refusal by another delivery than this one; keeps steps"},
	{Event: EventExtend, From: []State{StateInProgress}, To: []State{StateInProgress}, Status: StatusInProgress,
		Conds: []Cond{CondToken, CondStatus}, Note: "the holder's fence"},
	{Event: EventStep, From: []State{StateInProgress}, To: []State{StateInProgress}, Status: StatusInProgress,
		Conds: []Cond{CondToken, CondStatus}, Note: "the holder's fence"},
	{Event: EventCommit, From: []State{StateInProgress}, To: []State{StatePending, StateCompleted}, Status: StatusInProgress,
		Conds: []Cond{CondToken, CondStatus}, Note: "the holder's fence; business writes in the same transaction"},
	{Event: EventRefuse, From: []State{StateInProgress}, To: []State{StateRefused, StateRetryable}, Status: StatusInProgress,
		Conds: []Cond{CondToken, CondStatus},
		Note:  "the holder's fence; remembers the refusing delivery (message id, receive count), retryable when there is none (outside an SQS batch)"},
	{Event: EventFail, From: []State{StateInProgress}, To: []State{StateRetryable, StatePermanent}, Status: StatusInProgress,
		Conds: []Cond{CondToken, CondStatus}, Note: "the holder's fence"},
	{Event: EventMarkSent, From: []State{StatePending}, To: []State{StateCompleted}, Status: StatusCompleted,
		Conds: []Cond{CondToken, CondStatus, CondOutbox}, Note: "the committing token; a second marker changes nothing"},
	{Event: EventClear, From: []State{StatePermanent}, To: []State{StateRetryable}, Status: StatusFailed,
		Conds: []Cond{CondToken, CondStatus, CondNotRetryable}, Note: "idemctl unlock on a permanent failure"},
	{Event: EventRetain, From: []State{StateRetryable, StateRefused, StatePermanent}, To: []State{StateRetryable, StateRefused, StatePermanent}, Status: StatusFailed,
		Conds: []Cond{CondToken, CondStatus}, Note: "a later expiry, nothing else: a delivery dead-lettered against a record that holds steps"},
	{Event: EventReap, From: []State{StateInProgress}, To: []State{StateRetryable}, Status: StatusInProgress,
		Conds: []Cond{CondToken, CondStatus, CondLease}, Note: "only the lease end it listed: an extension or a commit since wins"},
	{Event: EventPut, From: []State{StateAbsent}, To: []State{StatePending, StateCompleted, StatePermanent}, Conds: []Cond{CondAbsent},
		Note: "single-transaction commit; a live record comes back in the refusal and decides"},
	{Event: EventPutOver, From: []State{StateInProgress, StateRetryable, StateRefused}, To: []State{StatePending, StateCompleted, StatePermanent},
		Conds: []Cond{CondToken, CondStatus, CondLease}, Note: "single-transaction commit over a record the verdict may take over"},
	{Event: EventExpire, From: []State{StateInProgress, StatePending, StateCompleted, StateRetryable, StateRefused, StatePermanent},
		To: []State{StateAbsent}, Note: "no write: every read and condition treats expires_at before now as absent"},
}

// Transitions returns the state machine's rows, in the order docs/records.md shows them.
func Transitions() []Transition {
	out := make([]Transition, len(transitions))
	for i, t := range transitions {
		t.From, t.To, t.Conds = append([]State(nil), t.From...), append([]State(nil), t.To...), append([]Cond(nil), t.Conds...)
		out[i] = t
	}
	return out
}

// transitionOf is the row of ev. Every event has one (TestTransitionTable); an unknown
// event gets a row whose condition no record meets.
func TransitionOf(ev Event) Transition {
	for _, t := range transitions {
		if t.Event == ev {
			return t
		}
	}
	return Transition{Event: ev, Conds: []Cond{CondAbsent, CondToken}}
}

// condArgs are the values a row's conditions compare the stored record with.
type CondArgs struct {
	Token string
	// status is CondStatus's value when the row names none (the status the writer saw).
	status     Status
	LeaseUntil time.Time // CondLease: the lease end seen or listed
	Now        time.Time // CondAbsent: expiry is judged at now
}

// seenArgs are the condition values of a write on the record as seen.
func SeenArgs(seen *Record) CondArgs {
	return CondArgs{Token: seen.LeaseToken, status: seen.Status, LeaseUntil: seen.LeaseUntil}
}

// condForm is one condition in its two forms: DynamoDB's expression and Go's predicate.
type condForm struct {
	expr  func(e *expr, t Transition, a CondArgs) string
	holds func(r *Record, t Transition, a CondArgs) bool
}

// wantStatus is the status CondStatus compares with.
func (t Transition) wantStatus(a CondArgs) Status {
	if t.Status != "" {
		return t.Status
	}
	return a.status
}

var condForms = map[Cond]condForm{
	CondAbsent: {
		expr: func(e *expr, _ Transition, a CondArgs) string {
			return fmt.Sprintf("attribute_not_exists(%s) OR %s < %s", e.key(), e.a(AttrExpiresAt), e.v("now_s", avN(a.Now.Unix())))
		},
		// DynamoDB compares whole seconds: expires_at < now's second.
		holds: func(r *Record, _ Transition, a CondArgs) bool {
			return r == nil || !r.ExpiresAt.IsZero() && r.ExpiresAt.Unix() < a.Now.Unix()
		},
	},
	CondToken: {
		expr: func(e *expr, _ Transition, a CondArgs) string {
			return e.a(attrLeaseToken) + " = " + e.v("cond_tok", AvS(a.Token))
		},
		holds: func(r *Record, _ Transition, a CondArgs) bool { return r != nil && r.LeaseToken == a.Token },
	},
	CondStatus: {
		expr: func(e *expr, t Transition, a CondArgs) string {
			return e.a(attrStatus) + " = " + e.v("cond_status", AvS(string(t.wantStatus(a))))
		},
		holds: func(r *Record, t Transition, a CondArgs) bool { return r != nil && r.Status == t.wantStatus(a) },
	},
	CondLease: {
		expr: func(e *expr, _ Transition, a CondArgs) string {
			return e.a(AttrLeaseUntil) + " = " + e.v("cond_lu", avN(EpochMillis(a.LeaseUntil)))
		},
		holds: func(r *Record, _ Transition, a CondArgs) bool {
			return r != nil && EpochMillis(r.LeaseUntil) == EpochMillis(a.LeaseUntil)
		},
	},
	CondOutbox: {
		expr:  func(e *expr, _ Transition, _ CondArgs) string { return "attribute_exists(" + e.a(attrOutbox) + ")" },
		holds: func(r *Record, _ Transition, _ CondArgs) bool { return r != nil && len(r.Outbox) > 0 },
	},
	CondNotRetryable: {
		expr: func(e *expr, _ Transition, _ CondArgs) string {
			return e.a(attrRetryable) + " = " + e.v("cond_false", avBool(false))
		},
		holds: func(r *Record, _ Transition, _ CondArgs) bool { return r != nil && !r.Retryable },
	},
}

// expr is the row's condition expression for DynamoDB, its names and values added to e.
// A condition that is a disjunction is parenthesised when others join it.
func (t Transition) expr(e *expr, a CondArgs) string {
	parts := make([]string, 0, len(t.Conds))
	for _, c := range t.Conds {
		p := condForms[c].expr(e, t, a)
		if len(t.Conds) > 1 && strings.Contains(p, " OR ") {
			p = "(" + p + ")"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " AND ")
}

// holds reports whether the stored record r (nil: none) meets every condition of the row.
func (t Transition) Holds(r *Record, a CondArgs) bool {
	for _, c := range t.Conds {
		if !condForms[c].holds(r, t, a) {
			return false
		}
	}
	return true
}

// TransitionsMarkdown is the state machine as docs/records.md shows it: a table with one
// row per event.
func TransitionsMarkdown() string {
	var b strings.Builder
	b.WriteString("| event | from | to | the write checks | note |\n|---|---|---|---|---|\n")
	join := func(ss []string) string {
		if len(ss) == 0 {
			return "(nothing: no write)"
		}
		return strings.Join(ss, ", ")
	}
	for _, t := range transitions {
		var from, to, conds []string
		for _, s := range t.From {
			from = append(from, "`"+string(s)+"`")
		}
		for _, s := range t.To {
			to = append(to, "`"+string(s)+"`")
		}
		for _, c := range t.Conds {
			if c == CondStatus && t.Status != "" {
				conds = append(conds, "status = "+string(t.Status))
				continue
			}
			conds = append(conds, condText[c])
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", t.Event, join(from), join(to), join(conds), t.Note)
	}
	return b.String()
}

// condText is a condition as docs/records.md words it.
var condText = map[Cond]string{
	CondAbsent:       "no record, or expires_at < now",
	CondToken:        "lease_token = the writer's token",
	CondStatus:       "status as seen",
	CondLease:        "lease_until as seen (reap: as listed)",
	CondOutbox:       "outbox exists",
	CondNotRetryable: "retryable = false",
}

// failEvent is the event of a FailWith of f: a refusal by a business rule, or any other
// failure.
func FailEvent(f Failure) Event {
	if f.Category == CategoryRefused && f.Retryable {
		return EventRefuse
	}
	return EventFail
}
