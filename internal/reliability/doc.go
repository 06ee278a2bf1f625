// Package reliability holds the reliability suite: scenarios that try to make a payment
// credited twice or lost (a duplicate storm, consumers killed at chosen phases, faults
// between the consumers and the store, a stalled holder fenced out), each ending with
// the same check from outside the consumer: read the ledger table and the dead-letter
// queue and compare them with what the producer sent.
//
// The scenarios are tests. `make test` runs them at small sizes; `make reliability`
// sets RELIABILITY=full and runs the sizes RELIABILITY.md reports.
package reliability
