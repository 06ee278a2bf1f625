// Package sqsbatch runs the records of an SQS event through a handler: FIFO groups in
// order and one at a time, other records with bounded concurrency, and a partial batch
// response that names exactly the records to retry. It promises: a record that fails for
// good is dead-lettered with its reason and acknowledged; a record whose key is held
// elsewhere is retried after the lease, its visibility moved along with the lease; the
// batch's outbound messages go out together after every record ran. NewSQSHandler wires
// a Client (package idem) into such a batch.
package sqsbatch
