// Package makefile holds tools.sh, the check the Makefile runs before its targets (every
// missing tool named with the command that installs it, and nothing run), and the tests
// of what a new user meets first in the Makefile: that check, `make help` and
// `make check`. It has no Go API.
package makefile
