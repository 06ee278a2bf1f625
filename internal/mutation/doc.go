// Package mutation computes the mutation score of idem and the ingress (make mutation;
// RELIABILITY.md, "Mutation score"). It is development tooling (internal/tooling lists
// it as deletable).
//
// Run enumerates the mutants of the target packages' non-test files (Enumerate: go/ast,
// with go/types for the operands' types; the operators are listed with Operator), skips
// those in statements that only log, and type-checks each mutated package against its
// dependencies' export data, so a mutant that cannot compile is never built. Before the
// mutants it runs each killer (a go test command, DefaultKillers: the simulator, the
// package's own tests, the tests under functions/) on the unmutated code: it must pass,
// its duration sets the killer's timeout, and its coverage of the target (and, for a
// package's whole tests, each test's coverage, run alone) says which killers and tests
// run each mutant's line. Each mutant then runs those, cheapest killer first, with the
// mutated file given to go test -overlay, until one fails (killed), runs past its timeout
// (killed, timed out) or all pass (survived). The report (mutation.json and mutation.md
// in Config.Out) is rewritten after each mutant, and a later run reuses every mutant
// decided for the same file content.
//
// cmd/mutation is the command make mutation runs.
package mutation
