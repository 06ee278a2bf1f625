// Package sim is the deterministic simulator of issues 19 and 26: SQS (simsqs), DynamoDB
// (internal/simdb, which idem's contract tests also use, with the transaction conflicts of
// conflict.go on top), Lambda's event source mapping, execution environments and
// timeouts, the reaper's schedule, DynamoDB's TTL process and an outside service, on one
// virtual clock (testing/synctest), running the real consumer (consumerapp.New, hence
// idem), the real reaper (reaperapp.New) and the real ingress (ingressapp.New) through the
// AWS SDK's interfaces.
//
// A seed draws a scenario (queue type, mode, batch and timeout settings, fault rates, a
// workload of operations and their duplicates), a configuration (config.go: the records'
// layout, a second consumer on the shared table, the ingress in front, drifting clocks, a
// handler that calls out), what its producers do wrong (producers.go), and every latency
// and fault of its run, so one seed is one history: Run(t, seed, true) replays it with its
// trace. At the end of a run the oracle (oracle.go, outbound.go, responses.go,
// outside.go, ingress.go) checks the promises of the README's guarantees table and the
// ingress's status. TestSim explores a budget of seeds; RELIABILITY.md says what is
// modeled, what is not, and what the runs found.
package sim
