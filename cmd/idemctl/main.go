// Command idemctl runs the idempotent SQS consumer locally and operates it: it creates
// the template's queues and tables on moto or LocalStack, sends payments, inspects and
// unlocks idempotency records, and redrives the dead-letter queue. It only wires the
// process to package cli; `idemctl help` lists the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemgo/sqs-lambda-consumer/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
	stop()
	os.Exit(code)
}
