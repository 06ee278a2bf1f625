// Package idem makes an at-least-once message handler run its effect exactly once.
//
// A Client acquires a lease on an idempotency key with one conditional write, runs the
// handler, and stores the handler's response together with a TTL. A later delivery of
// the same key gets the stored response instead of a second execution. Every write a
// lease holder makes after the acquire (complete, fail, step, extend) is fenced on its
// own lease token, so a holder whose lease was taken over can no longer commit anything,
// not even the business writes it hands back to be committed with the completion.
//
// The record lives in a Store: DynamoStore keeps it in a DynamoDB table (see CreateTable
// for the schema), MemoryStore keeps it in memory with the same semantics for unit tests.
// A Reaper sweeps the sparse "inflight" index and fails leases whose holder vanished.
// BatchProcessor runs the records of an SQS event through a handler with FIFO group
// ordering, bounded concurrency and partial batch responses.
//
// Everything in this package is safe for concurrent use unless a comment says otherwise.
// Nothing here panics on bad input or bad configuration: constructors validate and
// return errors, and store failures are always returned (the handler never runs when the
// store cannot be reached).
package idem
