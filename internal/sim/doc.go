// Package sim is the deterministic simulator of issue 19: SQS (simsqs), DynamoDB
// (internal/simdb, which idem's contract tests also use), Lambda's event source mapping,
// execution environments and timeouts, the reaper's schedule and DynamoDB's TTL process,
// on one virtual clock (testing/synctest), running the real consumer (consumerapp.New,
// hence idem) and the real reaper (reaperapp.New) through the AWS SDK's interfaces.
//
// A seed draws a scenario (queue type, mode, layout, batch and timeout settings, fault
// rates, a workload of operations and their duplicates) and every latency and fault of
// its run, so one seed is one history: Run(t, seed, true) replays it with its trace.
// At the end of a run the oracle (oracle.go) checks the promises: each effect applied
// once, each outbound message delivered once to a receiver keyed on its
// idempotency-key and in its FIFO group's commit order, nothing acknowledged before
// its commit's outbound messages were sent, every refused message dead-lettered with its
// reason, nothing left in progress or pending. TestSim explores a budget of seeds;
// RELIABILITY.md says what is modeled, what is not, and what the runs found.
package sim
