// Package ledger is the example business handler of this template: payments applied to
// a ledger, exactly once. Replace it with your own message and effect; keep the shape.
//
// The shape to keep:
//
//   - Decode validates the message strictly. A message that can never be valid is
//     returned wrapped in idem.Permanent, so the consumer moves it to the DLQ instead of
//     retrying it.
//   - Side effects outside DynamoDB (here: a receipt on an outbound FIFO queue) run as a
//     named recovery step (idem.Attempt.Step) and carry the idempotency key downstream
//     (here: as the MessageDeduplicationId), so a retried attempt skips them or the
//     receiver drops the repeat.
//   - The DynamoDB effect is not written by the handler: it is returned in
//     idem.Result.Writes and committed by the idem middleware in one transaction with
//     the completion of the key. That is why a plain, non-idempotent ADD is correct here.
//   - A guard write protects the effect beyond the idempotency record's retention: each
//     payment's journal entry is put only if absent, first in the same transaction and
//     listed in idem.Result.Guards. A payment redelivered after its record expired runs
//     again, fails on its entry, and is completed without a second credit.
//
// The ledger table has partition key account_id (S); each account item holds
// balance_cents (N), payment_count (N), currency (S) and last_payment_id (S), and each
// journal entry has account_id "entry#<payment_id>" (EntryPrefix; no account id may start
// with it) with entry_account, amount_cents, currency and key_hash. Amounts are in minor units of
// the currency (cents; for JPY, yen). An account is single-currency: its first payment
// sets its currency, and a payment in another currency fails the write's condition, so
// "every balance equals the sum of the distinct payments sent" stays checkable from
// outside (see Balances and ExpectedBalances).
package ledger
