package flavortest

import (
	"context"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/providers"
)

// Members lists the members of f's main etcd cluster; a failure fails
// t.
func Members(ctx context.Context, t testing.TB, f flavors.Flavor) []etcdmember.Member {
	t.Helper()
	cli, err := f.EtcdCluster(ctx, flavors.EtcdMain)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ms, err := cli.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// RunOn runs cmd on machine through p's way in and returns its stdout,
// trimmed; a failure fails t with the command's stderr.
func RunOn(ctx context.Context, t testing.TB, p providers.MachineRunner, machine, cmd string) string {
	t.Helper()
	out, stderr, err := p.RunOnMachine(ctx, machine, cmd)
	if err != nil {
		t.Fatalf("%s: %s: %v\n%s", machine, cmd, err, stderr)
	}
	return strings.TrimSpace(string(out))
}
