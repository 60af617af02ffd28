//go:build metallab

// The lab's own tests (make test-metal): real hosts, real sshd, as root.

package metallab_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/providers/metal"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

// run runs cmd on c and returns its stdout, failing the test on error.
func run(ctx context.Context, t *testing.T, c *remote.Client, cmd string) string {
	t.Helper()
	out, errOut, err := c.Run(ctx, cmd)
	if err != nil {
		t.Fatalf("%s: %s: %v\n%s", c.Addr(), cmd, err, errOut)
	}
	return strings.TrimSpace(string(out))
}

func dial(ctx context.Context, t *testing.T, lab *metallab.Lab, h *metallab.Host) *remote.Client {
	t.Helper()
	c, err := lab.Dial(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Each host is a machine of its own as SSH shows it: its hostname, its
// address, its own /etc/kubernetes, /var/lib/etcd, /var/lib/kubelet and
// /run, which neither the other hosts nor this machine see; and the files
// hamaster reads describe it.
func TestHostsAreIsolated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mountsBefore := mountPoints(t)
	// A mount point the machine lacks is the lab's to remove (when no
	// other lab uses it: none of this package's tests run in parallel).
	var absent []string
	for _, d := range []string{"/etc/kubernetes", "/var/lib/etcd", "/var/lib/kubelet"} {
		if _, err := os.Stat(d); err != nil {
			absent = append(absent, d)
		}
	}
	t.Cleanup(func() { // after the lab's removal
		for _, d := range absent {
			// Left empty: one that something else (kubeadm run on this
			// machine) filled meanwhile is theirs.
			if ents, err := os.ReadDir(d); err == nil && len(ents) == 0 && !otherLabRuns() {
				t.Errorf("mount point %s, made by the lab, left", d)
			}
		}
	})
	start := time.Now()
	lab := metallabtest.Start(ctx, t, 2)
	t.Logf("lab of 2 hosts up in %v: %v, VIP %v", time.Since(start).Round(time.Millisecond), lab.Subnet, lab.VIP)
	a, b := lab.Hosts[0], lab.Hosts[1]
	ca, cb := dial(ctx, t, lab, a), dial(ctx, t, lab, b)

	for _, tc := range []struct {
		c *remote.Client
		h *metallab.Host
	}{{ca, a}, {cb, b}} {
		if got := run(ctx, t, tc.c, "hostname"); got != tc.h.Name {
			t.Errorf("hostname on %s = %q", tc.h.Name, got)
		}
		if got := run(ctx, t, tc.c, "ip -4 -o addr show dev eth0"); !strings.Contains(got, tc.h.Addr.String()+"/24") {
			t.Errorf("%s's eth0: %s", tc.h.Name, got)
		}
		if got := run(ctx, t, tc.c, "getent hosts "+b.Name); !strings.HasPrefix(got, b.Addr.String()) {
			t.Errorf("%s resolves %s as %q", tc.h.Name, b.Name, got)
		}
	}

	// Host A writes; host B and the machine see nothing.
	for _, d := range []string{"/etc/kubernetes", "/var/lib/etcd", "/var/lib/kubelet", "/run"} {
		p := d + "/metallab-isolation"
		run(ctx, t, ca, "echo from-a > "+p)
		if got := run(ctx, t, ca, "cat "+p); got != "from-a" {
			t.Errorf("host A reads %s = %q", p, got)
		}
		if got := run(ctx, t, cb, "cat "+p+" 2>/dev/null || echo absent"); got != "absent" {
			t.Errorf("host B sees host A's %s: %q", p, got)
		}
		if _, err := os.Stat(p); err == nil {
			t.Errorf("the machine sees host A's %s", p)
		}
		src := filepath.Join(a.Dir, strings.ReplaceAll(strings.TrimPrefix(d, "/"), "/", "-"), "metallab-isolation")
		if got := strings.TrimSpace(readFile(t, src)); got != "from-a" {
			t.Errorf("%s = %q", src, got)
		}
	}
	if got := mountPoints(t); got != mountsBefore {
		t.Errorf("the machine's mount table changed:\nbefore:\n%s\nafter:\n%s", mountsBefore, got)
	}

	// The files hamaster is pointed at.
	inv, err := metal.Load(lab.InventoryFile)
	if err != nil {
		t.Fatal(err)
	}
	if inv.VIP != lab.VIP.String() || len(inv.Hosts) != 2 || inv.Hosts[1].Address != b.Addr.String() || inv.Hosts[1].Name != b.Name {
		t.Errorf("inventory: %+v", inv)
	}
	env := readFile(t, lab.EnvFile)
	for _, want := range []string{"export HAMASTER_PROVIDER=metal\n", "export HAMASTER_METAL_INVENTORY=" + lab.InventoryFile + "\n",
		"export HAMASTER_METAL_VIP=" + lab.VIP.String() + "\n", "export HAMASTER_SSH_KEY=" + lab.ClientKeyFile + "\n",
		"export HAMASTER_SSH_KNOWN_HOSTS=" + lab.KnownHostsFile + "\n", "export HAMASTER_STATE_DIR=" + filepath.Join(lab.Dir, "hamaster-state") + "\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("hamaster.env lacks %q:\n%s", want, env)
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mountPoints lists this machine's mount points, less the network
// namespaces' (/run/netns/*: every lab's and test bed's, made and removed
// meanwhile).
func mountPoints(t *testing.T) string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(readFile(t, "/proc/self/mountinfo"), "\n") {
		if f := strings.Fields(l); len(f) > 4 && !strings.HasPrefix(f[4], "/run/netns/") {
			out = append(out, f[4])
		}
	}
	return strings.Join(out, "\n")
}

// otherLabRuns reports whether a lab of another process (bin/metallab's
// test runs at the same time) may use the mount points.
func otherLabRuns() bool {
	out, _ := exec.Command("ip", "netns", "list").Output()
	return strings.Contains(string(out), "hm-ml")
}
