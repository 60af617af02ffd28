package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/internal/ctxutil"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers"
)

// Rolling-upgrade strategies.
const (
	StrategyRecreate = "recreate"
	StrategySurge    = "surge"
	// StrategyInPlace is no flag's: what a run of a flavor that upgrades
	// its masters in place (flavors.Upgrader) records as its strategy.
	StrategyInPlace = "in-place"
)

// UpgradeParams are rolling-upgrade's arguments.
type UpgradeParams struct {
	Version string
	// ExtraArgs replaces the control-plane flags when ExtraArgsSet.
	ExtraArgs     []string
	ExtraArgsSet  bool
	Strategy      string
	DrainGrace    time.Duration
	HealthTimeout time.Duration
	AllowDowntime bool
	// Drain is what happens to each master's Node before its upgrade
	// (flavors whose masters are Nodes; uncordoned after).
	Drain NodeDrain
}

// target returns what tmpl becomes after the upgrade.
func (p UpgradeParams) target(tmpl providers.Template) providers.Template {
	t := tmpl.Clone()
	if p.Version != "" { // "" keeps each replica's version (a flags-only upgrade)
		t.Version = p.Version
	}
	if p.ExtraArgsSet {
		t.ExtraArgs = append([]string(nil), p.ExtraArgs...)
	}
	return t
}

// atTarget reports whether a replica already runs the target template.
func (p UpgradeParams) atTarget(r providers.Replica) bool {
	return (p.Version == "" || r.Template.Version == p.Version) && (!p.ExtraArgsSet || slices.Equal(r.Template.ExtraArgs, p.ExtraArgs))
}

// RollingUpgrade builds the rolling-upgrade workflow for replicas (the
// cluster's replicas when the command starts; the count fixes the number
// of slots, each slot upgrades one replica chosen when the slot starts:
// followers first, the etcd leader last).
//
// recreate, per replica: drain from the LB and wait the grace period →
// record the last known-good template in the journal → recreate the VM
// with the new template on the same data disk → health gate (etcd member
// healthy and caught up, /readyz 200, /version = V) → back in the LB →
// LB sees it healthy. On a failed health gate the replica is restored from
// its last known-good template, put back, and the run stops (exit 1).
//
// surge, per replica: add a replica at the new version (the add-replica
// workflow), then remove an old one (remove-replica): never fewer healthy
// replicas than at the start.
func RollingUpgrade(d *Deps, p UpgradeParams, replicas int) *Workflow {
	wf := &Workflow{Name: "rolling-upgrade", Params: map[string]string{
		"version": p.Version, "strategy": p.Strategy,
	}}
	if p.ExtraArgsSet {
		wf.Params["extra-args"] = strings.Join(p.ExtraArgs, " ")
	}
	p.Drain.params(wf.Params)
	if p.HealthTimeout <= 0 {
		p.HealthTimeout = 5 * time.Minute
	}
	// A provider whose masters download their release at boot checks
	// that the target version has one before anything changes (a kube-up
	// master given a missing release never comes up).
	if p.Version != "" {
		wf.Check = func(ctx context.Context) error { return d.Flavor().CheckVersion(ctx, p.Version) }
	}
	// A flavor that upgrades its masters in place with its own tool
	// (kubeadm) is upgraded so, one master at a time; the others are
	// recreated from a template at the new version, or surged.
	up, inPlace := inPlaceUpgrader(d, p)
	if inPlace && p.ExtraArgsSet {
		wf.Check = checkInPlaceFlags(d, p, up, wf.Check)
	}
	if inPlace {
		wf.Params["strategy"] = StrategyInPlace
	}
	wf.Steps = []Step{upgradePreflight(d, p, inPlace), {
		Name: StepSnapshot, Plan: []string{"etcd Maintenance.Snapshot → <state-dir>/<cluster>/snapshots/"},
		Run: func(ctx context.Context, r *Run) error {
			return takeSnapshot(ctx, d, r, "upgrade-"+p.Version)
		},
	}}
	for k := 1; k <= replicas; k++ {
		switch {
		case inPlace:
			wf.Steps = append(wf.Steps, inPlaceSteps(d, p, up, k)...)
		case p.Strategy == StrategySurge:
			wf.Steps = append(wf.Steps, surgeSteps(d, p, k)...)
		default:
			wf.Steps = append(wf.Steps, recreateSteps(d, p, k)...)
		}
	}
	if inPlace {
		wf.Steps = append(wf.Steps, finishInPlaceStep(d, up))
	}
	wf.Steps = append(wf.Steps, upgradeVerifyStep(d, p, inPlace))
	return wf
}

// checkInPlaceFlags is --extra-args' check when the flavor upgrades its
// masters in place, before check (nil: none): the flavor must set flags
// (flavors.FlagUpgrader), each one by name (kubeadm-config's
// apiServer.extraArgs), not replaced as a whole.
func checkInPlaceFlags(d *Deps, p UpgradeParams, up flavors.Upgrader, check func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if flavors.FlagUpgraderOf(up) == nil {
			return errkind.Errorf(errkind.InvalidArgument, "--extra-args: the %s flavor upgrades its masters in place and cannot set their flags", d.Flavor().Name())
		}
		for _, a := range p.ExtraArgs {
			if name, _, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); !ok || name == "" || !strings.HasPrefix(a, "--") {
				return errkind.Errorf(errkind.InvalidArgument, "--extra-args: %q: the %s flavor sets each flag by name: want --name=value", a, d.Flavor().Name())
			}
		}
		if check != nil {
			return check(ctx)
		}
		return nil
	}
}

// upgradeVerifyStep checks every replica healthy at p.Version.
func upgradeVerifyStep(d *Deps, p UpgradeParams, inPlace bool) Step {
	return Step{
		Name: StepVerify, Always: true, Plan: []string{"every replica healthy and reporting " + p.Version},
		Run: func(ctx context.Context, r *Run) error {
			rs, err := d.Provider.Instances().List(ctx)
			if err != nil {
				return err
			}
			for _, rep := range rs {
				// An in-place upgrade leaves the template as it was:
				// the gate's /version says.
				if !inPlace && !p.atTarget(rep) {
					return fmt.Errorf("replica %s still runs %s", rep.Name, rep.Template.Version)
				}
				if err := healthGate(ctx, d, r, rep, p.Version, p.HealthTimeout); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func upgradePreflight(d *Deps, p UpgradeParams, inPlace bool) Step {
	return Step{
		Name: StepPreflight, Always: true,
		Plan: []string{"every replica healthy (/readyz), every voter healthy, no pending learner", "quorum survives one replica down (recreate)"},
		Run: func(ctx context.Context, r *Run) error {
			rs, err := d.Provider.Instances().List(ctx)
			if err != nil {
				return err
			}
			for _, rep := range rs {
				if !rep.Running() {
					return errkind.Errorf(errkind.FailedPrecondition, "replica %s is not running", rep.Name)
				}
				// A replica mid-upgrade from an interrupted run is expected
				// to be out of the LB; its health is checked by its slot.
				if inFlight(r, rep.Name) {
					continue
				}
				if _, err := d.Probe(ctx, d.Provider.APIServerURL(rep), "/readyz"); err != nil {
					return errkind.Errorf(errkind.FailedPrecondition, "replica %s is not healthy: %v", rep.Name, err)
				}
			}
			ms, err := d.members(ctx)
			if err != nil {
				return err
			}
			voters := 0
			for _, m := range ms {
				if m.Learner {
					return errkind.Errorf(errkind.FailedPrecondition, "learner %s is pending (an unfinished add-replica?); finish or remove it first", m.IDHex())
				}
				if !m.Healthy && !inFlight(r, d.replicaOf(m, providers.EtcdMain, rs)) {
					return errkind.Errorf(errkind.FailedPrecondition, "etcd voter %s is unhealthy: %s", m.Name, m.Err)
				}
				voters++
			}
			if p.Strategy == StrategyRecreate {
				if len(rs) == 1 && !p.AllowDowntime {
					if inPlace {
						return errkind.Errorf(errkind.FailedPrecondition, "cluster %s has one master: upgrading it in place means control-plane downtime while its apiserver restarts; add a master first (add-replica) or pass --allow-downtime", d.Cluster)
					}
					return errkind.Errorf(errkind.FailedPrecondition, "cluster %s has one replica: recreating it means control-plane downtime; use --strategy surge (adds a new replica first) or pass --allow-downtime", d.Cluster)
				}
				if len(rs) > 1 && voters-1 < etcdmember.Quorum(voters) {
					return errkind.Errorf(errkind.FailedPrecondition, "with %d etcd voters, one replica down leaves %d of a quorum of %d; add a replica first or use --strategy surge", voters, voters-1, etcdmember.Quorum(voters))
				}
			}
			return nil
		},
	}
}

// inFlight reports whether an interrupted slot of this run is upgrading name.
func inFlight(r *Run, name string) bool {
	for k, n := range slots(r) {
		if n == name && !slotDoneKey(k).IsSet(r) {
			return true
		}
	}
	return false
}

// pickNext chooses the next replica to upgrade: not at the target, not
// the etcd leader while a follower still needs it.
func pickNext(ctx context.Context, d *Deps, p UpgradeParams, exclude map[string]bool) (providers.Replica, bool, error) {
	rs, err := d.Provider.Instances().List(ctx)
	if err != nil {
		return providers.Replica{}, false, err
	}
	var todo []providers.Replica
	for _, rep := range rs {
		if !p.atTarget(rep) && !exclude[rep.Name] {
			todo = append(todo, rep)
		}
	}
	if len(todo) == 0 {
		return providers.Replica{}, false, nil
	}
	leader, err := leaderReplica(ctx, d, rs)
	if err != nil {
		return providers.Replica{}, false, err
	}
	for _, rep := range todo {
		if rep.Name != leader {
			return rep, true, nil
		}
	}
	return todo[0], true, nil
}

// leaderReplica names the replica of rs whose main etcd member leads,
// or "" when none does.
func leaderReplica(ctx context.Context, d *Deps, rs []providers.Replica) (string, error) {
	cli, ms, err := d.etcdMembers(ctx, providers.EtcdMain, nil, nil)
	if err != nil {
		return "", err
	}
	cli.Close()
	for _, m := range ms {
		if m.Leader {
			return d.replicaOf(m, providers.EtcdMain, rs), nil
		}
	}
	return "", nil
}

// slotReplica returns the replica slot k works on, choosing and recording
// it the first time.
func slotReplica(ctx context.Context, d *Deps, p UpgradeParams, r *Run, k int) (string, error) {
	if name := slotName(r, k); name != "" {
		return name, nil
	}
	rep, ok, err := pickNext(ctx, d, p, nil)
	if err != nil || !ok {
		return "", err
	}
	return rep.Name, slotKey(k).Set(r, rep.Name)
}

// slotName is the replica upgrade slot k works on ("" until its first
// step picks one).
func slotName(r *Run, k int) string { return slotKey(k).Get(r) }

// getSlotReplica looks up the replica called n of an upgrade slot; ok is
// false when the slot is empty (n is "": the step has nothing to do) or
// the lookup failed (err).
func getSlotReplica(ctx context.Context, inst providers.Instances, n string) (rep providers.Replica, ok bool, err error) {
	if n == "" {
		return rep, false, nil
	}
	rep, err = inst.Get(ctx, n)
	return rep, err == nil, err
}

// backInLBStep is slot k's last step, in either strategy: the replica
// back in the LB, healthy there, and the slot done.
func backInLBStep(d *Deps, p UpgradeParams, k int) Step {
	return Step{
		Name: fmt.Sprintf("replica-%d/back-in-lb", k), Plan: []string{"loadBalancer.AddTarget(replica)", "wait until the LB sees it healthy"},
		Run: func(ctx context.Context, r *Run) error {
			n := slotName(r, k)
			if n == "" {
				return nil
			}
			if err := undrain(ctx, d, r, n, p.HealthTimeout); err != nil {
				return err
			}
			return slotDoneKey(k).Mark(r)
		},
	}
}

func recreateSteps(d *Deps, p UpgradeParams, k int) []Step {
	inst := d.Provider.Instances()
	name := func(r *Run) string { return slotName(r, k) }
	prefix := fmt.Sprintf("replica-%d/", k)
	return []Step{
		{
			Name: prefix + "drain", Plan: []string{"pick the next replica (followers first, the etcd leader last)", fmt.Sprintf("loadBalancer.DrainTarget; inside the drain grace (%s) move etcd leadership to an upgraded replica; wait the rest of the grace", p.DrainGrace)},
			Run: func(ctx context.Context, r *Run) error {
				n, err := slotReplica(ctx, d, p, r, k)
				if err != nil || n == "" {
					return err
				}
				r.Info("upgrading %s", n)
				_, err = drainMovingLeader(ctx, d, r, n, p.DrainGrace, nil)
				return err
			},
		},
		{
			Name: prefix + "record-last-known-good", Plan: []string{"store the replica's current template in the journal (kept out of the rollout's reach)"},
			Run: func(ctx context.Context, r *Run) error {
				n := name(r)
				if n == "" || lkgKey(n).Get(r) != "" {
					return nil
				}
				rep, err := inst.Get(ctx, n)
				if err != nil {
					return err
				}
				if p.atTarget(rep) {
					return fmt.Errorf("replica %s is already at the target template but its last known-good was not recorded", n)
				}
				b, err := recordLastKnownGood(d, r, n, rep.Template)
				if err != nil {
					return err
				}
				return saveLastKnownGood(d, n, b)
			},
		},
		{
			Name: prefix + "recreate", Plan: []string{"instances.Recreate(replica, template with the new version/flags) on the same data disk"},
			Run: func(ctx context.Context, r *Run) error {
				n := name(r)
				rep, ok, err := getSlotReplica(ctx, inst, n)
				if !ok || p.atTarget(rep) {
					return err
				}
				r.Waiting("recreating %s at %s", n, p.Version)
				if _, err := inst.Recreate(ctx, n, p.target(rep.Template)); err != nil {
					if ctx.Err() != nil {
						return err // interrupted, not failed: a re-run resumes
					}
					// The new template does not even start (a version the
					// replica cannot run): back to the last known good.
					return rollback(ctx, d, r, n, p, fmt.Errorf("recreate at %s: %w", p.Version, err))
				}
				return nil
			},
		},
		healthGateStep(d, p, k, fmt.Sprintf("restore the last known-good template (healthy within %s)", RestoreHealthTimeout(p.HealthTimeout)),
			func(ctx context.Context, r *Run, rep providers.Replica, cause error) error {
				return rollback(ctx, d, r, rep.Name, p, cause)
			}),
		backInLBStep(d, p, k),
	}
}

// healthGateStep is slot k's health gate after its upgrade: its replica
// healthy at p.Version within p.HealthTimeout, else rollback (onFail
// says what it does, for the plan) and stop. An interrupted gate is not a
// failure: a re-run gates the replica again.
func healthGateStep(d *Deps, p UpgradeParams, k int, onFail string, rollback func(ctx context.Context, r *Run, rep providers.Replica, cause error) error) Step {
	return Step{
		Name: fmt.Sprintf("replica-%d/health-gate", k), Plan: []string{"etcd member healthy and caught up, /readyz 200, /version = " + p.Version, fmt.Sprintf("within %s, else %s and stop", p.HealthTimeout, onFail)},
		Run: func(ctx context.Context, r *Run) error {
			rep, ok, err := getSlotReplica(ctx, d.Provider.Instances(), slotName(r, k))
			if !ok {
				return err
			}
			gerr := healthGate(ctx, d, r, rep, p.Version, p.HealthTimeout)
			if gerr == nil || ctx.Err() != nil {
				return gerr // healthy, or interrupted: a re-run gates it again
			}
			return rollback(ctx, r, rep, gerr)
		},
	}
}

// drainMovingLeader takes replica name out of service before it is
// changed. With a load balancer it drains name's target (after
// beforeDrain, when not nil, has journaled that it will), moves etcd
// leadership off name's member inside the drain grace, as
// remove-replica's drain-lb-target and move-etcd-leader do, waits what is
// left of the grace and ends the sessions still open; without one it
// only moves leadership. It reports whether a load balancer exists.
//
// Why leadership moves inside the grace: while the leader hands over,
// raft drops the proposals it is given (go.etcd.io/raft stepLeader:
// "transfer leadership ... is in progress; dropping proposal"), so a
// write through the old leader's member fails at once, and one that a
// follower forwards to it is lost and waits out its client's timeout
// (etcd-io/etcd#8975; bench BenchmarkLeaderTransfer). Drained, the old
// leader's apiserver gets no new client for that moment. The followers'
// forwarded writes are etcd's to lose whenever leadership changes (its
// own graceful stop of a leader hands over too); hamaster keeps that to
// one hand-over per leader it replaces (the leader goes last), to the
// most caught-up voter (etcdmember.Client.MoveLeader).
// If leadership cannot be moved, the target goes back into the load
// balancer and the error is returned.
func drainMovingLeader(ctx context.Context, d *Deps, r *Run, name string, grace time.Duration, beforeDrain func() error) (bool, error) {
	l := d.Provider.LoadBalancer()
	exists, err := lb.Exists(ctx, l)
	if err != nil {
		return false, err
	}
	if !exists {
		return false, moveLeaderOff(ctx, d, r, name)
	}
	if beforeDrain != nil {
		if err := beforeDrain(); err != nil {
			return true, err
		}
	}
	if st, err := l.Get(ctx); err == nil && onlyTarget(st, name) {
		// Draining the only target sends clients nowhere and cuts what
		// the master's own tools reach through the load balancer (a
		// kubeadm master's admin.conf names the endpoint): a sole master
		// (--allow-downtime) stays in it, its clients waiting while its
		// apiserver restarts.
		r.Info("%s is the load balancer's only target: not drained (its clients wait while it restarts)", name)
		return true, moveLeaderOff(ctx, d, r, name)
	}
	if err := l.DrainTarget(ctx, name); err != nil {
		return true, fmt.Errorf("drain %s: %w", name, err)
	}
	until := r.now().Add(grace)
	if err := moveLeaderOff(ctx, d, r, name); err != nil {
		if ctx.Err() == nil {
			if uerr := undrain(ctx, d, r, name, grace+time.Minute); uerr != nil {
				return true, errors.Join(err, fmt.Errorf("put %s back into the load balancer: %w", name, uerr))
			}
		}
		return true, err
	}
	left := min(until.Sub(r.now()), grace)
	if left > 0 {
		r.Waiting("rest of the drain grace period for %s: %s of %s", name, left.Round(time.Millisecond), grace)
	}
	return true, lb.FinishDrain(ctx, l, name, left)
}

// moveLeaderOff moves etcd leadership away from name if it leads (the
// leader is upgraded last, onto an already upgraded replica).
func moveLeaderOff(ctx context.Context, d *Deps, r *Run, name string) error {
	if rs, err := d.Provider.Instances().List(ctx); err != nil || len(rs) < 2 {
		return err // a single replica has nobody to hand leadership to
	}
	cli, ms, err := d.etcdMembers(ctx, providers.EtcdMain, []string{name}, nil)
	if err != nil {
		return err
	}
	defer cli.Close()
	m, ok := d.findMember(ms, providers.EtcdMain, name, "")
	if !ok || !m.Leader || len(ms) == 1 {
		return nil
	}
	to, err := cli.MoveLeader(ctx, m.ID)
	if err != nil {
		return fmt.Errorf("move etcd leadership away from %s: %w", name, err)
	}
	r.Info("etcd leadership moved from %s to %x before touching it", name, to)
	return nil
}

// undrain puts name back: into the load balancer (waited for healthy
// there, within timeout), then its Node uncordoned.
func undrain(ctx context.Context, d *Deps, r *Run, name string, timeout time.Duration) error {
	// The load balancer first: the Node's uncordon goes through it (a
	// kubeadm master's admin.conf names the endpoint).
	l := d.Provider.LoadBalancer()
	exists, err := lb.Exists(ctx, l)
	if err != nil {
		return err
	}
	if exists {
		rep, err := d.Provider.Instances().Get(ctx, name)
		if err != nil {
			return err
		}
		if err := l.AddTarget(ctx, lb.Target{Name: name, Address: rep.Address}); err != nil {
			return err
		}
		r.Waiting("the load balancer to see %s healthy", name)
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := lb.WaitHealthyObserved(wctx, l, name, r.Observe); err != nil {
			return err
		}
	}
	return uncordonNode(ctx, d, r, name)
}

// onlyTarget reports whether name is the one target of the load
// balancer st describes.
func onlyTarget(st lb.Status, name string) bool {
	return len(st.Targets) == 1 && st.Targets[0].Name == name
}

// etcdSetupTimeout bounds the making of a health gate's etcd client.
const etcdSetupTimeout = time.Minute

// healthGate waits until the replica's etcd member is a healthy voter
// caught up with the leader, /readyz answers 200 and /version reports
// version. The error names the check that failed last.
func healthGate(ctx context.Context, d *Deps, r *Run, rep providers.Replica, version string, timeout time.Duration) error {
	gctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	base := d.Provider.APIServerURL(rep)
	// One etcd client for every attempt, made again only after it fails:
	// making one lists the masters and may read certificates over SSH,
	// sessions that take a second or more each on real hosts, so it is
	// set-up bounded by etcdSetupTimeout, not by an attempt's deadline.
	var cli *etcdmember.Client
	defer func() {
		if cli != nil {
			cli.Close()
		}
	}()
	err := gateWithFailFast(gctx, d, r, rep.Name, fmt.Sprintf("%s healthy: /readyz, /version=%s, etcd caught up", rep.Name, version), func(cctx context.Context) error {
		if _, err := d.Probe(cctx, base, "/readyz"); err != nil {
			return fmt.Errorf("/readyz: %w", err)
		}
		// version "": the template does not name one (a kube-up master
		// booted from a devel upload), so /version is not compared.
		if version != "" {
			v, err := d.ReplicaVersion(cctx, rep)
			if err != nil {
				return fmt.Errorf("/version: %w", err)
			}
			if v != version {
				return fmt.Errorf("/version reports %s, want %s", v, version)
			}
		}
		if cli == nil {
			ectx, cancel := ctxutil.WithoutDeadline(cctx, etcdSetupTimeout)
			c, err := d.Etcd(ectx)
			cancel()
			if err != nil {
				return fmt.Errorf("etcd member: %w", err)
			}
			cli = c
		}
		ms, err := cli.Members(cctx)
		if err != nil {
			cli.Close()
			cli = nil
			return fmt.Errorf("etcd member: %w", err)
		}
		m, ok := d.findMember(ms, providers.EtcdMain, rep.Name, rep.Address)
		if !ok || m.Learner || !m.Healthy {
			return fmt.Errorf("etcd member %s not a healthy voter (%s)", rep.Name, m.Err)
		}
		var leaderIndex uint64
		for _, x := range ms {
			if x.Leader {
				leaderIndex = x.RaftIndex
			}
		}
		if leaderIndex > m.RaftIndex+50 {
			return fmt.Errorf("etcd member %s behind the leader (%d < %d)", rep.Name, m.RaftIndex, leaderIndex)
		}
		return nil
	})
	var we *WaitError
	if errors.As(err, &we) {
		return fmt.Errorf("check failed: %v", we.Last)
	}
	return err
}

// recordLastKnownGood journals t, the template of replica name, as its
// last known-good (lkgKey) and returns it as journaled: its keys stay
// under pki/ (syncPKI), the journal gets the template without them.
func recordLastKnownGood(d *Deps, r *Run, name string, t providers.Template) ([]byte, error) {
	if err := syncPKI(d, name, t); err != nil {
		return nil, err
	}
	b, err := json.Marshal(withoutKeys(t))
	if err != nil {
		return nil, err
	}
	return b, lkgKey(name).Set(r, string(b))
}

// rollback restores a replica that failed its health gate from its last
// known-good template, waits until it is healthy again and back in the LB,
// and concludes the run with an error naming what failed.
// RestoreHealthTimeout is how long a rollback waits for a replica restored
// to its last known-good template: twice the upgrade's health timeout.
func RestoreHealthTimeout(health time.Duration) time.Duration { return 2 * health }

func rollback(ctx context.Context, d *Deps, r *Run, name string, p UpgradeParams, cause error) error {
	raw := lkgKey(name).Get(r)
	if raw == "" {
		return fmt.Errorf("replica %s failed its health gate (%v) and no last known-good template is recorded", name, cause)
	}
	var lkg providers.Template
	if err := json.Unmarshal([]byte(raw), &lkg); err != nil {
		return fmt.Errorf("replica %s: decode last known-good template: %w", name, err)
	}
	lkg, err := withKeys(d, name, lkg)
	if err != nil {
		return err
	}
	r.Info("%s failed its health gate: %v — restoring its last known-good template (%s)", name, cause, versionText(lkg.Version))
	if _, err := d.Provider.Instances().Recreate(ctx, name, lkg); err != nil {
		return fmt.Errorf("replica %s failed its health gate (%v); restoring %s failed too: %w", name, cause, versionText(lkg.Version), err)
	}
	rep, err := d.Provider.Instances().Get(ctx, name)
	if err != nil {
		return err
	}
	// The known-good template gets twice the health timeout: giving up
	// on it leaves the replica down for the operator, while the timeout
	// is tuned to give up early on a new version. A restore recreates the
	// VM again, so it has a whole boot to wait for (on a loaded GCE fake
	// a restore once outlasted a 40 s gate in CI).
	if err := healthGate(ctx, d, r, rep, lkg.Version, RestoreHealthTimeout(p.HealthTimeout)); err != nil {
		return fmt.Errorf("replica %s failed its health gate (%v) and is not healthy after restoring %s within %s: %w", name, cause, versionText(lkg.Version), RestoreHealthTimeout(p.HealthTimeout), err)
	}
	if err := undrain(ctx, d, r, name, p.HealthTimeout); err != nil {
		return err
	}
	return fmt.Errorf("%w: replica %s failed at %s (%v); restored its last known-good template (version %s, flags %q): it is serving again and the other replicas were not touched",
		ErrConcluded, name, p.Version, cause, versionText(lkg.Version), strings.Join(lkg.ExtraArgs, " "))
}

// versionText names a template's version for people; a template may name
// none (a kube-up master on its devel upload).
func versionText(v string) string {
	if v == "" {
		return "unnamed: not a release"
	}
	return v
}

// saveLastKnownGood keeps a copy of the template outside the journal too
// (<state-dir>/<cluster>/last-known-good/<replica>.json).
func saveLastKnownGood(d *Deps, name string, b []byte) error {
	path := filepath.Join(d.clusterDir(), "last-known-good", name+".json")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

func surgeSteps(d *Deps, p UpgradeParams, k int) []Step {
	prefix := fmt.Sprintf("replica-%d/", k)
	return []Step{
		{
			Name: prefix + "surge-add", Plan: []string{"add-replica with the new template (its own journal; resumable)"},
			Run: func(ctx context.Context, r *Run) error {
				old := slotOldKey(k).Get(r)
				if old == "" {
					rep, ok, err := pickNext(ctx, d, p, nil)
					if err != nil || !ok {
						return err
					}
					old = rep.Name
					if err := slotOldKey(k).Set(r, old); err != nil {
						return err
					}
				}
				newName := slotNewKey(k).Get(r)
				if newName == "" {
					newName = NewReplicaName(d.Cluster)
					if err := slotNewKey(k).Set(r, newName); err != nil {
						return err
					}
				}
				if _, err := d.Provider.Instances().Get(ctx, old); err != nil {
					return nil // old already removed: this slot finished
				}
				r.Info("surge: adding %s at %s before removing %s", newName, p.Version, old)
				add := AddReplica(d, AddParams{Name: newName, Timeout: p.HealthTimeout, Template: func(t providers.Template) providers.Template { return p.target(t) }})
				err := runSub(ctx, d, fmt.Sprintf("surge-%d-add", k), add)
				if err == nil || ctx.Err() != nil {
					return err // done, or interrupted: a re-run resumes the add
				}
				return surgeCompensate(ctx, d, r, p, k, newName, err)
			},
		},
		{
			Name: prefix + "surge-remove", Plan: []string{"remove-replica of an old replica (its own journal; resumable)"},
			Run: func(ctx context.Context, r *Run) error {
				old := slotOldKey(k).Get(r)
				if old == "" {
					return nil
				}
				rm := RemoveReplica(d, RemoveParams{Name: old, DrainGrace: p.DrainGrace, Timeout: p.HealthTimeout})
				return runSub(ctx, d, fmt.Sprintf("surge-%d-remove", k), rm)
			},
		},
	}
}

// runSub runs a nested workflow under the lock the outer one holds, with a
// journal of its own so that it resumes too; the journal is removed once
// the nested workflow finished.
func runSub(ctx context.Context, d *Deps, key string, wf *Workflow) error {
	store := &JournalStore{Path: filepath.Join(d.clusterDir(), "journal-"+key+".json")}
	rn := &Runner{Store: store, Sink: d.Sink, Fence: d.fence}
	j, _, err := rn.Prepare(wf, nil)
	if err != nil {
		return err
	}
	if err := wf.check(ctx); err != nil {
		return err
	}
	if err := rn.Execute(ctx, wf, j); err != nil {
		return err
	}
	return store.Remove()
}
