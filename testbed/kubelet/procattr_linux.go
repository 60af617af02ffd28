package kubelet

import "syscall"

// procAttr puts a pod's process in its own process group (so stopping it
// reaches its children) and has the kernel kill it when the kubelet dies:
// the stand-in has no runtime to adopt running containers after a
// restart, so a restarted kubelet starts its pods afresh, as after a
// host reboot.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
