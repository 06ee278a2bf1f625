// Package payouts is the third example message type, in the shape of a consumer that
// pays out through a payment gateway: it reads its state, refuses before calling out,
// calls an outside HTTP service as a recorded step with the idempotency key forwarded,
// then writes and sends. Read the ledger's package documentation first for what the
// journal entry and the outbound message buy; this one adds the read, the refusal and
// the step.
//
// For each payout {"payout_id", "payee_id", "amount_cents"} the handler (handler.go):
//
//  1. decodes it strictly; an invalid message is idem.Permanent, dead-lettered;
//  2. reads the payout's journal entry through idem.Attempt.Applied: present, the payout
//     was made by an execution the idempotency record no longer remembers (a redelivery
//     after the record's TTL), and the handler answers without calling the gateway again
//     (idem.Result.Guarded);
//  3. reads the payee's row with the consumer's own DynamoDB client (example.Deps): a
//     payee without a row, or not enabled, is refused with idem.Refuse before anything is
//     called or written. The message is dead-lettered with the reason and its record
//     stays retryable: enabled, then redriven (idemctl redrive), it is paid once;
//  4. POSTs the transfer to the gateway (PAYMENT_GATEWAY_URL + "/transfers") inside
//     idem.Attempt.StepAnswer("transfer"), with the idempotency key in the
//     Idempotency-Key header: a takeover after a crash between the call and its
//     recording calls again with the same key, and the gateway, which applies a key
//     once, pays once and answers the same transfer id. The step records the gateway's
//     transfer id with it, under the lease's fence: a takeover after the step was
//     recorded skips the call and gets the id from the record. The gateway keeps keys
//     PAYMENT_GATEWAY_KEY_WINDOW (24 hours by default): a retry past that of a transfer
//     that is not recorded asks the gateway (GET /transfers?idempotency_key=KEY) instead
//     of posting it again (idem.Attempt.StepWith);
//  5. returns the journal entry (the guard, put only if absent, with the transfer id),
//     the payee's totals
//     (ADD paid_cents, payout_count) and a "payout sent" notice naming the transfer id on
//     a FIFO queue for the idem middleware to commit together.
//
// A step runs only in the lease mode: the example is example.LeaseOnly, and the
// consumer refuses IDEMPOTENCY_MODE=single-transaction for it at init. It is an
// example.Caller: the tools and the suites stand internal/gateway in for the payment
// gateway, count its calls per key and crash consumers around the step.
//
// The payees table has partition key payee_id (S): each payee's row holds enabled
// (BOOL), paid_cents (N) and payout_count (N); each journal entry has payee_id
// "payout#<payout_id>" (EntryPrefix; no payee id may start with it; "payout#http~<caller's
// tag>~<payout_id>" under an HTTP caller's key, idem.CallerScope) with payout_payee,
// amount_cents, transfer_id and key_hash. EnablePayee enables a payee; Payees reads them all.
package payouts
