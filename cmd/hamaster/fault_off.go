//go:build !hamaster_faults

package main

// faultHook is the test-only crash hook; the shipped binary has none (the
// tests build hamaster with -tags hamaster_faults, see fault_on.go).
func faultHook(*env) func(string) error { return nil }
