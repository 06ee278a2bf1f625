// Package example is the seam between the machinery (the consumer's wiring, idemctl, the
// demo, the reliability suite, the benchmarks and the event generator) and one message
// type. A message type is one package that implements Example; the wiring package names
// it, and nothing else outside its package does.
//
// Example is what production needs, four methods: the name, Decode, NewHandler and
// Template. NewHandler gets the consumer's own clients and configuration (Deps), so a
// handler reads its tables and calls out through the same endpoint and retries as the
// machinery, in tests and in Lambda alike. The rest is optional, one interface per tool
// it feeds, checked with a type assertion as io.WriterTo or http.Flusher are:
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
//   - LeaseOnly (LeaseOnly): why the handler cannot run in idem.ModeSingleTransaction
//     (a step, a call outside DynamoDB). The consumer refuses that mode at init, and the
//     suites skip what needs it, with that reason.
//   - Caller (Services): the variables holding the URL of each outside HTTP service the
//     handler calls in a recorded step, with the idempotency key forwarded. The tools
//     and the suites stand a local gateway in for each (internal/gateway), count its
//     calls per key and crash consumers around the step.
//
// What lacks an optional interface is skipped by name, never guessed at: TrafficOf,
// CheckerOf and ConfirmerOf return a *MissingError such as `example "webhooks" has no
// traffic generator (implement example.Traffic)`, which idemctl reports as a usage error
// and the test suites as the reason of their t.Skip.
//
// The three examples of this repository are functions/consumer/ledger (payments credited
// to accounts; the default), functions/consumer/inventory (stock reservations) and
// functions/consumer/payouts (payouts: a read, a refusal before the call, a payment
// gateway called in a step, a write and an outbound message; lease mode only). All
// implement every optional interface the tools need (Full). What they share is beside
// this package: strict decodes a body, guarded is the shape of the first two's handler.
package example

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/idem/outbox"
	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
	"github.com/idemgo/sqs-lambda-consumer/idem/sqsmsg"
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

	// NewHandler builds the business handler from the consumer's dependencies: the
	// variables of the example's template block (Template) in d.Env, and the clients the
	// handler reads and calls through (the consumer's own). It reports every missing or
	// malformed variable at once, and calls nothing: the clients are for the handler's
	// runs. The handler runs under the idem middleware. One that calls anything outside
	// DynamoDB with an effect (a step) does not qualify for idem.ModeSingleTransaction:
	// its example says so (LeaseOnly).
	NewHandler(d Deps) (idem.Handler, error)

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

// Full is an example that implements every optional interface whose tools need
// something of it, as the three examples do: every tool runs on it. A line var _
// example.Full = Example{} in its package keeps it so. (LeaseOnly and Caller describe a
// handler's shape instead: implement them when they are true of yours.)
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

// Deps is what NewHandler gets from the consumer (consumerapp.New): its configuration
// and the clients main wires, the ones the machinery uses, so the handler reaches the
// same endpoint (moto in tests, AWS in Lambda) with the same retries. Every field is
// set.
type Deps struct {
	// Env reads the function's variables: the example's (its template block's
	// environment region) and every other the function has.
	Env Lookup
	// DynamoDB is the consumer's DynamoDB client, for the handler's reads (GetItem,
	// Query) of its own tables. Writes go in idem.Result.Writes, committed with the
	// record; a write made here is outside that transaction.
	DynamoDB persistence.DynamoDBAPI
	// SQS is the consumer's SQS client. Messages to send go in idem.Result.Messages
	// (sent once the record is committed); this client is for anything else.
	SQS SQS
	// HTTP is the consumer's client for calls outside AWS: make them in a step
	// (idem.Attempt.Step) with the idempotency key forwarded, under the invocation's
	// context, which carries its deadline.
	HTTP *http.Client
}

// SQS is the part of the SQS client the consumer uses and hands to the handler;
// *sqs.Client satisfies it.
type SQS interface {
	sqsmsg.SQSSender
	outbox.SQSBatchSender
}

// LeaseOnly is implemented by an example whose handler cannot run in
// idem.ModeSingleTransaction: one with a step (idem.Attempt.Step returns
// idem.ErrNotInThisMode there), or any call outside DynamoDB with an effect, which that
// mode may run more than once for one key. The consumer refuses the mode at init with
// the reason, and the tools and suites skip what needs it, saying why.
type LeaseOnly interface {
	// LeaseOnly says why the handler needs the lease mode ("it charges the payment
	// gateway in a step before its commit").
	LeaseOnly() string
}

// ModeError says that an example cannot run in a mode. It wraps idem.ErrNotInThisMode.
type ModeError struct {
	Example string
	Mode    idem.Mode
	Reason  string // the example's LeaseOnly
}

func (e *ModeError) Error() string {
	return fmt.Sprintf("example %q cannot run in the %s mode: %s; it needs IDEMPOTENCY_MODE=%s", e.Example, e.Mode, e.Reason, idem.ModeLease)
}

func (e *ModeError) Unwrap() error { return idem.ErrNotInThisMode }

// CheckMode returns a *ModeError when ex cannot run in mode (a LeaseOnly example in
// idem.ModeSingleTransaction), nil otherwise.
func CheckMode(ex Example, mode idem.Mode) error {
	if lo, ok := ex.(LeaseOnly); ok && mode == idem.ModeSingleTransaction {
		return &ModeError{Example: ex.Name(), Mode: mode, Reason: lo.LeaseOnly()}
	}
	return nil
}

// Caller is implemented by an example whose handler calls outside HTTP services (a
// payment gateway, a webhook endpoint) in a recorded step (idem.Attempt.Step), with the
// idempotency key forwarded in an Idempotency-Key header so the service applies a
// repeated call once. Locally and in tests, the tools stand a gateway in for each
// service (internal/gateway: a real HTTP server on loopback that records every call by
// its key), put its URL in the variable, count the calls per key and crash consumers
// around the step (idemctl run --crash-at step-called, step-recorded).
type Caller interface {
	// Services returns the variables that hold the base URL of each service.
	Services() []string
}

// ServicesOf returns ex's outside services (Caller.Services), none when ex is no Caller.
func ServicesOf(ex Example) []string {
	if c, ok := ex.(Caller); ok {
		return c.Services()
	}
	return nil
}

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
