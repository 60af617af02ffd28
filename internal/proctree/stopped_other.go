//go:build !linux

package proctree

// waitStopped is a no-op where waitid(2) with WNOWAIT is not at hand.
func waitStopped(int) {}
