//go:build !linux

package node

import "syscall"

// childProcAttr: only Linux can tie the child's life to the node's; a
// node killed with SIGKILL elsewhere leaves its apiserver running.
func childProcAttr() *syscall.SysProcAttr { return nil }
