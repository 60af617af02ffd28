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

// Voters checks that f's main etcd cluster has n members, none of them a
// learner still (what a join must leave: a wrong count fails t at once),
// and returns them.
func Voters(ctx context.Context, t testing.TB, f flavors.Flavor, n int) []etcdmember.Member {
	t.Helper()
	ms := Members(ctx, t, f)
	if len(ms) != n {
		t.Fatalf("%d members, want %d voters: %+v", len(ms), n, ms)
	}
	for _, m := range ms {
		if m.Learner {
			t.Errorf("member %s is still a learner", m.Name)
		}
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
