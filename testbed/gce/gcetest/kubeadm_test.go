package gcetest_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/testbed/gce/gcetest"
)

// A VM from the fake's kubeadm image is a kubeadm host, with stand-ins
// for the packages (the real ones: make test-gce-kubeadm): its sessions
// see its own hostname and its own /etc/kubernetes, /var/lib/kubelet and
// /usr/local/bin (kubeadm of the image's version), never the machine's;
// its kubelet service runs in the same namespaces; deleting the VM ends
// the kubelet.
func TestKubeadmImageVM(t *testing.T) {
	const version = "v1.33.13"
	dir := t.TempDir()
	binDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(filepath.Join(binDir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"kubeadm", "kubectl"} {
		if err := os.WriteFile(filepath.Join(binDir, version, b), []byte("#!/bin/sh\necho "+b+"-"+version+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The kubelet stand-in records where it runs, then runs until stopped.
	kubelet := filepath.Join(dir, "kubelet-stub")
	if err := os.WriteFile(kubelet, []byte("#!/bin/sh\necho \"$$ $(hostname)\" > /var/lib/kubelet/ran\nexec tail -f /dev/null\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := gcetest.UpKubeadm(t, "kst", gcetest.KubeadmOptions{Version: version, Kubelet: kubelet, BinDir: binDir})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	cl, err := c.Dial(ctx, c.StaticIP)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	run := func(cmd string) string {
		t.Helper()
		out, stderr, err := cl.Run(ctx, cmd)
		if err != nil {
			t.Fatalf("%s: %v: %s", cmd, err, stderr)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run("hostname"); got != c.Master {
		t.Errorf("hostname = %q; want %s", got, c.Master)
	}
	if got := run("kubeadm"); got != "kubeadm-"+version {
		t.Errorf("kubeadm on the VM: %q; want the image's", got)
	}
	run("echo vm > /etc/kubernetes/probe && cat /etc/kubernetes/probe")
	if _, err := os.Stat("/etc/kubernetes/probe"); err == nil {
		t.Fatal("a file the VM wrote in its /etc/kubernetes is in the machine's")
	}
	var pid int
	if err := wait.Until(ctx, 20*time.Millisecond, "the kubelet service to start", func() (bool, error) {
		out, _, err := cl.Run(ctx, "cat /var/lib/kubelet/ran 2>/dev/null || true")
		if err != nil {
			return false, err
		}
		f := strings.Fields(string(out))
		if len(f) != 2 {
			return false, nil
		}
		if f[1] != c.Master {
			t.Errorf("the kubelet runs with hostname %q; want %s", f[1], c.Master)
		}
		pid, err = strconv.Atoi(f[0])
		return err == nil, err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/var/lib/kubelet/ran"); err == nil {
		t.Error("the VM's kubelet wrote the machine's /var/lib/kubelet")
	}
	cl.Close()

	pp, err := gce.New(ctx, c.Settings)
	if err != nil {
		t.Fatal(err)
	}
	defer pp.Close()
	if got := pp.(*gce.Provider).MasterFormat(); got != flavors.Kubeadm {
		t.Errorf("MasterFormat = %q; want %s (--flavor)", got, flavors.Kubeadm)
	}
	if err := pp.Instances().Delete(ctx, c.Master); err != nil {
		t.Fatal(err)
	}
	if err := wait.Until(ctx, 20*time.Millisecond, "the kubelet to end with its VM", func() (bool, error) {
		return syscall.Kill(pid, 0) != nil, nil
	}); err != nil {
		t.Fatal(err)
	}
}
