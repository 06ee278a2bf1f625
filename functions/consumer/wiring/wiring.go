// Package wiring names the message types this build carries. It is the one file outside
// an example's own package that names the example: the consumer, idemctl, the demo, the
// reliability suite and the benchmarks reach it only through example.Example (Name,
// Decode, NewHandler, Template: all the consumer needs) and the optional interfaces it
// implements (example.Traffic, Checker, Preparer, Confirmer: what the demo, the suites
// and the sample events need; without them those tools say what they skip).
//
// To run your own message type, put its package beside the ledger, list it here first,
// and put its template block in template.yaml (see README.md, "Adapting it to your own
// messages").
package wiring

import (
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/inventory"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/ledger"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/payouts"
)

// Examples are the message types of this build. The first is the default: the one the
// consumer runs when its EXAMPLE variable is unset, and the tools use without
// --example. Its template block is the one in template.yaml.
var Examples = []example.Example{ledger.Example{}, inventory.Example{}, payouts.Example{}}

// Default is the first of Examples.
func Default() example.Example { return Examples[0] }
