package workflows

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/providers"
)

// inPlaceUpgrader is the cluster's flavor's in-place upgrade, when it
// has one (flavors.Upgrader: kubeadm), given --extra-args when set and
// the flavor takes them (flavors.FlagUpgrader).
func inPlaceUpgrader(d *Deps, p UpgradeParams) (flavors.Upgrader, bool) {
	c := d.FlavorCaps()
	up := c.Upgrader
	if up == nil {
		return nil, false
	}
	if fu := c.FlagUpgrader; fu != nil && p.ExtraArgsSet {
		return fu.WithAPIServerArgs(p.ExtraArgs), true
	}
	return up, true
}

// inPlaceSlot returns the replica slot k upgrades in place, choosing and
// recording it (with the version it runs) the first time: one whose
// apiserver does not report p.Version, not chosen by an earlier slot,
// the etcd leader last.
func inPlaceSlot(ctx context.Context, d *Deps, p UpgradeParams, r *Run, k int) (string, error) {
	if name := slotName(r, k); name != "" {
		return name, nil
	}
	taken := map[string]bool{}
	for i := 1; i < k; i++ {
		taken[slotKey(i).Get(r)] = true
	}
	rs, err := d.Provider.Instances().List(ctx)
	if err != nil {
		return "", err
	}
	from := map[string]string{}
	var todo []providers.Replica
	for _, rep := range rs {
		if taken[rep.Name] {
			continue
		}
		v, err := d.ReplicaVersion(ctx, rep)
		if err != nil {
			return "", fmt.Errorf("the version of %s: %w", rep.Name, err)
		}
		if v != p.Version {
			todo = append(todo, rep)
			from[rep.Name] = v
		}
	}
	if len(todo) == 0 {
		return "", nil
	}
	pick := todo[0]
	if len(todo) > 1 {
		cli, ms, err := d.etcdMembers(ctx, providers.EtcdMain, nil, nil)
		if err != nil {
			return "", err
		}
		cli.Close()
		for _, rep := range todo {
			if m, ok := d.findMember(ms, providers.EtcdMain, rep.Name, rep.Address); !ok || !m.Leader {
				pick = rep
				break
			}
		}
	}
	if err := fromKey(pick.Name).Set(r, from[pick.Name]); err != nil {
		return "", err
	}
	return pick.Name, slotKey(k).Set(r, pick.Name)
}

// inPlaceSteps upgrade one master in place with the flavor's own tool
// (kubeadm upgrade apply on the first, kubeadm upgrade node on the
// others): drained from the LB, upgraded (the flavor saves what it
// restores and fails fast), health-gated, back in the LB. On the first
// failure the flavor restores that master (and, the first master's, the
// cluster-wide configuration), it is put back at its old version and
// the run stops; the masters upgraded before it stay upgraded.
func inPlaceSteps(d *Deps, p UpgradeParams, up flavors.Upgrader, k int) []Step {
	inst := d.Provider.Instances()
	first := k == 1
	name := func(r *Run) string { return slotName(r, k) }
	prefix := fmt.Sprintf("replica-%d/", k)
	tool := "the flavor's node upgrade (kubeadm upgrade node)"
	if first {
		tool = "the flavor's first-master upgrade (kubeadm upgrade apply: the cluster-wide configuration too)"
	}
	return []Step{
		{
			Name: prefix + "drain", Plan: []string{"pick the next master not at " + p.Version + " (the etcd leader last)", "unless --skip-drain: kubectl drain of its Node (PodDisruptionBudgets honoured; uncordoned once it is back in the LB, or rolled back)", fmt.Sprintf("loadBalancer.DrainTarget; inside the drain grace (%s) move etcd leadership off it; wait the rest of the grace", p.DrainGrace)},
			Run: func(ctx context.Context, r *Run) error {
				n, err := inPlaceSlot(ctx, d, p, r, k)
				if err != nil || n == "" {
					return err
				}
				r.Info("upgrading %s in place from %s to %s", n, fromKey(n).Get(r), p.Version)
				if err := drainNode(ctx, d, r, n, p.Drain.Timeout); err != nil {
					return err
				}
				_, err = drainMovingLeader(ctx, d, r, n, p.DrainGrace, nil)
				return err
			},
		},
		{
			Name: prefix + "upgrade-in-place", Plan: []string{tool + " to " + p.Version + ": backup first, stopped at once when the new apiserver exits, or when it does not serve within " + p.HealthTimeout.String(), "on failure: the flavor's rollback, the master back in the LB at its old version, and stop"},
			Run: func(ctx context.Context, r *Run) error {
				n := name(r)
				rep, ok, err := getSlotReplica(ctx, inst, n)
				if !ok {
					return err
				}
				r.Waiting("upgrading %s to %s in place", n, p.Version)
				uerr := up.UpgradeMaster(ctx, rep, p.Version, first, p.HealthTimeout)
				if uerr == nil || ctx.Err() != nil {
					return uerr // done, or interrupted: a re-run resumes (the flavor keeps its backup)
				}
				return rollbackInPlace(ctx, d, r, up, rep, first, p, uerr)
			},
		},
		healthGateStep(d, p, k, "the flavor's rollback", func(ctx context.Context, r *Run, rep providers.Replica, cause error) error {
			return rollbackInPlace(ctx, d, r, up, rep, first, p, cause)
		}),
		backInLBStep(d, p, k),
	}
}

// rollbackInPlace has the flavor restore rep (first: the cluster-wide
// configuration too), waits until it is healthy at the version it ran
// before and back in the LB, and concludes the run with an error naming
// what failed.
func rollbackInPlace(ctx context.Context, d *Deps, r *Run, up flavors.Upgrader, rep providers.Replica, first bool, p UpgradeParams, cause error) error {
	from := fromKey(rep.Name).Get(r)
	r.Info("%s failed its upgrade to %s: %v — rolling it back to %s", rep.Name, p.Version, cause, versionText(from))
	if err := up.RollbackMaster(ctx, rep, first); err != nil {
		return fmt.Errorf("replica %s failed its upgrade to %s (%v); rolling it back failed too: %w", rep.Name, p.Version, cause, err)
	}
	if err := healthGate(ctx, d, r, rep, from, RestoreHealthTimeout(p.HealthTimeout)); err != nil {
		return fmt.Errorf("replica %s failed its upgrade to %s (%v) and is not healthy at %s after its rollback: %w", rep.Name, p.Version, cause, versionText(from), err)
	}
	if err := undrain(ctx, d, r, rep.Name, p.HealthTimeout); err != nil {
		return err
	}
	var done []string
	for _, k := range slices.Sorted(maps.Keys(slots(r))) {
		if n := slotKey(k).Get(r); n != rep.Name && slotDoneKey(k).IsSet(r) {
			done = append(done, n)
		}
	}
	kept := "no other master was touched"
	if len(done) > 0 {
		kept = fmt.Sprintf("%s stay at %s (their backups kept: a rollback of the flavor restores them)", strings.Join(done, ", "), p.Version)
	}
	return fmt.Errorf("%w: replica %s failed at %s (%v); rolled back in place to %s: it is serving again; %s",
		ErrConcluded, rep.Name, p.Version, cause, versionText(from), kept)
}

// finishInPlaceStep drops what the flavor saved on every master, once
// every master is upgraded.
func finishInPlaceStep(d *Deps, up flavors.Upgrader) Step {
	return Step{
		Name: "finish-upgrade", Plan: []string{"the flavor drops the backups it saved on every master"},
		Run: func(ctx context.Context, r *Run) error {
			rs, err := d.Provider.Instances().List(ctx)
			if err != nil {
				return err
			}
			for _, rep := range rs {
				if err := up.FinishUpgrade(ctx, rep); err != nil {
					return err
				}
			}
			return nil
		},
	}
}
