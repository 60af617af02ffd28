package vm

import "syscall"

// dieWithParent makes the kernel kill the process when its parent dies
// (PR_SET_PDEATHSIG; it survives the exec of `ip netns exec`).
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
