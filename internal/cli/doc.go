// Package cli implements idemctl, the local runner and operations CLI of this template.
// cmd/idemctl/main.go only hands the process's arguments, output and environment to
// Main; tests call Main in-process with an environment of their own, so they can run in
// parallel against one local endpoint.
//
// Every command reads its settings from flags, falling back to the environment that
// eval "$(idemctl up)" exports (QUEUE_URL, DLQ_URL, IDEMPOTENCY_TABLE, ...), and finds
// AWS through the SDK's own configuration: AWS_ENDPOINT_URL points it at moto or
// LocalStack. Results go to stdout, progress and errors to stderr. Main returns 0 on
// success, 1 when the command failed and 2 for a bad command line.
//
// A command is a function of the shape of runFunc in its own file, listed in the
// commands table of cli.go.
package cli
