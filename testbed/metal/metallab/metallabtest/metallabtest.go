// Package metallabtest starts a metallab lab for a test: the machine's
// prerequisites checked first (root, ip, sshd, and what the test names),
// everything removed when the test ends, and checked removed.
package metallabtest

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/testbed/metal/metallab"
)

// Need fails the test under CI and skips it elsewhere when the machine
// cannot run a lab (not root: network namespaces and mounts), and fails it
// when a binary is missing: the lab's own (ip, unshare, sshd) and any of
// bins (absolute paths such as /usr/sbin/keepalived), which
// scripts/test-prereqs.sh installs.
func Need(t testing.TB, bins ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("the metal lab needs root; CI runs as root")
		}
		t.Skip("the metal lab needs root (network namespaces, mounts)")
	}
	if err := metallab.Preflight(); err != nil {
		t.Fatalf("%v (scripts/test-prereqs.sh installs what the tests need)", err)
	}
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s is missing: scripts/test-prereqs.sh installs it (%v)", b, err)
		}
	}
}

// Start checks Need, builds a lab of n hosts in a temporary directory
// and registers its removal, then checks that no namespace of it is left.
func Start(ctx context.Context, t testing.TB, n int, bins ...string) *metallab.Lab {
	t.Helper()
	Need(t, bins...)
	dir := filepath.Join(t.TempDir(), "lab")
	lab, err := metallab.New(ctx, metallab.Options{Hosts: n, Dir: dir, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, h := range lab.Hosts {
				t.Logf("%s sshd log:\n%s", h.Name, h.LogTail())
			}
		}
		// t.Context() has ended by now.
		if err := lab.Close(context.Background()); err != nil {
			t.Error(err)
		}
		out, _ := exec.Command("ip", "netns", "list").Output()
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 0 && (f[0] == lab.Switch() || strings.HasPrefix(f[0], strings.TrimSuffix(lab.Switch(), "sw"))) {
				t.Errorf("namespace %s left", f[0])
			}
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s left", dir)
		}
	})
	return lab
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
