package workflows_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers/local"
	"github.com/hamaster/hamaster/workflows"
)

// TestOrphanLearnerRemovedByMemberID: a learner whose add-replica lost its
// journal blocks every add; status names it with the command that removes
// it, and that command (remove-replica --member-id) does.
func TestOrphanLearnerRemovedByMemberID(t *testing.T) {
	t.Parallel()
	e, ctx := startEnv(t, "orphan", 2*time.Minute)
	master := local.MasterName("orphan")
	cli := e.etcd(ctx)
	addr := fmt.Sprintf("127.0.%d.250", e.c.Provider.Info().Subnet)
	m, err := cli.AddLearner(ctx, "", "https://"+addr+":2380")
	cli.Close()
	if err != nil {
		t.Fatal(err)
	}
	d := e.deps(nil)
	rep, err := workflows.Status(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Healthy() || len(rep.Orphans) != 1 || rep.Orphans[0].ID != m.IDHex() || !strings.Contains(rep.Orphans[0].Command, "--member-id "+m.IDHex()) {
		t.Fatalf("status: healthy %v orphans %+v; want the learner %s named with its command", rep.Healthy(), rep.Orphans, m.IDHex())
	}
	if err := e.add(ctx, "orphan-master-new", nil); !errors.Is(err, errkind.FailedPrecondition) {
		t.Fatalf("add with an orphan learner: %v; want refused", err)
	}
	// A member a replica owns is refused, naming the replica.
	cli, err = e.c.Provider.Etcd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := cli.Members(ctx)
	cli.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ms {
		if x.Name == master {
			err := workflows.Execute(ctx, d, workflows.RemoveMember(d, x.ID, false), workflows.Options{})
			if !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), "--name "+master) {
				t.Fatalf("remove owned member: %v; want refusal naming %s", err, master)
			}
		}
	}
	if err := workflows.Execute(ctx, d, workflows.RemoveMember(d, m.ID, false), workflows.Options{}); err != nil {
		t.Fatalf("remove orphan: %v", err)
	}
	if err := e.add(ctx, "orphan-master-new", nil); err != nil {
		t.Fatalf("add after removing the orphan: %v", err)
	}
	e.assertConverged(ctx, master, "orphan-master-new")
}
