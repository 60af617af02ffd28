//go:build hamaster_faults

package main

import (
	"os"
	"syscall"
)

// faultHook, in test builds only: HAMASTER_FAULT_CRASH_AFTER_STEP=<step>
// makes the process die like a killed one right after the named step is
// journaled, so crash-resume can be tested for real.
func faultHook(e *env) func(string) error {
	step := e.get("HAMASTER_FAULT_CRASH_AFTER_STEP")
	if step == "" {
		return nil
	}
	return func(s string) error {
		if s == step {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		return nil
	}
}
