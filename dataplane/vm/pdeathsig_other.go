//go:build !linux

package vm

import "syscall"

// dieWithParent: no parent-death signal outside Linux; the caller's
// Close stops the process.
func dieWithParent(*syscall.SysProcAttr) {}
