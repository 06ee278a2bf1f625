//go:build unix

package mutation

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the go command in a process group of its own and makes the
// context's end kill the whole group: go test's test binaries are its children, and a
// hung one would outlive the go command killed alone.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
