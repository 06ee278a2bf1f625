// Package outbox checks and delivers a handler's outbound messages. It promises: a
// message SQS would refuse for good is refused before the commit (PrepareMessages);
// committed messages are sent after the commit, batched per queue, in their FIFO group's
// order, then marked sent in their record (Deliver); a message SQS refuses for good is
// dead-lettered with its reason and holds up no other; a pending left unsent stays in
// its record, to be sent again with the same keys and deduplication ids.
package outbox
