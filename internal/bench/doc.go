// Package bench holds the consumer's benchmarks that need development tooling: the batch
// latency under an added network round trip (BenchmarkBatchLatency, TestBatchLatencyTable;
// `make bench`, BENCHMARKS.md), which puts internal/faults' toxiproxy between the consumer
// and the emulator. It is development tooling (docs/tooling.md): the consumer's own
// benchmarks that need nothing else (BenchmarkConsumerCPU) stay in
// functions/consumer/consumerapp. It has no Go API.
package bench
