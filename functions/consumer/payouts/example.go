package payouts

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/envconf"
)

// Variables of the payouts' template block that the handler reads.
const (
	TableVar   = "PAYEES_TABLE"
	NoticesVar = "PAYOUT_NOTICES_QUEUE_URL"
	GatewayVar = "PAYMENT_GATEWAY_URL"
	// KeyWindowVar is how long the gateway keeps an idempotency key (optional, default
	// DefaultKeyWindow).
	KeyWindowVar = "PAYMENT_GATEWAY_KEY_WINDOW"
)

//go:embed template.yaml
var block []byte

// Example is payouts as an example.Example: what the consumer's wiring, idemctl, the
// demo and the suites know of payouts.
type Example struct{}

var (
	_ example.Full      = Example{} // every tool runs on it
	_ example.LeaseOnly = Example{} // its step needs the lease mode
	_ example.Caller    = Example{} // it calls the payment gateway
)

// Name is "payouts".
func (Example) Name() string { return "payouts" }

// Decode validates a payout (Decode) and returns it as traffic: key Key(p), group
// payee_id.
func (Example) Decode(body []byte) (example.Message, error) {
	p, err := Decode(body)
	if err != nil {
		return example.Message{}, err
	}
	return message(p), nil
}

func message(p Payout) example.Message {
	b, _ := json.Marshal(p) // strings and an int64 always marshal
	return example.Message{ID: p.PayoutID, Key: Key(p), Group: p.PayeeID, Body: string(b)}
}

// NewHandler reads PAYEES_TABLE, PAYOUT_NOTICES_QUEUE_URL, PAYMENT_GATEWAY_URL and
// PAYMENT_GATEWAY_KEY_WINDOW and
// returns the payout handler, which reads the payees table through d.DynamoDB and calls
// the gateway through d.HTTP.
func (Example) NewHandler(d example.Deps) (idem.Handler, error) {
	e := envconf.New(d.Env)
	cfg := Config{
		PayeesTable: e.Required(TableVar), NoticesQueueURL: e.Required(NoticesVar), GatewayURL: e.Required(GatewayVar),
		KeyWindow: e.Duration(KeyWindowVar, DefaultKeyWindow),
	}
	if err := e.Err(); err != nil {
		return nil, fmt.Errorf("payouts configuration: %w", err)
	}
	return NewHandler(cfg, Clients{DynamoDB: d.DynamoDB, HTTP: d.HTTP})
}

// LeaseOnly: the transfer is a step, which the single-transaction mode does not run.
func (Example) LeaseOnly() string {
	return "its handler calls the payment gateway in a step (idem.Attempt.Step) before its commit"
}

// Services is the payment gateway's URL variable.
func (Example) Services() []string { return []string{GatewayVar} }

// Traffic returns n payouts po-<run>-NNNNN to payees pe-<run>-NNN, each of 1 to 500
// currency units.
func (Example) Traffic(rng *rand.Rand, run string, n, groups int) []example.Message {
	out := make([]example.Message, n)
	for i := range out {
		out[i] = message(Payout{
			PayoutID:    fmt.Sprintf("po-%s-%05d", run, i),
			PayeeID:     fmt.Sprintf("pe-%s-%03d", run, rng.IntN(max(groups, 1))),
			AmountCents: 100 * (1 + rng.Int64N(500)),
		})
	}
	return out
}

// Bad returns six messages the consumer must dead-letter: broken JSON, an amount of 0,
// an unknown field, no key anywhere, a payout to a payee that is not enabled (refused
// before the gateway is called; Fix enables the payee) and valid[0]'s key with another
// amount.
func (Example) Bad(run string, valid []example.Message) []example.Bad {
	g := "pe-" + run + "-bad"
	id := func(n int) string { return fmt.Sprintf("po-%s-bad-%d", run, n) }
	msg := func(n int, body string) example.Message {
		return example.Message{ID: id(n), Key: "payout:" + id(n), Group: g, Body: body}
	}
	disabled := "pe-" + run + "-disabled"
	bad := []example.Bad{
		{Message: msg(1, `{"payout_id":"`+id(1)+`","payee_id":`), Reason: "body is not valid JSON"},
		{Message: msg(2, `{"payout_id":"`+id(2)+`","payee_id":"`+g+`","amount_cents":0}`), Reason: "amount_cents: must be positive"},
		{Message: msg(3, `{"payout_id":"`+id(3)+`","payee_id":"`+g+`","amount_cents":100,"iban":"DE00"}`), Reason: `"iban": unknown field`},
		// On a FIFO queue the deduplication id stands in for a missing key attribute; the
		// handler then refuses the body.
		{Message: example.Message{ID: id(4), Group: g, Body: `{"payee_id":"` + g + `","amount_cents":100}`}, Reason: "payout_id: missing"},
		{
			Message: message(Payout{PayoutID: id(5), PayeeID: disabled, AmountCents: 2500}),
			Reason:  "payee " + disabled + " is not enabled",
			// The fix: the operator enables the payee; the redriven payout is paid once.
			Fix: func(ctx context.Context, db example.DynamoDB, env example.Lookup) error {
				table, err := tableOf(env)
				if err != nil {
					return err
				}
				return EnablePayee(ctx, db, table, disabled)
			},
		},
	}
	if len(valid) == 0 {
		return bad
	}
	first, err := Decode([]byte(valid[0].Body))
	if err != nil {
		return bad
	}
	// valid[0]'s key with another amount: a producer bug.
	conflict := first
	if conflict.AmountCents < MaxAmountCents {
		conflict.AmountCents++
	} else {
		conflict.AmountCents--
	}
	return append(bad, example.Bad{Message: message(conflict), Reason: "payload does not match"})
}

func tableOf(env example.Lookup) (string, error) {
	table, err := env.Need(TableVar)
	if err != nil {
		return "", fmt.Errorf("payouts: %w", err)
	}
	return table, nil
}

// payees returns the payees of valid, sorted; messages that do not decode are an error.
func payees(valid []example.Message) ([]Payout, []string, error) {
	ps, err := example.DecodeAll(valid, Decode)
	if err != nil {
		return nil, nil, fmt.Errorf("payouts: %w", err)
	}
	var ids []string
	for _, p := range ps {
		if !slices.Contains(ids, p.PayeeID) {
			ids = append(ids, p.PayeeID)
		}
	}
	slices.Sort(ids)
	return ps, ids, nil
}

// Prepare enables every payee of valid (EnablePayee): the traffic pays only enabled
// payees. Enabling twice changes nothing.
func (Example) Prepare(ctx context.Context, db example.DynamoDB, env example.Lookup, valid []example.Message) error {
	table, err := tableOf(env)
	if err != nil {
		return err
	}
	_, ids, err := payees(valid)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	for _, id := range ids {
		if err := EnablePayee(ctx, db, table, id); err != nil {
			return err
		}
	}
	return nil
}

// Expect returns, per payee of valid, "<payee> paid_cents" (the amounts of the distinct
// applied payouts to it) and "<payee> payout_count" (their number).
func (Example) Expect(valid, applied []example.Message) (example.State, error) {
	_, ids, err := payees(valid)
	if err != nil {
		return nil, fmt.Errorf("expected outcome: %w", err)
	}
	ps, _, err := payees(applied)
	if err != nil {
		return nil, fmt.Errorf("expected outcome: %w", err)
	}
	st := example.State{}
	for _, id := range ids {
		st[id+" "+attrPaid], st[id+" "+attrCount] = 0, 0
	}
	for _, p := range example.Distinct(ps, func(p Payout) string { return p.PayoutID }) {
		st[p.PayeeID+" "+attrPaid] += p.AmountCents
		st[p.PayeeID+" "+attrCount]++
	}
	return st, nil
}

// Read scans the payees table (Payees): the same names as Expect, and the payouts
// counted by payout_count.
func (Example) Read(ctx context.Context, db example.DynamoDB, env example.Lookup) (example.Outcome, error) {
	return example.ReadTable(ctx, db, env, TableVar, Payees, (*Payee).fields, attrCount)
}

// OutboundQueue is PAYOUT_NOTICES_QUEUE_URL.
func (Example) OutboundQueue() string { return NoticesVar }

// Confirms returns the payout id of a notice.
func (Example) Confirms(body string) (string, bool) {
	return example.Confirmed(body, func(n Notice) string { return n.PayoutID })
}

// Template returns the payouts' template block (template.yaml of this package).
func (Example) Template() []byte { return block }
