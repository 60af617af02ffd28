package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/testbed/local/localtest"
)

// cliEnv runs the built hamaster binary against one local cluster.
type cliEnv struct {
	t   *testing.T
	bin string
	env []string
	// subnet is the cluster's 127.0.N.0/24, claimed before the teardown is
	// registered so that it is released only after it.
	subnet int
}

func newCLIEnv(t *testing.T, cluster string) *cliEnv {
	dir := t.TempDir()
	subnet := localtest.AllocSubnet(t)
	c := &cliEnv{t: t, subnet: subnet, bin: localtest.HamasterBinary(t), env: append(os.Environ(),
		"HAMASTER_STATE_DIR="+dir, "HAMASTER_CLUSTER="+cluster, "HAMASTER_NODE_BINARY="+localtest.NodeBinary(t))}
	t.Cleanup(func() { c.run(nil, "local", "down", "--yes") })
	return c
}

// run executes hamaster; extra env first so it can override.
func (c *cliEnv) run(extra []string, args ...string) (int, string, string) {
	cmd := exec.Command(c.bin, args...)
	cmd.Env = append(append([]string{}, c.env...), extra...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode() // -1 when killed by a signal
	} else if err != nil {
		c.t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

func (c *cliEnv) status() map[string]any {
	code, out, errs := c.run(nil, "--output", "json", "status")
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		c.t.Fatalf("status (exit %d) is not JSON: %v\n%s\n%s", code, err, out, errs)
	}
	return st
}

func TestCLIEndToEndWithRealCrash(t *testing.T) {
	t.Parallel()
	c := newCLIEnv(t, "cli")
	subnet := strconv.Itoa(c.subnet)
	if code, out, errs := c.run(nil, "local", "up", "--subnet", subnet, "--etcd-heartbeat-ms", "50", "--etcd-election-ms", "500"); code != 0 {
		t.Fatalf("local up: exit %d\n%s\n%s", code, out, errs)
	}
	// No terminal, no --yes: plan printed, exit 2, nothing changed.
	code, out, errs := c.run(nil, "add-replica", "--name", "cli-master-001")
	if code != 2 || !strings.Contains(out, "add-etcd-learner") || !strings.Contains(errs, "--yes") {
		t.Fatalf("add-replica without --yes: exit %d\n%s\n%s", code, out, errs)
	}
	// --dry-run prints the plan and changes nothing.
	code, out, _ = c.run(nil, "--dry-run", "add-replica", "--name", "cli-master-001")
	if code != 0 || !strings.Contains(out, "Dry run") {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
	if st := c.status(); len(st["replicas"].([]any)) != 1 {
		t.Fatalf("dry run changed the cluster: %v", st["replicas"])
	}
	// Killed (SIGKILL) right after the VM is created; the re-run (without
	// --name) proves the holder gone (this machine's boot and PID
	// namespace, its PID free: procid.Gone), takes the lock at once and
	// finishes.
	code, out, errs = c.run([]string{"HAMASTER_FAULT_CRASH_AFTER_STEP=create-vm"}, "add-replica", "--name", "cli-master-001", "--yes")
	if code != -1 {
		t.Fatalf("crash hook: exit %d, want killed\n%s\n%s", code, out, errs)
	}
	code, out, errs = c.run(nil, "--output", "json", "add-replica", "--yes")
	if code != 0 {
		t.Fatalf("resumed add-replica: exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out, `"state":"skipped"`) || !strings.Contains(out, `"step":"promote-member","index":8,"total":12,"state":"done"`) {
		t.Fatalf("resume did not skip done steps / JSON events:\n%s", out)
	}
	st := c.status()
	if st["endpoint_kind"] != "lb" || len(st["replicas"].([]any)) != 2 || len(st["members"].([]any)) != 2 {
		t.Fatalf("after add: %v", st)
	}
	targets := st["lb"].(map[string]any)["targets"].([]any)
	if len(targets) != 2 {
		t.Fatalf("LB targets %v", targets)
	}
	// Removing the master: leadership moves if needed; LB demoted.
	code, out, errs = c.run(nil, "remove-replica", "--name", "cli-master", "--drain-grace", "0s", "--yes")
	if code != 0 {
		t.Fatalf("remove-replica: exit %d\n%s\n%s", code, out, errs)
	}
	st = c.status()
	if st["endpoint_kind"] != "ip" || len(st["replicas"].([]any)) != 1 || st["replicas"].([]any)[0].(map[string]any)["name"] != "cli-master-001" {
		t.Fatalf("after remove: %v", st)
	}
	// The last replica is refused with exit 3.
	code, _, errs = c.run(nil, "remove-replica", "--name", "cli-master-001", "--yes")
	if code != 3 || !strings.Contains(errs, "last replica") {
		t.Fatalf("removing the last replica: exit %d %s", code, errs)
	}
	if code, out, errs := c.run(nil, "local", "down", "--yes"); code != 0 {
		t.Fatalf("local down: %d %s %s", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(strings.TrimPrefix(c.env[len(c.env)-3], "HAMASTER_STATE_DIR="), "cli")); !os.IsNotExist(err) {
		t.Fatalf("state left after down: %v", err)
	}
}
