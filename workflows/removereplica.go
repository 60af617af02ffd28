package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers"
)

// RemoveParams are remove-replica's arguments.
type RemoveParams struct {
	Name string
	// Force overrides the quorum refusal (the risk is printed).
	Force bool
	// DrainGrace is how long to wait after draining before touching the
	// replica.
	DrainGrace time.Duration
	Timeout    time.Duration
	// Drain is what happens to the victim's Node first (flavors whose
	// masters are Nodes).
	Drain NodeDrain
}

// Remove-replica step names.
const (
	StepDrainTarget  = "drain-lb-target"
	StepRemoveFromLB = "remove-from-lb"
	StepMoveLeader   = "move-etcd-leader"
	StepStopReplica  = "stop-replica"
	StepRemoveMember = "remove-etcd-member"
	StepDeleteVM     = "delete-vm"
	StepDemote       = "demote-lb-to-static-ip"
)

// RemoveReplica builds the remove-replica workflow: preflight → drained in
// the LB → snapshot and leadership moved away while the drain grace runs →
// the rest of the grace waited, out of the LB → DNS → the VM stopped
// (deleted) while its member still serves it, when the others keep a
// quorum without it → member removed (never through the victim) → VM and
// disk deleted → when one replica is left, LB demoted back to a static IP.
// A replica whose add was interrupted (a learner, a VM without a member, a
// reserved address only) is removable too.
//
// The drain grace is only a wait for the victim's open connections to
// end; the snapshot (a read of etcd, not through the victim) and the
// leader move (among members that all keep serving) need nothing of it,
// so they run between the drain and the end of its grace instead of
// adding to it. They are still separate steps, journaled in that order,
// and both end before anything destructive (the target's removal, the
// VM's stop, the member's removal) starts.
func RemoveReplica(d *Deps, p RemoveParams) *Workflow {
	if p.Timeout <= 0 {
		p.Timeout = 5 * time.Minute
	}
	x := &removal{d: d, p: p, victim: p.Name, inst: d.Provider.Instances(), ms: d.Flavor()}
	wf := &Workflow{Name: "remove-replica", Params: map[string]string{"name": p.Name}, Check: x.check}
	if p.Force {
		wf.Params["force"] = "true"
	}
	p.Drain.params(wf.Params)
	wf.Steps = []Step{x.preflight()}
	if nodeDrainerOf(d) != nil {
		// The Node drained before anything else changes (kubeadm's docs:
		// drain, then reset), right after the preflight.
		wf.Steps = append(wf.Steps, drainNodeStep(d, x.victim, p.Drain))
	}
	wf.Steps = append(wf.Steps, x.drainTarget(), x.snapshot(), x.moveLeader(), x.removeFromLB(), x.dns())
	if j := joinerOf(d); j != nil {
		// The victim's machine is released only once the flavor's tool
		// has left it (kubeadm reset, after its member is gone), so it is
		// not stopped early: a metal host is never powered off, and a
		// reset before the member's removal would retry against, or
		// wipe, the live cluster.
		if st := d.FlavorCaps().APIServerStopper; st != nil {
			wf.Steps = append(wf.Steps, stopAPIServerStep(d, st, x.victim))
		}
		wf.Steps = append(wf.Steps, x.removeMember(), leaveStep(d, j, x.victim))
	} else {
		wf.Steps = append(wf.Steps, x.stopReplica(), x.removeMember())
	}
	wf.Steps = append(wf.Steps, x.deleteVM(), x.demote(), verifyStep(d, func(*Run) string { return x.victim }, false))
	return wf
}

// removal is one remove-replica run's steps: the replica removed (victim)
// and what they share.
type removal struct {
	d      *Deps
	p      RemoveParams
	victim string
	inst   providers.Instances
	ms     flavors.Flavor
}

// memberOf returns the victim's member of cluster, the members, and
// whether it has one.
func (x *removal) memberOf(ctx context.Context, cli *etcdmember.Client, cluster string, r *Run) (etcdmember.Member, []etcdmember.Member, bool, error) {
	members, err := cli.Members(ctx)
	if err != nil {
		return etcdmember.Member{}, nil, false, err
	}
	m, ok := x.d.findMember(members, cluster, x.victim, keyAddress.Get(r))
	return m, members, ok, nil
}

// memberOffLeadership is memberOf, leadership moved away first when the
// victim's member leads.
func (x *removal) memberOffLeadership(ctx context.Context, cli *etcdmember.Client, cluster string, r *Run) (etcdmember.Member, []etcdmember.Member, bool, error) {
	m, members, ok, err := x.memberOf(ctx, cli, cluster, r)
	if err == nil && ok && m.Leader {
		err = moveLeaderAway(ctx, cli, cluster, x.victim, m, x.p.Timeout, r)
	}
	return m, members, ok, err
}

// lastReplica refuses removing the cluster's last replica.
func (x *removal) lastReplica(rs []providers.Replica) error {
	if len(rs) == 1 && rs[0].Name == x.victim {
		return errkind.Errorf(errkind.FailedPrecondition, "%s is the last replica of cluster %s; removing it would destroy the cluster (use 'hamaster local down' or delete the cluster instead)", x.victim, x.d.Cluster)
	}
	return nil
}

// check is the workflow's check before it starts.
func (x *removal) check(ctx context.Context) error {
	rs, err := x.inst.List(ctx)
	if err != nil {
		return err
	}
	return x.lastReplica(rs)
}

func (x *removal) preflight() Step {
	return Step{
		Name: StepPreflight, Always: true,
		Plan: []string{"instances.List", "etcd MemberList + Status (not through the victim)", "refuse removing the last replica or one whose removal would lose quorum (--force overrides)", "when the flavor renders consumers from the endpoint (kubeadm): refuse removing a master one of them still names (--force overrides)"},
		Run:  x.runPreflight,
	}
}

func (x *removal) runPreflight(ctx context.Context, r *Run) error {
	victim := x.victim
	rs, err := x.inst.List(ctx)
	if err != nil {
		return err
	}
	var found bool
	var others int
	for _, rep := range rs {
		if rep.Name == victim {
			found = true
			if err := keyAddress.Set(r, rep.Address); err != nil {
				return err
			}
		} else {
			others++
		}
	}
	if err := x.lastReplica(rs); err != nil {
		return err
	}
	if others == 0 {
		return errkind.Errorf(errkind.FailedPrecondition, "cluster %s has no replica other than %s", x.d.Cluster, victim)
	}
	cli, err := x.d.Etcd(ctx, victim)
	if err != nil {
		return err
	}
	defer cli.Close()
	m, members, isMember, err := x.memberOf(ctx, cli, providers.EtcdMain, r)
	if err != nil {
		return errkind.Errorf(errkind.FailedPrecondition, "etcd unreachable: %w", err)
	}
	// Neither VM nor member nor an address recorded by this run or by the
	// add-replica it supersedes: the name is wrong.
	if !found && !isMember && keyAddress.Get(r) == "" {
		names := make([]string, 0, len(rs))
		for _, rep := range rs {
			names = append(names, rep.Name)
		}
		return errkind.Errorf(errkind.InvalidArgument, "--name: no replica, etcd member or reservation named %q in cluster %s (replicas: %v)", victim, x.d.Cluster, names)
	}
	if isMember {
		if err := canRemoveSettled(ctx, members, m.ID, func(ctx context.Context) ([]etcdmember.Member, error) {
			_, ms, _, err := x.memberOf(ctx, cli, providers.EtcdMain, r)
			return ms, err
		}, VoterSettle, 2*time.Second, r.Waiting); err != nil {
			if r.Param("force") != "true" {
				return fmt.Errorf("%w (pass --force to remove anyway, risking etcd quorum loss)", err)
			}
			r.Info("--force: removing %s although %v — etcd may lose quorum", victim, err)
		}
	}
	return refusePinned(ctx, x.d, r, victim)
}

// drainTarget starts the drain grace; remove-from-lb waits for what is
// left of it after the snapshot and the leader move.
func (x *removal) drainTarget() Step {
	return Step{
		Name: StepDrainTarget, Plan: []string{"when the victim is an LB target: loadBalancer.DrainTarget(name), and the end of its drain grace period (" + x.p.DrainGrace.String() + ") recorded: the next steps run during the grace"},
		Run: func(ctx context.Context, r *Run) error {
			l := x.d.Provider.LoadBalancer()
			t, registered, err := lbTarget(ctx, l, x.victim)
			if err != nil || !registered {
				return err
			}
			grace := drainGrace(r, x.victim, t, x.p.DrainGrace)
			if err := l.DrainTarget(ctx, x.victim); err != nil {
				return fmt.Errorf("drain %s: %w", x.victim, err)
			}
			// Recorded after the drain: a crash in between drains again
			// and restarts the grace, never shortens it.
			return keyDrainUntil.Set(r, r.now().Add(grace))
		},
	}
}

func (x *removal) snapshot() Step {
	return Step{
		Name: StepSnapshot, Plan: []string{"etcd Maintenance.Snapshot (not through the victim) → <state-dir>/<cluster>/snapshots/ (during the drain grace)"},
		Run: func(ctx context.Context, r *Run) error {
			return takeSnapshot(ctx, x.d, r, "remove-"+x.victim, x.victim)
		},
	}
}

func (x *removal) moveLeader() Step {
	return Step{
		Name: StepMoveLeader, Plan: []string{"etcd MoveLeader to the most up-to-date healthy voter, in each etcd cluster the victim leads (during the drain grace)"},
		Run: func(ctx context.Context, r *Run) error {
			for _, c := range x.ms.EtcdClusters() {
				cli, err := x.ms.EtcdCluster(ctx, c, x.victim)
				if err != nil {
					return err
				}
				_, _, _, err = x.memberOffLeadership(ctx, cli, c, r)
				cli.Close()
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func (x *removal) removeFromLB() Step {
	return Step{
		Name: StepRemoveFromLB, Plan: []string{"loadBalancer.DrainTarget(name) unless drain-lb-target did", fmt.Sprintf("wait what is left of the drain grace period (%s) after drain-lb-target", x.p.DrainGrace), "loadBalancer.RemoveTarget(name)", "no LB and the victim holds the static IP: move the IP to a survivor"},
		Run: x.runRemoveFromLB,
	}
}

func (x *removal) runRemoveFromLB(ctx context.Context, r *Run) error {
	d, victim := x.d, x.victim
	l := d.Provider.LoadBalancer()
	exists, err := lb.Exists(ctx, l)
	if err != nil {
		return err
	}
	if exists {
		t, registered, err := lbTarget(ctx, l, victim)
		if err != nil {
			return err
		}
		if registered {
			if err := finishDrain(ctx, r, l, victim, t, x.p.DrainGrace); err != nil {
				return err
			}
		}
		return l.RemoveTarget(ctx, victim)
	}
	_, holder, err := d.Provider.StaticIP().Get(ctx)
	if err != nil || holder != victim {
		return err
	}
	survivor, err := survivingReplica(ctx, d, victim)
	if err != nil {
		return err
	}
	if err := d.Provider.StaticIP().Detach(ctx); err != nil {
		return err
	}
	return d.Provider.StaticIP().Attach(ctx, survivor)
}

func (x *removal) dns() Step {
	return Step{
		Name: StepDNS, Plan: []string{"when the cluster has a DNS name: dns.Upsert(name A <static IP>) so no record names the victim", "wait until in sync"},
		Run: func(ctx context.Context, r *Run) error {
			d := x.d
			ep, err := LoadEndpoint(d.StateDir, d.Cluster)
			if err != nil || ep.DNSName == "" {
				return err
			}
			recs, err := d.records(ep.DNSKind)
			if err != nil {
				return err
			}
			ip, _, err := d.Provider.StaticIP().Get(ctx)
			if err != nil {
				return err
			}
			id, err := recs.Upsert(ctx, ep.DNSName, []string{ip})
			if err != nil {
				return fmt.Errorf("dns upsert %s: %w", ep.DNSName, err)
			}
			r.Waiting("DNS change %s for %s", id, ep.DNSName)
			return recs.Wait(ctx, id)
		},
	}
}

// stopReplica: the victim's apiserver is drained, but it still serves its
// kept-alive clients (controllers, watches) until it stops; removing its
// etcd member first leaves it serving them without a store: their
// requests hang until their own timeouts, and a real kube-apiserver
// cannot shut down gracefully either (its shutdown waits on etcd). So the
// VM goes first (the apiserver stops before its member, as the node stops
// them), whenever the others' healthy voters keep a quorum of the voters
// counted with the victim: the member, down, is then removed through
// them. Otherwise (2 voters, or one already unhealthy) stopping it would
// lose quorum and MemberRemove could not commit: the member is removed
// first, as before, and the VM deleted after.
func (x *removal) stopReplica() Step {
	return Step{
		Name: StepStopReplica, Plan: []string{"when the other healthy voters keep a quorum without the victim's member (in each etcd cluster): instances.Delete(name) before its member is removed, so its drained apiserver stops while its member still serves it"},
		Run: x.runStopReplica,
	}
}

func (x *removal) runStopReplica(ctx context.Context, r *Run) error {
	victim := x.victim
	if _, err := x.inst.Get(ctx, victim); errors.Is(err, errkind.NotFound) {
		return nil
	} else if err != nil {
		return err
	}
	for _, c := range x.ms.EtcdClusters() {
		cli, err := x.ms.EtcdCluster(ctx, c, victim)
		if err != nil {
			return err
		}
		// Leadership may have come back during the drain grace (an
		// election): moved again, so the stop does not cost the survivors
		// an election.
		m, members, ok, err := x.memberOffLeadership(ctx, cli, c, r)
		cli.Close()
		if err != nil {
			return err
		}
		if !ok || m.Learner {
			continue // nothing for quorum to lose
		}
		voters, healthy := 0, 0
		for _, o := range members {
			if !o.Learner {
				voters++
				if o.Healthy && o.ID != m.ID {
					healthy++
				}
			}
		}
		if healthy < etcdmember.Quorum(voters) {
			r.Info("keeping %s running until its etcd %s member is removed: without it %d healthy of %d voters, quorum %d", victim, c, healthy, voters, etcdmember.Quorum(voters))
			return nil
		}
	}
	r.Waiting("stopping %s before removing its etcd member", victim)
	if err := x.inst.Delete(ctx, victim); err != nil {
		return fmt.Errorf("stop %s before removing its etcd member: %w", victim, err)
	}
	return nil
}

func (x *removal) removeMember() Step {
	return Step{
		Name: StepRemoveMember, Plan: []string{"etcd MemberRemove(victim) through a surviving member, in each etcd cluster (events first, main last)"},
		Run: func(ctx context.Context, r *Run) error {
			cs := x.ms.EtcdClusters()
			for i := len(cs) - 1; i >= 0; i-- {
				cli, err := x.ms.EtcdCluster(ctx, cs[i], x.victim)
				if err != nil {
					return err
				}
				// Still serving, it may lead again (see stop-replica).
				m, _, ok, err := x.memberOffLeadership(ctx, cli, cs[i], r)
				if err == nil && ok {
					if err = cli.Remove(ctx, m.ID); err != nil {
						err = fmt.Errorf("remove etcd %s member %s of %s: %w", cs[i], m.Name, x.victim, err)
					}
				}
				cli.Close()
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func (x *removal) deleteVM() Step {
	return Step{
		Name: StepDeleteVM, Plan: []string{"instances.Delete(name): VM, data disk, address"},
		Run: func(ctx context.Context, r *Run) error {
			if err := x.inst.Delete(ctx, x.victim); err != nil {
				return err
			}
			if err := x.inst.ReleaseAddress(ctx, x.victim); err != nil {
				return err
			}
			return removeReplicaSecrets(x.d, x.victim)
		},
	}
}

func (x *removal) demote() Step {
	return Step{
		Name: StepDemote, Plan: []string{"when one replica is left: loadBalancer.Delete", "staticIP.Attach(last replica)"},
		Run: func(ctx context.Context, r *Run) error {
			d := x.d
			rs, err := x.inst.List(ctx)
			if err != nil {
				return err
			}
			if len(rs) != 1 {
				return nil
			}
			if ep, keep, err := keepsEndpoint(ctx, d); err != nil {
				return err
			} else if keep {
				r.Info("the load balancer stays, on %s alone: the masters record %s as the cluster's endpoint ('hamaster endpoint set' moves it)", rs[0].Name, ep)
				return nil
			}
			// Demote even when no LB is visible: Delete also removes
			// pieces of one whose creation was interrupted.
			r.Waiting("demoting the load balancer: static IP back to %s", rs[0].Name)
			return lb.Demote(ctx, d.Provider.StaticIP(), d.Provider.LoadBalancer(), rs[0].Name)
		},
	}
}

// SupersedeAdd lets remove-replica replace the journal of an unfinished
// add-replica of the same replica (rolling the partial add back), carrying
// over the address it reserved.
func SupersedeAdd(name string) func(prev, next *Journal) bool {
	return func(prev, next *Journal) bool {
		if prev.Workflow != "add-replica" || prev.Params["name"] != name {
			return false
		}
		if a := keyAddress.In(prev); a != "" {
			keyAddress.Put(next, a)
		}
		return true
	}
}

// survivingReplica picks a running replica other than victim whose apiserver
// is ready.
func survivingReplica(ctx context.Context, d *Deps, victim string) (string, error) {
	rs, err := d.Provider.Instances().List(ctx)
	if err != nil {
		return "", err
	}
	var errs []error
	for _, r := range rs {
		if r.Name == victim || !r.Running() {
			continue
		}
		if _, err := d.Probe(ctx, d.Provider.APIServerURL(r), "/readyz"); err != nil {
			errs = append(errs, err)
			continue
		}
		return r.Name, nil
	}
	return "", errkind.Errorf(errkind.FailedPrecondition, "no ready replica other than %s: %w", victim, errors.Join(errs...))
}

// drainGrace is the grace period to wait after draining victim: none when
// the load balancer already sees it unhealthy (a dead replica gets no
// traffic, so there is nothing to drain), which the run says.
func drainGrace(r *Run, victim string, t lb.TargetHealth, grace time.Duration) time.Duration {
	if t.Healthy || grace == 0 {
		return grace
	}
	reason := t.Reason
	if reason == "" {
		reason = "unhealthy"
	}
	r.Info("%s is not healthy in the load balancer (%s): it gets no traffic, so the %s drain grace is skipped", victim, reason, grace)
	return 0
}

// lbTarget returns victim's target in the load balancer and whether it is
// one; no load balancer is no target.
func lbTarget(ctx context.Context, l lb.LoadBalancer, victim string) (lb.TargetHealth, bool, error) {
	st, err := l.Get(ctx) // one call: lb.Exists would Get it first
	if errors.Is(err, errkind.NotFound) {
		return lb.TargetHealth{}, false, nil
	}
	if err != nil {
		return lb.TargetHealth{}, false, fmt.Errorf("look up load balancer: %w", err)
	}
	for _, t := range st.Targets {
		if t.Name == victim {
			return t, true, nil
		}
	}
	return lb.TargetHealth{}, false, nil
}

// finishDrain waits for what is left of victim's drain grace: until the
// end drain-lb-target recorded (never longer than grace, whatever the
// clock did), then ends the drain (lb.FinishDrain: an LB that lets open
// connections outlive it closes them). Without a recorded end (a journal
// of an older release, in which this step drained), it drains and waits
// the whole grace, as then.
func finishDrain(ctx context.Context, r *Run, l lb.LoadBalancer, victim string, t lb.TargetHealth, grace time.Duration) error {
	until, err := keyDrainUntil.Get(r)
	if err != nil {
		grace = drainGrace(r, victim, t, grace)
		if grace > 0 {
			r.Waiting("drain grace period of %s for %s", grace, victim)
		}
		return lb.Drain(ctx, l, victim, grace)
	}
	left := min(until.Sub(r.now()), grace)
	if left > 0 {
		r.Waiting("rest of the drain grace period for %s: %s of %s", victim, left.Round(time.Millisecond), grace)
	}
	return lb.FinishDrain(ctx, l, victim, left)
}

// moveLeaderAway moves etcd cluster c's leadership from victim's member m
// to another voter, bounded by timeout.
func moveLeaderAway(ctx context.Context, cli *etcdmember.Client, c, victim string, m etcdmember.Member, timeout time.Duration, r *Run) error {
	mctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	to, err := cli.MoveLeader(mctx, m.ID)
	if err != nil {
		return fmt.Errorf("move etcd %s leadership away from %s: %w", c, victim, err)
	}
	r.Info("etcd %s leadership moved from %s to %x", c, victim, to)
	return nil
}

// pinFinderOf is the flavor's PinFinder, nil when its tool renders no
// consumer from the cluster's endpoint.
func pinFinderOf(d *Deps) flavors.PinFinder {
	return d.FlavorCaps().PinFinder
}

// refusePinned refuses to remove victim while a consumer of the control
// plane that the flavor's tool rendered from the endpoint still names
// victim's own address (kube-proxy's kubeconfig, another master's
// admin.conf: flavors.PinFinder): once victim is gone they reach no
// apiserver. errkind.FailedPrecondition (exit 3) lists them and the
// command that moves them; --force removes victim anyway, with a
// warning naming them. A flavor without the capability is not asked.
// The check is made before anything changes: a run resumed after its
// first change finishes the removal.
func refusePinned(ctx context.Context, d *Deps, r *Run, victim string) error {
	pf := pinFinderOf(d)
	if pf == nil || r.Changed() {
		return nil
	}
	force := r.Param("force") == "true"
	pins, err := pf.Pinned(ctx, victim)
	if err != nil {
		if !force {
			return errkind.Errorf(errkind.FailedPrecondition, "cannot tell whether anything still names %s's own address: %v (pass --force to remove it anyway)", victim, err)
		}
		r.Info("--force: removing %s without knowing whether anything still names its own address: %v", victim, err)
		return nil
	}
	ps := flavors.PinsOf(pins, victim)
	if len(ps) == 0 {
		return nil
	}
	what := make([]string, 0, len(ps))
	var fixes []string
	for _, p := range ps {
		what = append(what, p.String())
		if !slices.Contains(fixes, p.Fix) {
			fixes = append(fixes, p.Fix)
		}
	}
	if !force {
		return errkind.Errorf(errkind.FailedPrecondition, "%s's own address is still named where the cluster's endpoint should be, and they would reach no apiserver once it is gone: %s; repoint them first: %s (or pass --force to remove %s anyway)",
			victim, strings.Join(what, "; "), strings.Join(fixes, "; "), victim)
	}
	r.Info("--force: removing %s although its own address is still named, and they will reach no apiserver once it is gone: %s (%s repoints them)", victim, strings.Join(what, "; "), strings.Join(fixes, "; "))
	return nil
}

// VoterSettle bounds how long the removal's preflight judges etcd's
// voters again when one did not answer its status: a member whose
// status missed its bound on a busy host (etcdmember.DefaultStatusTimeout)
// is not a member that is down. A voter still not answering after it is
// refused as before.
const VoterSettle = 20 * time.Second

// canRemoveSettled is etcdmember.CanRemove of id in members; when that
// refuses while a voter is unhealthy, the members are read again (every
// every, for at most settle; waiting says so) until it allows the
// removal or no voter is unhealthy. The last refusal is returned.
func canRemoveSettled(ctx context.Context, members []etcdmember.Member, id uint64, read func(context.Context) ([]etcdmember.Member, error), settle, every time.Duration, waiting func(string, ...any)) error {
	err := etcdmember.CanRemove(members, id)
	if err == nil || !unhealthyVoter(members) {
		return err
	}
	waiting("etcd's voters to answer again (%v)", err)
	wctx, cancel := context.WithTimeout(ctx, settle)
	defer cancel()
	judged := false // the first check is the judgment above
	// Until's own error (settle is over) leaves err, the last judgment.
	_ = wait.Until(wctx, every, "etcd's voters to answer", func() (bool, error) {
		if !judged {
			judged = true
			return false, nil
		}
		ms, rerr := read(wctx)
		if rerr != nil {
			return false, nil // judged again at the next tick
		}
		err = etcdmember.CanRemove(ms, id)
		return err == nil || !unhealthyVoter(ms), nil
	})
	return err
}

// unhealthyVoter reports whether a voter among members is unhealthy.
func unhealthyVoter(members []etcdmember.Member) bool {
	for _, m := range members {
		if !m.Learner && !m.Healthy {
			return true
		}
	}
	return false
}
