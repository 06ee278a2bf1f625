// Package example is the seam between the machinery (the consumer's wiring, idemctl, the
// demo, the reliability suite, the benchmarks and the event generator) and one message
// type. A message type is one package that implements Example; the wiring package names
// it, and nothing else outside its package does.
//
// Example is what production needs, four methods: the name, Decode, NewHandler and
// Template. The rest is optional, one interface per tool it feeds, checked with a type
// assertion as io.WriterTo or http.Flusher are:
//
//   - Traffic (Traffic, Bad): realistic valid and bad messages. The demo, idemctl send
//     without --from-file, idemctl events, the reliability suite, the benchmarks and
//     most consumer tests need it.
//   - Checker (Expect, Read): what the traffic must leave in the example's tables, and
//     those tables read back. idemctl check, the reliability suite and the tests' table
//     checks need it; the demo skips its table check without it.
//   - Preparer (Prepare): what the traffic needs in the tables before it is sent (stock
//     to reserve). Without it there is nothing to prepare.
//   - Confirmer (OutboundQueue, Confirms): which outbound message confirms which message.
//     With it the demo and the tests count one outbound message per applied message;
//     without it they do not look at outbound messages.
//
// What lacks an optional interface is skipped by name, never guessed at: TrafficOf,
// CheckerOf and ConfirmerOf return a *MissingError such as `example "webhooks" has no
// traffic generator (implement example.Traffic)`, which idemctl reports as a usage error
// and the test suites as the reason of their t.Skip.
//
// The two examples of this repository are functions/consumer/ledger (payments credited
// to accounts; the default) and functions/consumer/inventory (stock reservations); both
// implement every optional interface (Full). What they share is beside this package:
// strict decodes a body, guarded is their handler's shape.
package example

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// Example is what the consumer needs to know about one message type, and all a
// production message type must implement.
type Example interface {
	// Name is the example's name: the value of idemctl's --example flag and of the
	// consumer's EXAMPLE variable. Lower case letters and digits.
	Name() string

	// Decode validates one message body exactly as the handler does and returns it as
	// traffic: its business id, the idempotency key and the FIFO group a producer gives
	// it. An invalid body's error wraps ErrInvalid and says what is wrong without
	// echoing values.
	Decode(body []byte) (Message, error)

	// NewHandler builds the business handler from the environment: the variables of the
	// example's template block (Template). It reports every missing or malformed
	// variable at once. The handler runs under the idem middleware; the examples here
	// qualify for idem.ModeSingleTransaction (their effects are their writes and
	// outbound messages).
	NewHandler(env Lookup) (idem.Handler, error)

	// Template returns the example's template block: its parameters, its resources and
	// the consumer's environment for it, each region between its markers (Regions).
	Template() []byte
}

// Traffic is implemented by an example that generates its own realistic traffic: the
// demo, idemctl send (without --from-file) and events, the reliability suite, the
// benchmarks and the consumer's tests send it.
type Traffic interface {
	// Traffic returns n distinct valid messages over at most groups FIFO groups. run
	// makes the business ids unique to one run, so runs against the same tables do
	// not collide. The same rng state gives the same traffic.
	Traffic(rng *rand.Rand, run string, n, groups int) []Message

	// Bad returns the bad messages of a run whose valid traffic is valid: each must be
	// dead-lettered by the consumer with a dlq-reason that contains its Reason. A bad
	// message may depend on valid[0] having been consumed before it (it is sent after
	// the first half of the traffic, in valid[0]'s group when it shares its group).
	// nil is a valid answer: no bad message is sent.
	Bad(run string, valid []Message) []Bad
}

// Preparer is implemented by an example whose traffic needs something in its tables
// before it is sent (stock to reserve, for instance). Without it there is nothing to
// prepare (see Prepare).
type Preparer interface {
	// Prepare writes what the traffic needs before it is sent, for every message of
	// valid. It adds to what is there, so two runs against the same tables do not
	// undo each other.
	Prepare(ctx context.Context, db DynamoDB, env Lookup, valid []Message) error
}

// Checker is implemented by an example whose tables can be checked from outside: the
// demo, idemctl check, the reliability suite and the tests compare Expect with Read.
type Checker interface {
	// Expect returns what the example's tables must hold once exactly the messages of
	// applied (a subset of valid, each applied once) were applied, after Prepare(valid).
	// Only the names it returns are compared.
	Expect(valid, applied []Message) (State, error)

	// Read reads the example's tables back: the State to compare with Expect's, and
	// the business effects counted in the tables themselves (one per applied message
	// in a correct run).
	Read(ctx context.Context, db DynamoDB, env Lookup) (Outcome, error)
}

// Confirmer is implemented by an example whose handler sends outbound messages: the
// demo and the tests then expect exactly one per applied message, and none for a
// message that was refused. Without it they do not look at outbound messages.
type Confirmer interface {
	// OutboundQueue names the variable that holds the URL of the queue the handler's
	// outbound messages go to.
	OutboundQueue() string

	// Confirms returns the business id of the message an outbound message body
	// confirms.
	Confirms(body string) (id string, ok bool)
}

// Full is an example that implements every optional interface, as the ledger and the
// inventory do: every tool runs on it. A line var _ example.Full = Example{} in its
// package keeps it so.
type Full interface {
	Example
	Traffic
	Preparer
	Checker
	Confirmer
}

// MissingError says that an example lacks an optional interface a tool needs.
type MissingError struct {
	Example   string // the example's name
	Interface string // "Traffic", "Checker", "Confirmer"
	What      string // what the interface gives: "traffic generator"
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("example %q has no %s (implement example.%s)", e.Example, e.What, e.Interface)
}

// TrafficOf returns ex's traffic generator, or a *MissingError.
func TrafficOf(ex Example) (Traffic, error) {
	if t, ok := ex.(Traffic); ok {
		return t, nil
	}
	return nil, &MissingError{Example: ex.Name(), Interface: "Traffic", What: "traffic generator"}
}

// CheckerOf returns ex's check of its tables, or a *MissingError.
func CheckerOf(ex Example) (Checker, error) {
	if c, ok := ex.(Checker); ok {
		return c, nil
	}
	return nil, &MissingError{Example: ex.Name(), Interface: "Checker", What: "check of its tables"}
}

// ConfirmerOf returns ex's reader of outbound messages, or a *MissingError.
func ConfirmerOf(ex Example) (Confirmer, error) {
	if c, ok := ex.(Confirmer); ok {
		return c, nil
	}
	return nil, &MissingError{Example: ex.Name(), Interface: "Confirmer", What: "reader of its outbound messages"}
}

// Prepare calls ex's Prepare when ex is a Preparer; otherwise there is nothing to
// prepare, and it returns nil.
func Prepare(ctx context.Context, ex Example, db DynamoDB, env Lookup, valid []Message) error {
	if p, ok := ex.(Preparer); ok {
		return p.Prepare(ctx, db, env, valid)
	}
	return nil
}

// Lookup reads one variable, like os.LookupEnv.
type Lookup func(name string) (string, bool)

// DynamoDB is what Prepare and Read use of the DynamoDB client; *dynamodb.Client
// satisfies it.
type DynamoDB interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// Message is one message of traffic.
type Message struct {
	ID    string // business id: names the message in summaries (payment_id, order_id)
	Key   string // idempotency key, as a producer sets it (the idempotency-key attribute)
	Group string // FIFO message group
	Body  string
}

// Bad is a message the consumer must dead-letter.
type Bad struct {
	Message        // Key "" means the message carries no key anywhere
	Reason  string // a part of the dlq-reason the consumer must give it
	// Fix, for a message a business rule refused (a write's condition), is what an
	// operator does to remove the cause; the message redriven after it is applied once.
	// nil: the message can never succeed.
	Fix func(ctx context.Context, db DynamoDB, env Lookup) error
}

// State is what the example's tables hold, as named numbers ("acct-7 balance_cents").
type State map[string]int64

// Outcome is what Read found.
type Outcome struct {
	State   State
	Applied int // business effects counted in the tables
}

// ErrInvalid is wrapped by Decode's errors, in every example.
var ErrInvalid = errors.New("invalid message")

// NewInvalid returns an example's own sentinel for invalid messages: its text is text,
// and it wraps ErrInvalid.
func NewInvalid(text string) error { return &invalidError{text: text} }

type invalidError struct{ text string }

func (e *invalidError) Error() string { return e.text }
func (e *invalidError) Unwrap() error { return ErrInvalid }
