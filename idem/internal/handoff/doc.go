// Package handoff is what the middleware (package idem) and the SQS batch (package
// sqsbatch) hand each other through a record's context: the SQS message the record runs
// for, the batch that sends its pending messages at its end, and the visibility that
// follows its lease. It keeps the two packages apart: neither imports the other's
// internals, and a handler never sees these keys.
package handoff
