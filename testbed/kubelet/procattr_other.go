//go:build !linux

package kubelet

import "syscall"

// procAttr puts a pod's process in its own process group.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
