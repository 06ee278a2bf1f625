// Package ledger is the example business handler of this template: payments applied to
// a ledger, exactly once. Replace it with your own message and effect; keep the shape,
// which functions/consumer/example/guarded implements once for both examples: this
// package gives it the payment's decoding, writes, receipt and explanation.
//
// The shape to keep:
//
//   - Decode validates the message strictly. A message that can never be valid is
//     returned wrapped in idem.Permanent, so the consumer moves it to the DLQ instead of
//     retrying it.
//   - Messages to other queues (here: a receipt on an outbound FIFO queue) are returned
//     in idem.Result.Messages: stored by the commit's transaction and sent after it, so
//     a refused payment gets none and a payment gets one however often it is delivered.
//     They carry the idempotency key downstream (here: as the MessageDeduplicationId and
//     the idempotency-key attribute), so the receiver drops a resend. A call that must
//     happen before the commit (a payment gateway) would be a named step
//     (idem.Attempt.Step) instead, after idem.Attempt.Applied on the guard.
//   - The DynamoDB effect is not written by the handler: it is returned in
//     idem.Result.Writes and committed by the idem middleware in one transaction with
//     the completion of the key. That is why a plain, non-idempotent ADD is correct here.
//   - A guard write protects the effect beyond the idempotency record's retention: each
//     payment's journal entry is put only if absent, first in the same transaction and
//     listed in idem.Result.Guards; the middleware stamps it with the payload's
//     fingerprint. A payment redelivered after its record expired or was deleted runs
//     again, fails on its entry, and is completed without a second credit or receipt; the
//     same payment id with another payload is refused as a payload mismatch.
//   - A refusal by a write's condition is explained in the handler's words
//     (idem.Result.Explain), for the dead-letter queue.
//
// The ledger table has partition key account_id (S); each account item holds
// balance_cents (N), payment_count (N), currency (S) and last_payment_id (S), and each
// journal entry has account_id "entry#<payment_id>" (EntryPrefix; no account id may start
// with it; "entry#http~<caller's tag>~<payment_id>" under an HTTP caller's key,
// idem.CallerScope) with entry_account, amount_cents, currency and key_hash. Amounts are in minor units of
// the currency (cents; for JPY, yen). An account is single-currency: its first payment
// sets its currency, and a payment in another currency fails the write's condition, so
// "every balance equals the sum of the distinct payments sent" stays checkable from
// outside (see Accounts).
package ledger
