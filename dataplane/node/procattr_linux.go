package node

import "syscall"

// childProcAttr makes the kernel kill the real apiserver when the node
// process dies (SIGKILL included), as a VM's processes die with it.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
