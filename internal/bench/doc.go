// Package bench holds the benchmarks that need development tooling: the consumer's batch
// latency under an added network round trip (BenchmarkBatchLatency, TestBatchLatencyTable;
// `make bench`, BENCHMARKS.md), which puts internal/faults' toxiproxy between the consumer
// and the emulator, and the ingress under a scripted load over real HTTP (TestIngressLoad;
// `make bench-ingress`), in this process or as execution environments of its bootstrap
// (internal/lambdaenv, internal/localfn). It is development tooling (docs/tooling.md):
// the benchmarks that need nothing else (BenchmarkConsumerCPU) stay in
// functions/consumer/consumerapp. It has no Go API.
package bench
