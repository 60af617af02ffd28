//go:build metallab

// bin/metallab as an operator runs it (make test-metal): built, started,
// used over SSH with the files it writes, stopped with SIGTERM, and
// killed with SIGKILL then cleaned up by command.

package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hamaster/hamaster/providers/metal"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/testbed/labcmd/labcmdtest"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

// build compiles bin/metallab into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	return filepath.Join(labcmdtest.Build(t, "cmd/metallab"), "metallab")
}

// machine is what a lab may leave on this machine.
type machine struct {
	namespaces, links, mounts map[string]bool
	mountPoints               map[string]bool // of /etc/kubernetes, /var/lib/etcd, /var/lib/kubelet: present
}

func snapshot(t *testing.T) machine {
	t.Helper()
	m := machine{links: map[string]bool{}, mounts: map[string]bool{}, mountPoints: map[string]bool{}}
	m.namespaces = labcmdtest.Netns(t)
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			m.links[strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":")] = true
		}
	}
	// Every mount namespace's mount table.
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "mountinfo"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 {
				m.mounts[f[3]+" "+f[4]] = true
			}
		}
	}
	for _, d := range []string{"/etc/kubernetes", "/var/lib/etcd", "/var/lib/kubelet"} {
		if _, err := os.Stat(d); err == nil {
			m.mountPoints[d] = true
		}
	}
	return m
}

// leftBehind compares the machine with before, for a lab whose files
// were under state and whose names hold prefix (hm-ml<T>).
func leftBehind(t *testing.T, before machine, state, prefix string) {
	t.Helper()
	now := snapshot(t)
	for ns := range now.namespaces {
		if !before.namespaces[ns] && strings.HasPrefix(ns, prefix+"-") {
			t.Errorf("namespace %s left", ns)
		}
	}
	if now.links[prefix] {
		t.Errorf("interface %s left", prefix)
	}
	for mnt := range now.mounts {
		if strings.Contains(mnt, state) {
			t.Errorf("mount left: %s", mnt)
		}
	}
	// A mount point the lab made and left empty (one that something else,
	// kubeadm run on this machine, filled meanwhile is theirs).
	for d := range now.mountPoints {
		ents, err := os.ReadDir(d)
		if !before.mountPoints[d] && err == nil && len(ents) == 0 && !strings.Contains(strings.Join(keys(now.namespaces), " "), "hm-ml") {
			t.Errorf("mount point %s left", d)
		}
	}
	if ps := labcmdtest.ProcessesMentioning(state); len(ps) > 0 {
		t.Errorf("processes left:\n%s", strings.Join(ps, "\n"))
	}
	if _, err := os.Stat(state); err == nil {
		ents, _ := os.ReadDir(state)
		for _, e := range ents {
			t.Errorf("file left in --state: %s", e.Name())
		}
		t.Errorf("--state %s left (metallab created it)", state)
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	env, err := labcmdtest.ReadEnv(path)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// lab is bin/metallab as an operator runs it.
type lab struct{ *labcmdtest.Process }

// start runs bin/metallab.
func start(t *testing.T, bin string, args ...string) lab {
	t.Helper()
	return lab{labcmdtest.Start(t, bin, args...)}
}

// waitFile waits up to a minute for metallab to write path.
func (l lab) waitFile(t *testing.T, path string) {
	t.Helper()
	l.Await(context.Background(), t, path, time.Minute, func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}

// TestMetallabProcess runs bin/metallab as an operator would: it waits for
// hamaster.env, logs in to every host of the inventory with the key and
// known_hosts it names (hamaster's SSH client, and OpenSSH's with strict
// host key checking), then stops it with SIGTERM and checks nothing is
// left: namespace, interface, mount, mount point, process or file.
func TestMetallabProcess(t *testing.T) {
	metallabtest.Need(t)
	bin := build(t)
	state := filepath.Join(t.TempDir(), "state")
	before := snapshot(t)
	launched := time.Now()
	l := start(t, bin, "--hosts", "2", "--state", state, "--log-level", "warn")
	envFile := filepath.Join(state, "hamaster.env")
	l.waitFile(t, envFile)
	t.Logf("hamaster.env after %v", time.Since(launched).Round(time.Millisecond))

	env := readEnv(t, envFile)
	if env["HAMASTER_PROVIDER"] != "metal" || env["HAMASTER_METAL_INVENTORY"] != filepath.Join(state, "inventory.yaml") {
		t.Errorf("hamaster.env: %v", env)
	}
	inv, err := metal.Load(env["HAMASTER_METAL_INVENTORY"])
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Hosts) != 2 || inv.VIP != env["HAMASTER_METAL_VIP"] {
		t.Fatalf("inventory %+v, VIP in env %s", inv, env["HAMASTER_METAL_VIP"])
	}
	third := strings.Split(inv.VIP, ".")[2]
	prefix := "hm-ml" + third
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, h := range inv.Hosts {
		c, err := remote.Dial(ctx, remote.Config{Addr: h.SSHAddr(), User: h.SSH.User, KeyFile: env["HAMASTER_SSH_KEY"], KnownHostsFile: env["HAMASTER_SSH_KNOWN_HOSTS"]})
		if err != nil {
			t.Fatalf("ssh %s: %v", h.Name, err)
		}
		out, _, err := c.Run(ctx, "hostname")
		c.Close()
		if err != nil || strings.TrimSpace(string(out)) != h.Name {
			t.Errorf("hostname on %s: %q, %v", h.Name, out, err)
		}
		// OpenSSH's client, strict: the known_hosts file as written.
		cmd := exec.CommandContext(ctx, "ssh", "-F", "/dev/null", "-i", env["HAMASTER_SSH_KEY"], "-o", "UserKnownHostsFile="+env["HAMASTER_SSH_KNOWN_HOSTS"],
			"-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "GlobalKnownHostsFile=/dev/null", "-p", "22",
			h.SSH.User+"@"+h.Address, "cat /etc/hostname /proc/sys/kernel/hostname")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), h.Name) {
			t.Errorf("ssh %s: %v\n%s", h.Name, err, out)
		}
	}
	// The VIP is free until keepalived takes it.
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(inv.VIP, "22"), 500*time.Millisecond); err == nil {
		c.Close()
		t.Errorf("something answers on the VIP %s", inv.VIP)
	}
	during := snapshot(t)
	for _, ns := range []string{prefix + "-sw", prefix + "-1", prefix + "-2"} {
		if !during.namespaces[ns] {
			t.Errorf("namespace %s missing while the lab runs", ns)
		}
	}

	stopped := time.Now()
	if err := l.Stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("metallab exit: %v\n%s", err, l.Output())
	}
	t.Logf("stopped in %v", time.Since(stopped).Round(time.Millisecond))
	leftBehind(t, before, state, prefix)
	if t.Failed() {
		t.Logf("metallab output:\n%s", l.Output())
	}
}

// TestMetallabKilledCleanup kills bin/metallab with SIGKILL (no teardown:
// its namespaces stay); the next metallab on the same --state sweeps them
// before it starts, and metallab --cleanup DIR removes what a second
// killed one left.
func TestMetallabKilledCleanup(t *testing.T) {
	metallabtest.Need(t)
	bin := build(t)
	state := filepath.Join(t.TempDir(), "state")
	before := snapshot(t)
	t.Cleanup(func() { // whatever happens, the labs go
		_ = exec.Command(bin, "--cleanup", state).Run()
	})
	killed := func() string {
		t.Helper()
		l := start(t, bin, "--hosts", "1", "--state", state, "--log-level", "warn")
		l.waitFile(t, filepath.Join(state, "hamaster.env"))
		inv, err := metal.Load(filepath.Join(state, "inventory.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		prefix := "hm-ml" + strings.Split(inv.VIP, ".")[2]
		_ = l.Stop(t, syscall.SIGKILL)
		if !snapshot(t).namespaces[prefix+"-1"] {
			t.Fatalf("namespace %s gone after SIGKILL: the test proves nothing", prefix+"-1")
		}
		return prefix
	}
	first := killed()
	second := killed() // swept the first's leftovers before it started
	if first != second && snapshot(t).namespaces[first+"-1"] {
		t.Errorf("the second lab on %s did not sweep the first's namespace %s-1", state, first)
	}
	out, err := exec.Command(bin, "--cleanup", state, "--log-level", "warn").CombinedOutput()
	if err != nil {
		t.Fatalf("metallab --cleanup: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "nothing of a lab left") {
		t.Errorf("metallab --cleanup said:\n%s", out)
	}
	leftBehind(t, before, state, first)
	leftBehind(t, before, state, second)
	// Again: nothing to do is success.
	if out, err := exec.Command(bin, "--cleanup", state).CombinedOutput(); err != nil {
		t.Errorf("second --cleanup: %v\n%s", err, out)
	}
}

// TestMetallabKubeadmMaster runs bin/metallab --kubeadm-master as an
// operator would (hamaster-kubelet next to it, as make build puts them):
// hamaster.env gains KUBECONFIG once the real kubeadm init of host-1 is
// done, with which kubectl reaches the master; SIGTERM leaves nothing.
func TestMetallabKubeadmMaster(t *testing.T) {
	const version = "v1.33.13"
	metallabtest.Need(t)
	kubeletProgram, binDir := metallabtest.Kubeadm(t, version)
	bin := filepath.Join(filepath.Dir(kubeletProgram), "metallab")
	labcmdtest.BuildInto(t, filepath.Dir(bin), "cmd/metallab")
	state := filepath.Join(t.TempDir(), "state")
	before := snapshot(t)
	launched := time.Now()
	l := start(t, bin, "--hosts", "1", "--state", state, "--log-level", "warn", "--kubeadm-master", version, "--bin-dir", binDir)
	envFile := filepath.Join(state, "hamaster.env")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l.Await(ctx, t, "KUBECONFIG in hamaster.env", 3*time.Minute, func() bool {
		b, _ := os.ReadFile(envFile)
		return strings.Contains(string(b), "export KUBECONFIG=")
	})
	t.Logf("kubeadm master up %v after launch", time.Since(launched).Round(time.Millisecond))
	env := readEnv(t, envFile)
	if env["KUBECONFIG"] != filepath.Join(state, "admin.conf") {
		t.Errorf("KUBECONFIG=%q", env["KUBECONFIG"])
	}
	kubectl := filepath.Join(binDir, version, "kubectl")
	if out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", env["KUBECONFIG"], "get", "--raw", "/readyz").CombinedOutput(); err != nil || string(out) != "ok" {
		t.Errorf("kubectl get --raw /readyz: %v: %s", err, out)
	}
	if out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", env["KUBECONFIG"], "get", "node", "host-1", "-o", "jsonpath={.status.nodeInfo.kubeletVersion}").CombinedOutput(); err != nil || string(out) != version {
		t.Errorf("kubectl get node host-1: %v: %s", err, out)
	}
	if !strings.Contains(l.Output(), "kubeadm init of host-1 done") {
		t.Errorf("metallab did not say init is done:\n%s", l.Output())
	}
	stopped := time.Now()
	if err := l.Stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("metallab exit: %v\n%s", err, l.Output())
	}
	t.Logf("stopped in %v", time.Since(stopped).Round(time.Millisecond))
	third := strings.Split(env["HAMASTER_METAL_VIP"], ".")[2]
	leftBehind(t, before, state, "hm-ml"+third)
	if t.Failed() {
		t.Logf("metallab output:\n%s", l.Output())
	}
}
