package kubeadmhost

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/wait"
)

// The kubelet service as systemd's Restart=always: an exited process is
// started again after the delay, Restart starts a new one at once, Close
// stops it and it stays stopped.
func TestServiceRestarts(t *testing.T) {
	dir := t.TempDir()
	starts := filepath.Join(dir, "starts")
	// Each run appends a line; the first exits (a crash), later ones run
	// until signalled.
	script := `echo run >> "$1"; [ "$(wc -l < "$1")" -eq 1 ] && exit 1; exec tail -f /dev/null`
	s := StartService("test", []string{"sh", "-c", script, "sh", starts}, filepath.Join(dir, "log"), 10*time.Millisecond, nil)
	defer s.Close(5 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runs := func(n int) func() (bool, error) {
		return func() (bool, error) {
			b, _ := os.ReadFile(starts)
			return strings.Count(string(b), "run") == n && s.Running(), nil
		}
	}
	if err := wait.Until(ctx, 5*time.Millisecond, "the crashed process started again", runs(2)); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	if err := wait.Until(ctx, 5*time.Millisecond, "a restart", runs(3)); err != nil {
		t.Fatal(err)
	}
	s.Close(5 * time.Second)
	if b, _ := os.ReadFile(starts); strings.Count(string(b), "run") != 3 {
		t.Errorf("runs after close: %q", b)
	}
}

func TestInstall(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	for _, b := range []string{"kubeadm", "kubectl"} {
		if err := os.MkdirAll(filepath.Join(bin, "v1.33.13"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, "v1.33.13", b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	prog := filepath.Join(dir, "hamaster-kubelet")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ulb := MountSource(dir, "/usr/local/bin")
	if err := os.MkdirAll(ulb, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Install(ulb, prog, bin, "v1.33.13"); err != nil {
		t.Fatal(err)
	}
	if l, err := os.Readlink(filepath.Join(ulb, "kubeadm")); err != nil || l != filepath.Join(bin, "v1.33.13", "kubeadm") {
		t.Errorf("kubeadm → %q, %v", l, err)
	}
	if b, err := os.ReadFile(filepath.Join(ulb, "kubelet")); err != nil || !strings.Contains(string(b), "--hamaster-version=v1.33.13") {
		t.Errorf("kubelet wrapper: %q, %v", b, err)
	}
	if err := Install(ulb, prog, bin, "v1.99.0"); err == nil {
		t.Error("Install of a version not built: no error")
	}
}
