package workflows

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers"
)

// RecoverParams are recover's arguments: From names the surviving replica
// whose data (or, with Snapshot, whose place) the new one-member cluster
// gets.
type RecoverParams struct {
	From     string
	Snapshot string
	// Force recovers although etcd still answers with a quorum (that
	// throws away every other member's newer writes).
	Force bool
	// Timeout bounds the wait until the rebuilt replica serves.
	Timeout time.Duration
}

// Recover step names.
const (
	StepRebuildEtcd  = "rebuild-etcd"
	StepDeleteOthers = "delete-other-replicas"
	StepClearLock    = "clear-cluster-lock"
)

// Recover builds the disaster-recovery workflow for a cluster that lost
// etcd quorum: every replica is stopped, etcd is rebuilt as a one-member
// cluster on From — from its own data (etcd --force-new-cluster) or from
// a snapshot (etcd snapshot restore: hash verified, new cluster ID) —, the
// other replicas are deleted, the endpoint is given back to From, and the
// lock of the run that was cut off is cleared (its fencing check then
// fails). add-replica grows the cluster back afterwards.
func Recover(d *Deps, p RecoverParams) *Workflow {
	if p.Timeout <= 0 {
		p.Timeout = 2 * time.Minute
	}
	x := &recovery{d: d, p: p, inst: d.Provider.Instances()}
	// The master's format rebuilds etcd when it knows how (kubeadm's
	// static pods); otherwise the provider, on its own replicas' disks.
	x.fr = d.FlavorCaps().Recoverer
	wf := &Workflow{Name: "recover", Params: map[string]string{"from": p.From, "snapshot": p.Snapshot}, Check: x.check}
	wf.Steps = []Step{x.rebuildEtcd(), x.deleteOthers(), x.demote(), x.clearLock(), x.verify()}
	return wf
}

// recovery is one recover run's steps and what they share.
type recovery struct {
	d    *Deps
	p    RecoverParams
	inst providers.Instances
	fr   flavors.Recoverer // nil: the provider rebuilds etcd
}

// check refuses what recover cannot do, or must not: no way to rebuild
// etcd, a bad --from or --snapshot, and etcd with a quorum (recovery
// throws the other members away) unless --force.
func (x *recovery) check(ctx context.Context) error {
	d, p := x.d, x.p
	if d.ProviderCaps().Recoverer == nil && x.fr == nil {
		return errkind.Errorf(errkind.FailedPrecondition, "neither the %s flavor nor the %s provider can rebuild etcd on a master; follow the manual runbook in docs/recovery.md", d.Flavor().Name(), d.Provider.Name())
	}
	rep, err := x.inst.Get(ctx, p.From)
	if err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "--from: %w", err)
	}
	if x.fr != nil && !rep.Running() {
		return errkind.Errorf(errkind.InvalidArgument, "--from: %s is %s: recover rebuilds etcd on a master it reaches, from that master's data", p.From, rep.State)
	}
	if p.Snapshot != "" {
		if st, err := os.Stat(p.Snapshot); err != nil || !st.Mode().IsRegular() {
			return errkind.Errorf(errkind.InvalidArgument, "--snapshot: %s is not a readable file: %v", p.Snapshot, err)
		}
	}
	if p.Force {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if cli, err := d.Etcd(qctx); err == nil {
		defer cli.Close()
		if ms, err := cli.Members(qctx); err == nil {
			for _, m := range ms {
				if m.Leader {
					return errkind.Errorf(errkind.FailedPrecondition, "etcd still has a quorum (leader %s): recover would discard the other members; fix or remove replicas instead, or pass --force", m.Name)
				}
			}
		}
	}
	return nil
}

// mode says how etcd is rebuilt.
func (x *recovery) mode() string {
	if x.p.Snapshot != "" {
		return "etcd snapshot restore of " + x.p.Snapshot + " onto " + x.p.From + " (hash verified, new cluster ID)"
	}
	return "etcd --force-new-cluster on " + x.p.From + "'s data"
}

func (x *recovery) rebuildEtcd() Step {
	stopAll := "stop every replica"
	if x.fr != nil {
		stopAll = "stop " + x.p.From + "'s etcd (its static pod manifest moved aside; the apiserver waits for it)"
	}
	return Step{
		Name: StepRebuildEtcd, Plan: []string{stopAll, x.mode(), "boot " + x.p.From + " alone"},
		Run: x.runRebuildEtcd,
	}
}

func (x *recovery) runRebuildEtcd(ctx context.Context, r *Run) error {
	p := x.p
	if keyRebuilt.IsSet(r) {
		return nil
	}
	r.Waiting("rebuilding etcd: %s", x.mode())
	if x.fr != nil {
		rep, err := x.inst.Get(ctx, p.From)
		if err != nil {
			return err
		}
		var aside string
		if p.Snapshot != "" {
			aside, err = x.fr.RestoreSnapshot(ctx, rep, p.Snapshot)
		} else {
			aside, err = x.fr.ForceNewCluster(ctx, rep)
		}
		if err != nil {
			return err
		}
		if aside != "" {
			r.Info("%s's etcd data before the recovery is kept at %s on it (remove it once the cluster is whole again)", p.From, aside)
		}
		return keyRebuilt.Mark(r)
	}
	rc := x.d.ProviderCaps().Recoverer
	var err error
	if p.Snapshot != "" {
		err = rc.RestoreSnapshot(ctx, p.From, p.Snapshot)
	} else {
		err = rc.ForceNewCluster(ctx, p.From)
	}
	if err != nil {
		return err
	}
	return keyRebuilt.Mark(r)
}

func (x *recovery) deleteOthers() Step {
	return Step{
		Name: StepDeleteOthers, Plan: []string{deleteOthersPlan(x.d)},
		Run: func(ctx context.Context, r *Run) error {
			d := x.d
			rs, err := x.inst.List(ctx)
			if err != nil {
				return err
			}
			exists, err := lb.Exists(ctx, d.Provider.LoadBalancer())
			if err != nil {
				return err
			}
			for _, rep := range rs {
				if rep.Name == x.p.From {
					continue
				}
				if exists {
					if err := d.Provider.LoadBalancer().RemoveTarget(ctx, rep.Name); err != nil {
						return err
					}
				}
				if err := deleteLost(ctx, d, r, rep); err != nil {
					return err
				}
				if err := removeReplicaSecrets(d, rep.Name); err != nil {
					return err
				}
				r.Info("deleted replica %s (its etcd member is gone with the old cluster)", rep.Name)
			}
			return nil
		},
	}
}

func (x *recovery) demote() Step {
	return Step{
		Name: StepDemote, Plan: []string{"unless the masters record the load balancer as the cluster's endpoint: loadBalancer.Delete", "staticIP.Attach(" + x.p.From + ")"},
		Run: func(ctx context.Context, r *Run) error {
			d := x.d
			if ep, keep, err := keepsEndpoint(ctx, d); err != nil {
				return err
			} else if keep {
				r.Info("the load balancer stays, on %s alone: the masters record %s as the cluster's endpoint", x.p.From, ep)
				return nil
			}
			return lb.Demote(ctx, d.Provider.StaticIP(), d.Provider.LoadBalancer(), x.p.From)
		},
	}
}

func (x *recovery) clearLock() Step {
	return Step{
		Name: StepClearLock, Plan: []string{"delete the cluster lock key of the run that quorum loss cut off"},
		Run: func(ctx context.Context, r *Run) error {
			cli, err := x.d.Etcd(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			_, err = cli.Raw().Delete(ctx, LockKey(x.d.Cluster))
			return err
		},
	}
}

func (x *recovery) verify() Step {
	return Step{
		Name: StepVerify, Always: true, Plan: []string{x.p.From + " serves: /readyz 200, a one-member etcd it leads"},
		Run: func(ctx context.Context, r *Run) error {
			d, from := x.d, x.p.From
			rep, err := x.inst.Get(ctx, from)
			if err != nil {
				return err
			}
			gctx, cancel := context.WithTimeout(ctx, x.p.Timeout)
			defer cancel()
			return gateWithFailFast(gctx, d, r, from, from+" serving alone", func(cctx context.Context) error {
				if _, err := d.Probe(cctx, d.Provider.APIServerURL(rep), "/readyz"); err != nil {
					return err
				}
				cli, err := d.Etcd(cctx)
				if err != nil {
					return err
				}
				defer cli.Close()
				ms, err := cli.Members(cctx)
				if err != nil {
					return err
				}
				if len(ms) != 1 || !ms[0].Leader {
					return fmt.Errorf("etcd has %d members, want %s alone as leader", len(ms), from)
				}
				return nil
			})
		},
	}
}

// ExecuteRecover runs the recover workflow. There is no cluster lock to
// take (etcd has no quorum); the journal still makes it resumable, and it
// supersedes whatever unfinished workflow the quorum loss cut off.
func ExecuteRecover(ctx context.Context, d *Deps, wf *Workflow, o Options) error {
	if err := d.checkBound(); err != nil {
		return err
	}
	rn := &Runner{Store: NewJournalStore(d.StateDir, d.Cluster), Sink: d.Sink, AfterStep: d.AfterStep}
	j, resumed, err := rn.Prepare(wf, func(prev, next *Journal) bool { return true })
	if err != nil {
		return err
	}
	plan := wf.Plan()
	if resumed {
		plan += "Resuming the unfinished recover.\n"
	}
	if o.DryRun {
		fmt.Fprint(d.Out, plan)
		fmt.Fprintln(d.Out, "Dry run: nothing was changed.")
		return nil
	}
	if err := wf.check(ctx); err != nil {
		return err
	}
	if o.Confirm != nil {
		if err := o.Confirm(plan); err != nil {
			return err
		}
	}
	if err := d.adopt(ctx, rn.Sink); err != nil {
		return err
	}
	if err := rn.Execute(ctx, wf, j); err != nil {
		return err
	}
	return nil
}

func deleteOthersPlan(d *Deps) string {
	if joinerOf(d) != nil {
		return "for every other replica: loadBalancer.RemoveTarget, the flavor's leave (kubeadm reset -f, its Node deleted), instances.Delete (a host that does not answer is forgotten: providers.Forgetter), its certificates and keys"
	}
	return "for every other replica: loadBalancer.RemoveTarget, instances.Delete (VM, disk, address), its certificates and keys"
}

// deleteLost deletes a replica recover leaves out of the rebuilt
// cluster: its member went with the old cluster. A joining flavor's tool
// leaves it first (kubeadm reset -f: the master's etcd data and
// manifests cleaned; its Node deleted). A machine that does not answer
// cannot be cleaned: a provider whose machines outlive the cluster
// (providers.Forgetter: metal hosts) forgets it, and the operator is told
// how to clean it once it answers.
func deleteLost(ctx context.Context, d *Deps, r *Run, rep providers.Replica) error {
	inst := d.Provider.Instances()
	if j := joinerOf(d); j != nil {
		if err := j.Leave(ctx, rep); err != nil {
			if rep.Running() {
				return err
			}
			r.Info("%s does not answer: the flavor could not leave it (%v)", rep.Name, err)
		}
	}
	err := inst.Delete(ctx, rep.Name)
	fg := d.ProviderCaps().Forgetter
	if err == nil || fg == nil || !errors.Is(err, errkind.Unavailable) {
		return err
	}
	if err := fg.Forget(ctx, rep.Name); err != nil {
		return err
	}
	r.Info("%s does not answer: it is no longer recorded as a master of %s, and its files stay on it; once it answers it lists as a master again: run 'hamaster remove-replica --name %s --yes' then to clean it", rep.Name, d.Cluster, rep.Name)
	return nil
}
