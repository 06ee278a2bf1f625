// Package sqsmsg is what SQS accepts of a message and what this stack adds to one: SQS's
// limits in one place (attributes, sizes, deduplication ids, the characters it takes),
// the stack's keyed signatures (Keys: the ingress's signature, the dead letters', the
// logs' keyed hashes), and the dead letters the consumer writes (SQSDeadLetter). It
// promises that a message it dead-letters carries its reason and every attribute it came
// with, and that only a message the stack signed passes VerifyDeadLetter or
// VerifyIngress.
package sqsmsg
