// Command rename rewrites the module path of this repository: make rename MODULE=...
// (package rename has the logic).
package main

import (
	"os"

	"github.com/idemgo/sqs-lambda-consumer/internal/rename"
)

func main() {
	os.Exit(rename.Main(os.Args[1:], os.Stdout, os.Stderr))
}
