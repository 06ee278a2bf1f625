// Package memstore is an in-memory Store with DynamoStore's semantics, for unit tests: it
// evaluates the same transitions table (persistence.Transitions) in Go, refuses what
// DynamoDB would refuse (item sizes, a transaction's limits), and is checked against
// DynamoStore by the same walk of every row (TestTransitionTable). It is safe for
// concurrent use; nothing in it lasts past the process.
package memstore
