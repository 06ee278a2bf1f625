// Package adapt proves the seam between the machinery and the example from a user's
// seat: its test copies the repository, wires another example in (the last the build lists) by changing only
// the wiring file and the template block, and runs the build, the example's fast suites
// and `idemctl demo` in the copy. It has no code of its own beyond the helpers the test
// uses.
package adapt
