// Package inventory is the second example business handler of this template: stock
// reservations, applied exactly once, with stock that never goes below zero. It has the
// ledger's shape (functions/consumer/ledger; read its package documentation first) with
// one difference: its refusal is an everyday business rule, insufficient stock.
//
//   - Decode validates a reservation {"order_id", "sku", "quantity"} strictly; an
//     invalid message is returned wrapped in idem.Permanent and dead-lettered.
//   - The handler returns two writes for the idem middleware to commit in one
//     transaction with the completion of the key: the order's journal entry (the guard,
//     idem.Result.Guards), put only if absent, and the stock decrement
//     "SET available = available - :q ADD reserved :q, reservation_count :one" under
//     the condition "available >= :q". The decrement is not idempotent on its own; the
//     single commit makes it so, and the journal entry keeps it so after the
//     idempotency record is gone.
//   - A reservation the stock cannot serve (or for a sku without stock) fails that
//     condition: nothing is committed, no confirmation is sent, and idem.Result.Explain
//     turns the failure into "insufficient stock: sku X has 3 available, 5 requested"
//     for the dead-letter queue.
//   - The confirmation is an outbound message (idem.Result.Messages) on a FIFO queue,
//     grouped by sku and deduplicated by the idempotency key.
//
// The stock table has partition key sku (S); each sku item holds available (N),
// reserved (N) and reservation_count (N), and each journal entry has sku
// "order#<order_id>" (EntryPrefix; no sku may start with it; "order#http~<caller's
// tag>~<order_id>" under an HTTP caller's key, idem.CallerScope) with order_sku, quantity
// and key_hash. Stock is added with AddStock (ADD, so additions add up) and read with
// Stocks.
package inventory
