package lambdaenv

import (
	"os/exec"
	"syscall"
)

// dieWithParent asks Linux to SIGKILL the process when this one dies: an environment
// never outlives the runner, even when the runner is killed with SIGKILL.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
