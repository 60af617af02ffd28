package workflows

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hamaster/hamaster/errkind"
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
	wf := &Workflow{Name: "recover", Params: map[string]string{"from": p.From, "snapshot": p.Snapshot}}
	inst := d.Provider.Instances()
	mode := "etcd --force-new-cluster on " + p.From + "'s data"
	if p.Snapshot != "" {
		mode = "etcd snapshot restore of " + p.Snapshot + " onto " + p.From + " (hash verified, new cluster ID)"
	}
	wf.Check = func(ctx context.Context) error {
		if _, ok := inst.(providers.Recoverer); !ok {
			return errkind.Errorf(errkind.FailedPrecondition, "the %s provider cannot rebuild etcd from a replica's disk; follow the manual runbook in docs/recovery.md", d.Provider.Name())
		}
		if _, err := inst.Get(ctx, p.From); err != nil {
			return errkind.Errorf(errkind.InvalidArgument, "--from: %w", err)
		}
		if p.Snapshot != "" {
			if st, err := os.Stat(p.Snapshot); err != nil || !st.Mode().IsRegular() {
				return errkind.Errorf(errkind.InvalidArgument, "--snapshot: %s is not a readable file: %v", p.Snapshot, err)
			}
		}
		if p.Force {
			return nil
		}
		// Refuse while etcd has a quorum: recovery throws the other
		// members away.
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
	wf.Steps = []Step{
		{
			Name: StepRebuildEtcd, Plan: []string{"stop every replica", mode, "boot " + p.From + " alone"},
			Run: func(ctx context.Context, r *Run) error {
				if r.Get("rebuilt") != "" {
					return nil
				}
				rc := inst.(providers.Recoverer)
				r.Waiting("rebuilding etcd: %s", mode)
				var err error
				if p.Snapshot != "" {
					err = rc.RestoreSnapshot(ctx, p.From, p.Snapshot)
				} else {
					err = rc.ForceNewCluster(ctx, p.From)
				}
				if err != nil {
					return err
				}
				return r.Set("rebuilt", "true")
			},
		},
		{
			Name: StepDeleteOthers, Plan: []string{"for every other replica: loadBalancer.RemoveTarget, instances.Delete (VM, disk, address), its certificates and keys"},
			Run: func(ctx context.Context, r *Run) error {
				rs, err := inst.List(ctx)
				if err != nil {
					return err
				}
				exists, err := lb.Exists(ctx, d.Provider.LoadBalancer())
				if err != nil {
					return err
				}
				for _, rep := range rs {
					if rep.Name == p.From {
						continue
					}
					if exists {
						if err := d.Provider.LoadBalancer().RemoveTarget(ctx, rep.Name); err != nil {
							return err
						}
					}
					if err := inst.Delete(ctx, rep.Name); err != nil {
						return err
					}
					if err := removeReplicaSecrets(d, rep.Name); err != nil {
						return err
					}
					r.Info("deleted replica %s (its etcd member is gone with the old cluster)", rep.Name)
				}
				return nil
			},
		},
		{
			Name: StepDemote, Plan: []string{"loadBalancer.Delete", "staticIP.Attach(" + p.From + ")"},
			Run: func(ctx context.Context, r *Run) error {
				return lb.Demote(ctx, d.Provider.StaticIP(), d.Provider.LoadBalancer(), p.From)
			},
		},
		{
			Name: StepClearLock, Plan: []string{"delete the cluster lock key of the run that quorum loss cut off"},
			Run: func(ctx context.Context, r *Run) error {
				cli, err := d.Etcd(ctx)
				if err != nil {
					return err
				}
				defer cli.Close()
				_, err = cli.Raw().Delete(ctx, LockKey(d.Cluster))
				return err
			},
		},
		{
			Name: StepVerify, Always: true, Plan: []string{p.From + " serves: /readyz 200, a one-member etcd it leads"},
			Run: func(ctx context.Context, r *Run) error {
				rep, err := inst.Get(ctx, p.From)
				if err != nil {
					return err
				}
				gctx, cancel := context.WithTimeout(ctx, p.Timeout)
				defer cancel()
				return gateWithFailFast(gctx, d, r, p.From, p.From+" serving alone", func(cctx context.Context) error {
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
						return fmt.Errorf("etcd has %d members, want %s alone as leader", len(ms), p.From)
					}
					return nil
				})
			},
		},
	}
	return wf
}

// ExecuteRecover runs the recover workflow. There is no cluster lock to
// take (etcd has no quorum); the journal still makes it resumable, and it
// supersedes whatever unfinished workflow the quorum loss cut off.
func ExecuteRecover(ctx context.Context, d *Deps, wf *Workflow, o Options) error {
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
	if wf.Check != nil {
		if err := wf.Check(ctx); err != nil {
			return err
		}
	}
	if o.Confirm != nil {
		if err := o.Confirm(plan); err != nil {
			return err
		}
	}
	if err := rn.Execute(ctx, wf, j); err != nil {
		return err
	}
	return nil
}
