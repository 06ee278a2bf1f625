// Package idem makes an at-least-once message handler run its effect exactly once.
//
// A Client acquires a lease on an idempotency key with one conditional write, runs the
// handler, and stores the handler's response together with a TTL. A later delivery of
// the same key gets the stored response instead of a second execution. Every write a
// lease holder makes after the acquire (complete, fail, step, extend) is fenced on its
// own lease token, so a holder whose lease was taken over can no longer commit anything,
// not even the business writes it hands back to be committed with the completion.
//
// A handler's effects are its business writes (Result.Writes) and its outbound SQS
// messages (Result.Messages). The writes commit in one transaction with the completion;
// the messages are stored by that transaction and sent after it (the outbox), batched
// across the records of an SQS batch, then marked sent. A refused commit sends nothing,
// and a crash between the commit and the send loses nothing: the next delivery of the
// key, or the Reaper, sends what is pending. Guard writes (Result.Guards) carry the
// payload's fingerprint and keep the effect single past the record's retention: a
// redelivery after the record was deleted commits and sends nothing, and another
// payload under the same key is ErrPayloadMismatch. Steps (Attempt.Step) are for calls
// that must happen before the commit; Attempt.Applied lets such a handler check its
// guard first.
//
// A business rule's refusal (a write's condition, explained by Result.Explain) and a
// request DynamoDB refuses as invalid are permanent for the delivery, which is
// dead-lettered, but leave the record retryable, so the message redriven after the fix
// runs once. Other permanent failures are stored and replayed until reaper.Unlock clears them.
//
// A handler's author imports this package alone: Handler, Request, Result, Attempt,
// Message and the errors. The other packages under idem/ are imported by the wiring
// (functions/consumer/consumerapp) and the tools:
//   - persistence: the record, its transitions table, Store and DynamoStore (memstore:
//     MemoryStore, with the same semantics, for unit tests);
//   - sqsbatch: BatchProcessor (FIFO groups, partial batch responses, visibility) and
//     NewSQSHandler, which runs a Client on each record;
//   - outbox: the checks and the delivery of outbound messages;
//   - reaper: the sweep that fails leases whose holder vanished, and Unlock;
//   - sqsmsg: SQS's limits, the stack's signatures and the dead letters;
//   - telemetry and emf: the spans and the metrics;
//   - canonjson: the payload's canonical JSON, which its fingerprint hashes.
//
// Everything in this package is safe for concurrent use unless a comment says otherwise.
// Nothing here panics on bad input or bad configuration: constructors validate and
// return errors, and store failures are always returned (the handler never runs when the
// store cannot be reached).
package idem
