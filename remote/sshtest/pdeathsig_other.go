//go:build !linux

package sshtest

import "os/exec"

// dieWithParent does nothing here: only Linux has a parent-death signal.
func dieWithParent(*exec.Cmd) {}
