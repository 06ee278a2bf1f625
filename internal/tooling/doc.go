// Package tooling says, in one place (tooling.go), which folders of this repository a
// production team keeps and which it may delete: the consumer itself (Production), what
// the consumer's own tests import (TestSupport), and the development tooling
// (Deletable): idemctl, the demo, the reliability suites, the simulator, the benchmarks,
// the cost and scale models, the rename, the documentation checks, and this package.
//
// Its test TestRemovingTheToolingLeavesTheConsumerGreen proves the split: it copies the
// files git tracks, deletes every Deletable folder from the copy, and runs there
// `go build ./...`, `go vet ./...`, the consumer's own tests (`go test ./idem/
// ./functions/...`, on this package's moto) and `cfn-lint template.yaml`. A kept package
// that imports a deleted one fails it. docs/tooling.md is the page for readers; the
// other tests here check that it and README.md name every folder of the lists, and that
// every Go package of the repository is in exactly one of them. It has no Go API
// besides the lists.
package tooling
