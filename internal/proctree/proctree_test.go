package proctree

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
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

// A parent forking without pause leaves no child behind: every process
// it forked, even between its children's kill and its own, is gone.
func TestKillTreeLeavesNoSurvivor(t *testing.T) {
	t.Parallel()
	// A marker no other process carries: the survivors' command line.
	marker := fmt.Sprintf("%d.%d", os.Getpid(), time.Now().UnixNano()%1000000)
	cmd := exec.Command("sh", "-c", "while :; do setsid sleep "+marker+" & done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for len(Descendants(cmd.Process.Pid)) < 20 && time.Now().Before(deadline) {
	}
	KillTree(cmd.Process.Pid)
	_ = cmd.Wait()
	// A survivor is re-parented away from the shell: look for it by its
	// command line (a child not yet exec'd still carries the shell's,
	// marker included). The shell is reaped: whatever it forked is in
	// /proc by now.
	left := withArg(marker)
	for _, p := range left {
		if pid, err := strconv.Atoi(p); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if len(left) > 0 {
		t.Fatalf("%d processes forked by the killed shell survived: %v", len(left), left)
	}
}

// withArg lists the pids whose command line holds arg.
func withArg(arg string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), arg) {
			out = append(out, e.Name())
		}
	}
	return out
}
