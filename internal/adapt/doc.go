// Package adapt proves the seam between the machinery and the example from a user's
// seat: its test copies the repository, adds a new message type there (testdata/shipments,
// in a shape none of the shipped examples has) by writing its package, changing the
// wiring file and regenerating template.yaml and events/, and runs the build, the fast
// suites and `idemctl demo` in the copy. It has no code of its own beyond the helpers the
// test uses.
package adapt
