package sshtest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill sshd when the test binary dies
// without running its cleanups (a -timeout panic, a SIGKILL). Its
// per-connection children then end as their clients' connections close.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
