package metallabtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
)

// Run runs cmd on a lab host over SSH and returns its output; a failure
// fails the test.
func Run(ctx context.Context, t testing.TB, c *remote.Client, cmd string) string {
	t.Helper()
	out, stderr, err := c.Run(ctx, cmd)
	if err != nil {
		t.Fatalf("%s: %s: %v (%s)", c.Addr(), cmd, err, stderr)
	}
	return string(out)
}

// StartDaemon runs cmd on a lab host as a process of its own, detached,
// its output in log (the kubeadm doc's keepalived, started by hand).
func StartDaemon(ctx context.Context, t testing.TB, c *remote.Client, log string, cmd []string) {
	t.Helper()
	Run(ctx, t, c, "setsid -f "+strings.Join(cmd, " ")+" </dev/null >"+log+" 2>&1")
}

// StopUnits stops every unit running on lab host h as its death would
// (or a reboot, before the host starts its enabled units again): the
// units' supervisors SIGTERMed, which stop their daemons, and waited for
// until no supervisor, keepalived or haproxy is left in h's network
// namespace. Found from this machine, so also on a host cut off from
// SSH.
func StopUnits(ctx context.Context, t testing.TB, h *metallab.Host) {
	t.Helper()
	if err := wait.Until(ctx, 50*time.Millisecond, "the units of "+h.Name+" to stop", func() (bool, error) {
		left := 0
		for _, comm := range []string{metallab.UnitSupervisor, "keepalived", "haproxy"} {
			ps, err := NSProcs(ctx, h, comm)
			if err != nil {
				return false, err
			}
			if comm == metallab.UnitSupervisor {
				for _, p := range ps {
					_ = syscall.Kill(p, syscall.SIGTERM)
				}
			}
			left += len(ps)
		}
		return left == 0, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// NSProcs lists the processes called comm in h's network namespace (the
// hosts share the machine's pids): found from this machine, so also on a
// host cut off from SSH.
func NSProcs(ctx context.Context, h *metallab.Host, comm string) ([]int, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "pids", h.NS).Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns pids %s: %w", h.NS, err)
	}
	var ps []int
	for _, f := range strings.Fields(string(out)) {
		b, _ := os.ReadFile("/proc/" + f + "/comm")
		if p, err := strconv.Atoi(f); err == nil && strings.TrimSpace(string(b)) == comm {
			ps = append(ps, p)
		}
	}
	return ps, nil
}

// SetLink sets the link of the lab's host i on its switch "up" or
// "down" (a host cut off, or back).
func SetLink(ctx context.Context, t testing.TB, lab *metallab.Lab, i int, state string) {
	t.Helper()
	if out, err := exec.CommandContext(ctx, "ip", "-n", lab.Switch(), "link", "set", fmt.Sprintf("h%d", i+1), state).CombinedOutput(); err != nil {
		t.Fatalf("link h%d %s: %v: %s", i+1, state, err, out)
	}
}
