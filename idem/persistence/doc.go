// Package persistence is where an idempotency record lives, and the one place its rules
// are written. It promises: every write to a record follows the transitions table
// (Transitions: each event's from-states, to-states and the conditions its write checks,
// as a DynamoDB condition expression and as a Go predicate side by side), so a record
// never moves but along a row of that table; a holder's writes are fenced on its lease
// token; a business write commits in the same transaction as the completion or not at
// all. Store is the interface the middleware, the batch and the reaper use; DynamoStore
// keeps records in a DynamoDB table in one of its layouts (Layout, CreateTable), and the
// codec is the one mapping between a Record and its item. MemoryStore (package memstore)
// follows the same table in memory, for unit tests.
package persistence
