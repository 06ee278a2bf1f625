// Package faults injects faults between the SDK clients and the local AWS emulator
// (moto), for the reliability tests and the benchmarks. Traffic always reaches the real
// emulator; the faults are applied on the way:
//
//   - TCP is an in-process toxiproxy in front of the emulator's host:port: latency,
//     connection resets, stalled connections, bandwidth limits, a proxy that is down.
//     It sees bytes, not requests: a toxic's toxicity is drawn once per TCP connection,
//     and the SDK keeps its connections alive across requests.
//   - HTTPErrors is an HTTP reverse proxy that answers a share of the requests with AWS
//     error responses, either instead of forwarding them (throttling, 500, 503: the
//     emulator never sees the request) or after forwarding them (a lost response: the
//     emulator applied the request and the client gets a 500 or a closed connection,
//     so the SDK retries a write that already happened).
//
// Both listen on a free loopback port; point an SDK client at URL() (for example with
// awstest.ConfigFor). They can be chained: an HTTPErrors whose upstream is a TCP's URL.
package faults
