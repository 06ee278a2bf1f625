// Package example is the seam between the machinery (the consumer's wiring, idemctl, the
// demo, the reliability suite, the benchmarks and the event generator) and one message
// type. A message type is one package that implements Example; the wiring package names
// it, and nothing else outside its package does.
//
// The two examples of this repository are functions/consumer/ledger (payments credited
// to accounts; the default) and functions/consumer/inventory (stock reservations).
package example

import (
	"context"
	"errors"
	"math/rand/v2"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// Example is everything the machinery needs to know about one message type.
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

	// Traffic returns n distinct valid messages over at most groups FIFO groups. run
	// makes the business ids unique to one run, so runs against the same tables do
	// not collide. The same rng state gives the same traffic.
	Traffic(rng *rand.Rand, run string, n, groups int) []Message

	// Bad returns the bad messages of a run whose valid traffic is valid: each must be
	// dead-lettered by the consumer with a dlq-reason that contains its Reason. A bad
	// message may depend on valid[0] having been consumed before it (it is sent after
	// the first half of the traffic, in valid[0]'s group when it shares its group).
	Bad(run string, valid []Message) []Bad

	// Prepare writes what the traffic needs before it is sent (stock to reserve, for
	// instance), for every message of valid. It adds to what is there, so two runs
	// against the same tables do not undo each other.
	Prepare(ctx context.Context, db DynamoDB, env Lookup, valid []Message) error

	// Expect returns what the example's tables must hold once exactly the messages of
	// applied (a subset of valid, each applied once) were applied, after Prepare(valid).
	// Only the names it returns are compared.
	Expect(valid, applied []Message) (State, error)

	// Read reads the example's tables back: the State to compare with Expect's, and
	// the business effects counted in the tables themselves (one per applied message
	// in a correct run).
	Read(ctx context.Context, db DynamoDB, env Lookup) (Outcome, error)

	// OutboundQueue names the variable that holds the URL of the queue the handler's
	// outbound messages go to ("" if it sends none).
	OutboundQueue() string

	// Confirms returns the business id of the message an outbound message body
	// confirms.
	Confirms(body string) (id string, ok bool)

	// Template returns the example's template block: its parameters, its resources and
	// the consumer's environment for it, between the markers of TemplateMarkers.
	Template() []byte
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
