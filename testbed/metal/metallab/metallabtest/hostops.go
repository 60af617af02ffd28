package metallabtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

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

// StartDaemon runs a static pod's command as a host process, as the
// lab's kubelet does: detached, its output in log.
func StartDaemon(ctx context.Context, t testing.TB, c *remote.Client, log string, cmd []string) {
	t.Helper()
	Run(ctx, t, c, "setsid -f "+strings.Join(cmd, " ")+" </dev/null >"+log+" 2>&1")
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
