package localtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

func TestBuildDirPID(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		pid  int
		ok   bool
	}{
		{"hamaster-bin-4242-123456", 4242, true},
		{"hamaster-bin-123456", 0, false}, // the old shape: no pid to check
		{"hamaster-bin-x-1", 0, false},
		{"hamaster-bin--1", 0, false},
		{"hamaster-test-subnets", 0, false},
		{"go-build123", 0, false},
	}
	for _, c := range cases {
		pid, ok := buildDirPID(c.name)
		if pid != c.pid || ok != c.ok {
			t.Errorf("buildDirPID(%q) = %d, %v; want %d, %v", c.name, pid, ok, c.pid, c.ok)
		}
	}
}

func TestReclaimBuildDirsRemovesOnlyDeadProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A pid that certainly ended: a child we waited for.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	mk := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Join(p, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gone := mk(binPrefix + strconv.Itoa(dead) + "-1")
	live := mk(binPrefix + strconv.Itoa(os.Getpid()) + "-2")
	other := mk("unrelated-" + strconv.Itoa(dead) + "-3")
	reclaimBuildDirs(dir)
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("%s of an ended process kept (stat: %v)", gone, err)
	}
	for _, p := range []string{live, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
}
