package kubelet

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrapperScript(t *testing.T) {
	dir := t.TempDir()
	// A stand-in for hamaster-kubelet that prints its arguments.
	echo := filepath.Join(dir, "hamaster kubelet")
	if err := os.WriteFile(echo, []byte("#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := WrapperScript(echo, "v1.34.4", "/cache/bins")
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "kubelet")
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(wrapper, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSpace(string(out)), "\n")
	if args[0] != "--hamaster-version=v1.34.4" || args[1] != "--hamaster-bin-dir=/cache/bins" || args[len(args)-1] != "--version" {
		t.Errorf("args = %q", args)
	}
	o, err := ParseFlags(args, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if o.Version != "v1.34.4" || o.Config != "/var/lib/kubelet/config.yaml" || o.Kubeconfig != "/etc/kubernetes/kubelet.conf" || !o.ShowVersion {
		t.Errorf("parsed %+v", o)
	}
	for _, bad := range [][3]string{{echo, "1.34", "/b"}, {"it's", "v1.34.4", "/b"}, {echo, "v1.34.4", ""}} {
		if _, err := WrapperScript(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("WrapperScript(%q) accepted", bad)
		}
	}
}
