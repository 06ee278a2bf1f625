// Package doccheck is development tooling: its test checks that every shell command the
// documentation shows runs as written.
//
// The test reads README.md and every other Markdown file of the repository, takes the
// fenced blocks tagged sh, bash or shell, and splits them into commands the way a shell
// would (line continuations, comments, quotes, command substitutions, pipes and lists,
// redirections, variable assignments before a command). Each command is then checked
// against the repository: a make target and the variables it sets against the Makefile,
// an idemctl subcommand and its flags against idemctl's own help, a go test's packages,
// test names and flags against the packages' test files, a path against the tree. The
// cheap commands run for real (make help, idemctl help, idemctl wire --check); the ones
// that need the network, AWS, Docker or a long time are listed as not run, with the
// reason. A command of a form the test does not know fails it, unless an allowlist in
// the test names it with a reason.
//
// Beside the blocks, the test checks the commands quoted inline in the prose (`make
// demo EXAMPLE=inventory`), the test names the prose quotes, and the relative links
// with their anchors.
//
// This file's package holds the parsers (Markdown and shell); the checks are in the
// test, which alone imports the packages it asks (internal/cli, internal/rename).
package doccheck
