package proctree

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// A grandchild in a session of its own is found, and killed.
func TestDescendantsAndKill(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sh", "-c", "setsid sleep 300 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	var ds []int
	for len(ds) == 0 && time.Now().Before(deadline) {
		ds = Descendants(cmd.Process.Pid)
	}
	if len(ds) == 0 {
		t.Fatal("the shell's child was not found")
	}
	if slices.Contains(ds, os.Getpid()) || slices.Contains(ds, cmd.Process.Pid) {
		t.Fatalf("Descendants(%d) = %v includes an ancestor or itself", cmd.Process.Pid, ds)
	}
	KillDescendants(cmd.Process.Pid)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the shell did not end once its child was killed: %v", err)
	}
	if left := Descendants(cmd.Process.Pid); len(left) != 0 {
		t.Fatalf("left: %v", left)
	}
}
