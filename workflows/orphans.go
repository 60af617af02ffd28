package workflows

import (
	"context"
	"fmt"
	"strconv"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/providers"
)

// Orphan is an etcd member that no replica owns: a learner whose
// add-replica lost its journal, a voter whose VM was deleted by hand.
type Orphan struct {
	ID       string   `json:"id"`
	Name     string   `json:"name,omitempty"`
	Learner  bool     `json:"learner"`
	PeerURLs []string `json:"peer_urls"`
	// Command is the exact command that removes it.
	Command string `json:"command"`
}

// owner returns the replica that owns main-cluster member m (its member
// name, or a peer URL on its address, by the provider's conventions), or
// "".
func owner(ms flavors.Flavor, m etcdmember.Member, addrs map[string]string) string {
	for name, a := range addrs {
		member, peer := ms.EtcdMember(providers.EtcdMain, name, a)
		if _, ok := providers.FindMember([]etcdmember.Member{m}, member, peer); ok {
			return name
		}
	}
	return ""
}

// findOrphans lists the main cluster's members no replica owns. A learner
// an unfinished add-replica is adding (its address in the journal) is not
// an orphan: re-running that add finishes it.
func findOrphans(cluster string, ms flavors.Flavor, members []etcdmember.Member, addrs map[string]string, j *Journal) []Orphan {
	var out []Orphan
	for _, m := range members {
		if owner(ms, m, addrs) != "" {
			continue
		}
		if j != nil && !j.Finished && j.Workflow == "add-replica" && keyAddress.In(j) != "" {
			if owner(ms, m, map[string]string{j.Params["name"]: keyAddress.In(j)}) != "" {
				continue
			}
		}
		out = append(out, Orphan{ID: m.IDHex(), Name: m.Name, Learner: m.Learner, PeerURLs: m.PeerURLs,
			Command: fmt.Sprintf("hamaster --cluster %s remove-replica --member-id %s --yes", cluster, m.IDHex())})
	}
	return out
}

// ParseMemberID parses an etcd member id in hex (as etcdctl and status
// print it).
func ParseMemberID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 16, 64)
	if err != nil || id == 0 {
		return 0, errkind.Errorf(errkind.InvalidArgument, "--member-id: %q is not an etcd member id (hex, as 'hamaster status' prints it)", s)
	}
	return id, nil
}

// RemoveMember builds the workflow behind remove-replica --member-id: it
// removes an etcd member (learner or voter) that no replica owns, with the
// same quorum guard as remove-replica (--force overrides and names the
// risk). A member a replica owns is refused, naming the replica.
func RemoveMember(d *Deps, id uint64, force bool) *Workflow {
	idHex := fmt.Sprintf("%x", id)
	wf := &Workflow{Name: "remove-member", Params: map[string]string{"member-id": idHex}}
	if force {
		wf.Params["force"] = "true"
	}
	wf.Steps = []Step{
		{
			Name: StepPreflight, Always: true,
			Plan: []string{"etcd MemberList: the member exists and no replica owns it", "quorum survives its removal (learners always may go)"},
			Run: func(ctx context.Context, r *Run) error {
				rs, err := d.Provider.Instances().List(ctx)
				if err != nil {
					return err
				}
				cli, ms, err := d.etcdMembers(ctx, providers.EtcdMain, nil, nil)
				if err != nil {
					return errkind.Errorf(errkind.FailedPrecondition, "etcd unreachable: %w", err)
				}
				defer cli.Close()
				m, ok := findMember(ms, id)
				if !ok {
					if keyRemoving.Get(r) != "" {
						return nil // an interrupted run removed it already
					}
					ids := make([]string, 0, len(ms))
					for _, x := range ms {
						ids = append(ids, x.IDHex())
					}
					return errkind.Errorf(errkind.InvalidArgument, "--member-id: no etcd member %s in cluster %s (members: %v)", idHex, d.Cluster, ids)
				}
				addrs := map[string]string{}
				for _, rep := range rs {
					addrs[rep.Name] = rep.Address
				}
				if o := owner(d.Flavor(), m, addrs); o != "" {
					return errkind.Errorf(errkind.InvalidArgument, "--member-id: member %s belongs to replica %s; remove the replica with --name %s", idHex, o, o)
				}
				if err := etcdmember.CanRemove(ms, id); err != nil {
					if r.Param("force") != "true" {
						return fmt.Errorf("%w (pass --force to remove anyway, risking etcd quorum loss)", err)
					}
					r.Info("--force: removing member %s although %v — etcd may lose quorum", idHex, err)
				}
				return nil
			},
		},
		{
			Name: StepSnapshot, Plan: []string{"etcd Maintenance.Snapshot → <state-dir>/<cluster>/snapshots/"},
			Run: func(ctx context.Context, r *Run) error {
				return takeSnapshot(ctx, d, r, "remove-member-"+idHex)
			},
		},
		{
			Name: StepRemoveMember, Plan: []string{"etcd MemberRemove(" + idHex + ") through a healthy voter"},
			Run: func(ctx context.Context, r *Run) error {
				if err := keyRemoving.Set(r, idHex); err != nil {
					return err
				}
				cli, err := d.Etcd(ctx)
				if err != nil {
					return err
				}
				defer cli.Close()
				return cli.Remove(ctx, id)
			},
		},
	}
	return wf
}

func findMember(ms []etcdmember.Member, id uint64) (etcdmember.Member, bool) {
	for _, m := range ms {
		if m.ID == id {
			return m, true
		}
	}
	return etcdmember.Member{}, false
}
