package workflows

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/internal/fsutil"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers"
)

// AddParams are add-replica's arguments.
type AddParams struct {
	// Name of the new replica; "" picks <cluster>-master-<3 hex> (or the
	// name an unfinished run recorded).
	Name string
	Zone string
	// DNSKind/DNSName: when DNSName is set, the endpoint's A record is
	// kept pointing at the static IP / LB.
	DNSKind string
	DNSName string
	// Timeout bounds each wait (member caught up, LB healthy).
	Timeout time.Duration
	// Template, when set, adjusts the cloned template (a surge upgrade
	// adds replicas at the new version).
	Template func(providers.Template) providers.Template
}

// NewReplicaName returns <cluster>-master-<3 hex digits>.
func NewReplicaName(cluster string) string {
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-master-%s", cluster, hex.EncodeToString(b)[:3])
}

// Add-replica step names (stable: the journal refers to them).
const (
	StepPreflight      = "preflight"
	StepSnapshot       = "snapshot"
	StepReserveAddress = "reserve-address"
	StepIssueCerts     = "issue-certificates"
	StepAddMember      = "add-etcd-learner"
	StepCreateVM       = "create-vm"
	StepWaitCaughtUp   = "wait-caught-up"
	StepPromoteMember  = "promote-member"
	StepPromoteLB      = "promote-static-ip-to-lb"
	StepAddToLB        = "add-to-lb"
	StepDNS            = "update-dns"
	StepVerify         = "verify"
)

// AddReplica builds the add-replica workflow: preflight → snapshot →
// reserve address → certificates → etcd learner → VM → caught up →
// promote → (first add) static IP to LB → LB target → DNS → verify.
// The member is added as a learner before the VM boots (so the VM can join
// with initial-cluster-state=existing) and promoted only once caught up: a
// learner does not count toward quorum, so growing 1→2 cannot lose quorum
// while the new member is still syncing.
func AddReplica(d *Deps, p AddParams) *Workflow {
	wf := &Workflow{Name: "add-replica", Params: map[string]string{"name": p.Name, "zone": p.Zone, "dns-name": p.DNSName, "dns": p.DNSKind}}
	if p.Timeout <= 0 {
		p.Timeout = 5 * time.Minute
	}
	x := &addition{d: d, p: p, inst: d.Provider.Instances(), ms: d.Flavor()}
	wf.Steps = []Step{x.preflight(), x.snapshot(), x.reserveAddress()}
	if j := joinerOf(d); j != nil {
		// The new master joins with the flavor's own tool, which adds and
		// promotes its member: no learner of hamaster's, no certificates
		// (the masters carry their own). The load balancer comes first,
		// then the conversion to it (a control-plane join needs the
		// cluster's endpoint), then the machine and its join.
		wf.Steps = append(wf.Steps, x.promoteLB(), convertStep(d), x.createVM(), joinStep(d, j, p))
	} else {
		wf.Steps = append(wf.Steps, x.issueCerts(), x.addMember(), x.createVM(), x.waitCaughtUp(), x.promoteMember(), x.promoteLB())
	}
	wf.Steps = append(wf.Steps, x.addToLB(), dnsStep(d, p.DNSKind, p.DNSName), verifyStep(d, addedName, true))
	return wf
}

// addedName is the name of the replica an add-replica run adds.
func addedName(r *Run) string { return r.Param("name") }

// addition is one add-replica run's steps and what they share.
type addition struct {
	d    *Deps
	p    AddParams
	inst providers.Instances
	ms   flavors.Flavor
}

func (x *addition) preflight() Step {
	return Step{
		Name: StepPreflight, Always: true,
		Plan: []string{"instances.List", "etcd MemberList + Status of every member", "refuse if a voter is unhealthy or another learner is pending"},
		Run:  x.runPreflight,
	}
}

func (x *addition) runPreflight(ctx context.Context, r *Run) error {
	d, name := x.d, addedName(r)
	rs, err := x.inst.List(ctx)
	if err != nil {
		return err
	}
	var source string
	for _, rep := range rs {
		if rep.Name != name && rep.Running() && source == "" {
			source = rep.Name
		}
	}
	if source == "" {
		return errkind.Errorf(errkind.FailedPrecondition, "cluster %s has no running replica to clone", d.Cluster)
	}
	members, err := d.members(ctx, name)
	if err != nil {
		return err
	}
	// Our own learner from an interrupted run is expected; any other
	// pending learner or unhealthy voter refuses.
	var others []etcdmember.Member
	for _, m := range members {
		if own, ok := d.findMember([]etcdmember.Member{m}, providers.EtcdMain, name, keyAddress.Get(r)); ok && (own.Learner || own.Name != "") {
			continue
		}
		others = append(others, m)
	}
	if err := etcdmember.CanAddVoter(others); err != nil {
		return err
	}
	// Clone a healthy voter's replica, never the new one.
	healthy := map[string]bool{}
	for _, rep := range rs {
		if m, ok := d.findMember(others, providers.EtcdMain, rep.Name, rep.Address); ok && !m.Learner && m.Healthy {
			healthy[rep.Name] = true
		}
	}
	if !healthy[source] {
		source = ""
		for _, rep := range rs {
			if rep.Running() && healthy[rep.Name] && rep.Name != name {
				source = rep.Name
				break
			}
		}
	}
	if source == "" {
		return errkind.Errorf(errkind.FailedPrecondition, "no replica with a healthy etcd voter to clone")
	}
	if err := checkFirstLB(ctx, d, rs, source, name); err != nil {
		return err
	}
	if keySource.Get(r) == "" {
		return keySource.Set(r, source)
	}
	return nil
}

func (x *addition) snapshot() Step {
	return Step{
		Name: StepSnapshot, Plan: []string{"etcd Maintenance.Snapshot → <state-dir>/<cluster>/snapshots/"},
		Run: func(ctx context.Context, r *Run) error {
			return takeSnapshot(ctx, x.d, r, "add-"+addedName(r), addedName(r))
		},
	}
}

func (x *addition) reserveAddress() Step {
	return Step{
		Name: StepReserveAddress, Plan: []string{"instances.ReserveAddress(name)"},
		Run: func(ctx context.Context, r *Run) error {
			addr, err := x.inst.ReserveAddress(ctx, addedName(r), r.Param("zone"))
			if err != nil {
				return err
			}
			r.Info("%s will use address %s", addedName(r), addr)
			return keyAddress.Set(r, addr)
		},
	}
}

func (x *addition) issueCerts() Step {
	return Step{
		Name: StepIssueCerts, Plan: []string{"issue etcd peer/server and apiserver serving certificates signed by the cluster CA"},
		Run: func(ctx context.Context, r *Run) error {
			_, err := replicaFiles(ctx, x.d, addedName(r), keyAddress.Get(r), r.Param("dns-name"))
			return err
		},
	}
}

func (x *addition) addMember() Step {
	return Step{
		Name: StepAddMember, Plan: []string{"etcd MemberAddAsLearner(member, peer URL) in each etcd cluster the masters run (kube-up's: main and events)"},
		Run: func(ctx context.Context, r *Run) error {
			for _, c := range x.ms.EtcdClusters() {
				if err := addLearner(ctx, x.d, r, c); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func (x *addition) createVM() Step {
	return Step{
		Name: StepCreateVM, Plan: []string{"instances.Get(source) → clone its template (INITIAL_ETCD_CLUSTER rewritten, ETCD_INITIAL_CLUSTER_STATE=existing)", "instances.Create(name, template) on a fresh data disk"},
		Run: x.runCreateVM,
	}
}

func (x *addition) runCreateVM(ctx context.Context, r *Run) error {
	d, name := x.d, addedName(r)
	if rep, err := x.inst.Get(ctx, name); err == nil && rep.Running() {
		return nil
	}
	src, err := x.inst.Get(ctx, keySource.Get(r))
	if err != nil {
		return fmt.Errorf("read template of %s: %w", keySource.Get(r), err)
	}
	members := map[string][]etcdmember.Member{}
	for _, c := range x.ms.EtcdClusters() {
		var err error
		if members[c], err = d.clusterMembers(ctx, c, name); err != nil {
			return err
		}
	}
	files, err := replicaFiles(ctx, d, name, keyAddress.Get(r), r.Param("dns-name"))
	if err != nil {
		return err
	}
	tmpl, err := x.ms.CloneTemplate(ctx, src.Template, name, keyAddress.Get(r), members, files)
	if err != nil {
		return fmt.Errorf("clone the template of %s: %w", keySource.Get(r), err)
	}
	if x.p.Template != nil {
		tmpl = x.p.Template(tmpl)
	}
	_, err = x.inst.Create(ctx, name, r.Param("zone"), tmpl)
	return err
}

// eachMember runs f on the new replica's member of every etcd cluster the
// masters run, bounded by the run's timeout each.
func (x *addition) eachMember(ctx context.Context, r *Run, f func(ctx context.Context, c string, cli *etcdmember.Client, id uint64) error) error {
	for _, c := range x.ms.EtcdClusters() {
		err := withMember(ctx, x.d, r, c, func(ctx context.Context, cli *etcdmember.Client, id uint64) error {
			wctx, cancel := context.WithTimeout(ctx, x.p.Timeout)
			defer cancel()
			return f(wctx, c, cli, id)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (x *addition) waitCaughtUp() Step {
	return Step{
		Name: StepWaitCaughtUp, Plan: []string{"etcd Status of the learner until its raft index reaches the leader's, in each etcd cluster"},
		Run: func(ctx context.Context, r *Run) error {
			return x.eachMember(ctx, r, func(ctx context.Context, c string, cli *etcdmember.Client, id uint64) error {
				r.Waiting("etcd %s learner of %s to catch up", c, addedName(r))
				return cli.WaitCaughtUpObserved(ctx, id, r.Observe)
			})
		},
	}
}

func (x *addition) promoteMember() Step {
	return Step{
		Name: StepPromoteMember, Plan: []string{"etcd MemberPromote(learner), in each etcd cluster"},
		Run: func(ctx context.Context, r *Run) error {
			return x.eachMember(ctx, r, func(ctx context.Context, _ string, cli *etcdmember.Client, id uint64) error {
				return cli.Promote(ctx, id)
			})
		},
	}
}

func (x *addition) promoteLB() Step {
	return Step{
		Name: StepPromoteLB, Plan: promotePlan(x.d),
		Run: func(ctx context.Context, r *Run) error {
			d := x.d
			exists, err := lb.Exists(ctx, d.Provider.LoadBalancer())
			if err != nil || exists {
				return err
			}
			ip, holder, err := d.Provider.StaticIP().Get(ctx)
			if err != nil {
				return err
			}
			if holder == "" {
				holder = keyLBFirst.Get(r)
			}
			if holder == "" {
				holder = keySource.Get(r)
			}
			if err := keyLBFirst.Set(r, holder); err != nil {
				return err
			}
			first, err := x.inst.Get(ctx, holder)
			if err != nil {
				return err
			}
			r.Waiting("promoting static IP %s from %s to a load balancer", ip, holder)
			wctx, cancel := context.WithTimeout(ctx, x.p.Timeout)
			defer cancel()
			return lb.Promote(wctx, d.Provider.StaticIP(), d.Provider.LoadBalancer(), lb.Target{Name: first.Name, Address: first.Address})
		},
	}
}

func (x *addition) addToLB() Step {
	return Step{
		Name: StepAddToLB, Plan: []string{"loadBalancer.AddTarget(name)", "wait until the LB reports it healthy"},
		Run: func(ctx context.Context, r *Run) (err error) {
			d, name := x.d, addedName(r)
			if err := d.Provider.LoadBalancer().AddTarget(ctx, lb.Target{Name: name, Address: keyAddress.Get(r)}); err != nil {
				return err
			}
			r.Waiting("the load balancer to see %s healthy", name)
			// The replica itself failing ends the wait at once, with its cause.
			fctx, failed, stop := watchFailure(ctx, d, name)
			defer stop()
			defer func() {
				if ferr := failed(); ferr != nil {
					err = ferr
				}
			}()
			wctx, cancel := context.WithTimeout(fctx, x.p.Timeout)
			defer cancel()
			return lb.WaitHealthyObserved(wctx, d.Provider.LoadBalancer(), name, r.Observe)
		},
	}
}

// addLearner adds the replica's member to cluster as a learner (again:
// AddLearner finds one already added by its peer URL) and journals its ID.
func addLearner(ctx context.Context, d *Deps, r *Run, cluster string) error {
	cli, err := d.Flavor().EtcdCluster(ctx, cluster, r.Param("name"))
	if err != nil {
		return err
	}
	defer cli.Close()
	member, peer := d.Flavor().EtcdMember(cluster, r.Param("name"), keyAddress.Get(r))
	m, err := cli.AddLearner(ctx, member, peer)
	if err != nil {
		return fmt.Errorf("add etcd %s learner %s (%s): %w", cluster, member, peer, err)
	}
	return memberIDKey(cluster).Set(r, m.IDHex())
}

// withMember connects to cluster (not through the replica itself) and
// resolves the replica's member ID there.
func withMember(ctx context.Context, d *Deps, r *Run, cluster string, f func(context.Context, *etcdmember.Client, uint64) error) error {
	cli, ms, err := d.etcdMembers(ctx, cluster, []string{r.Param("name")}, nil)
	if err != nil {
		return err
	}
	defer cli.Close()
	m, ok := d.findMember(ms, cluster, r.Param("name"), keyAddress.Get(r))
	if !ok {
		member, peer := d.Flavor().EtcdMember(cluster, r.Param("name"), keyAddress.Get(r))
		return errkind.Errorf(errkind.NotFound, "etcd %s member %s of %s (peer %s) is gone", cluster, member, r.Param("name"), peer)
	}
	return f(ctx, cli, m.ID)
}

// replicaFiles issues (or re-reads, when still valid for the wanted SANs)
// a replica's certificates, kept under the cluster's pki dir.
func replicaFiles(ctx context.Context, d *Deps, name, address, dnsName string) (map[string][]byte, error) {
	if address == "" {
		return nil, errors.New("no address reserved")
	}
	issuer := d.FlavorCaps().ReplicaCertIssuer
	if issuer == nil {
		return nil, nil // the new master gets its own from CloneTemplate
	}
	ca, err := d.CA()
	if err != nil {
		return nil, err
	}
	shared, err := clusterSANs(ctx, d, dnsName)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(PKIDir(d.StateDir, d.Cluster), "replicas", name)
	if files, ok := readFiles(dir); ok {
		if pair, err := certs.LoadPair(filepath.Join(dir, providers.FileAPIServerCert), filepath.Join(dir, providers.FileAPIServerKey)); err == nil {
			want := shared
			want.ReplicaIPs = []string{address}
			want.ReplicaNames = []string{name}
			dnsNames, ips, err := want.SANs()
			if err == nil {
				if renew, _ := certs.NeedsRenewal(pair.Cert, dnsNames, ips, 30*24*time.Hour, time.Now()); !renew {
					return files, nil
				}
			}
		}
	}
	files, err := issuer.IssueReplicaCertificates(ca, name, address, shared)
	if err != nil {
		return nil, fmt.Errorf("issue the certificates of %s: %w", name, err)
	}
	for f, b := range files {
		if err := fsutil.WriteFileAtomic(filepath.Join(dir, f), b, 0o600); err != nil {
			return nil, err
		}
	}
	return files, nil
}

func readFiles(dir string) (map[string][]byte, bool) {
	names := []string{providers.FileCACert, providers.FileEtcdPeerCert, providers.FileEtcdPeerKey, providers.FileEtcdServerCert, providers.FileEtcdServerKey, providers.FileAPIServerCert, providers.FileAPIServerKey}
	files := map[string][]byte{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, false
		}
		files[n] = b
	}
	return files, true
}

// takeSnapshot saves an etcd snapshot once per run (recorded in the
// journal) and reports its path.
func takeSnapshot(ctx context.Context, d *Deps, r *Run, label string, exclude ...string) error {
	if p := keySnapshot.Get(r); p != "" {
		if _, err := os.Stat(p); err == nil {
			return nil
		}
	}
	cli, err := d.Etcd(ctx, exclude...)
	if err != nil {
		return err
	}
	defer cli.Close()
	path := filepath.Join(d.clusterDir(), "snapshots", fmt.Sprintf("%s-%s.db", time.Now().UTC().Format("20060102T150405Z"), label))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "state dir not writable: %w", err)
	}
	info, err := cli.SaveSnapshot(ctx, path)
	if err != nil {
		return fmt.Errorf("etcd snapshot: %w", err)
	}
	r.Info("etcd snapshot saved: %s (%d bytes, sha256 %s)", path, info.Size, info.SHA256[:16])
	if err := pruneSnapshots(d.StateDir, d.Cluster, d.KeepSnapshots, path); err != nil {
		return err
	}
	return keySnapshot.Set(r, path)
}

func dnsStep(d *Deps, kind, name string) Step {
	plan := []string{"no --dns-name: nothing to do"}
	if name != "" {
		plan = []string{fmt.Sprintf("dns(%s).Upsert(%s A <static IP>)", cmp.Or(kind, "static"), name), "wait until the change is in sync"}
	}
	return Step{
		Name: StepDNS, Plan: plan,
		Run: func(ctx context.Context, r *Run) error {
			name := r.Param("dns-name")
			kind := cmp.Or(r.Param("dns"), "static")
			if name == "" {
				return nil
			}
			recs, err := d.records(kind)
			if err != nil {
				return err
			}
			ip, _, err := d.Provider.StaticIP().Get(ctx)
			if err != nil {
				return err
			}
			id, err := recs.Upsert(ctx, name, []string{ip})
			if err != nil {
				return fmt.Errorf("dns upsert %s: %w", name, err)
			}
			r.Waiting("DNS change %s for %s", id, name)
			if err := recs.Wait(ctx, id); err != nil {
				return err
			}
			return saveEndpoint(d.StateDir, d.Cluster, Endpoint{DNSKind: kind, DNSName: name})
		},
	}
}

// verifyStep checks the end state: the endpoint answers /readyz and, when
// present, the replica's member is a healthy voter.
func verifyStep(d *Deps, name func(*Run) string, wantMember bool) Step {
	return Step{
		Name: StepVerify, Always: true, Plan: []string{"GET https://<static IP>:<apiserver port>/readyz", "etcd MemberList of each cluster: the replica's member is a healthy voter (or gone, after a removal)"},
		Run: func(ctx context.Context, r *Run) error {
			ip, _, err := d.Provider.StaticIP().Get(ctx)
			if err != nil {
				return err
			}
			base := fmt.Sprintf("https://%s:%d", ip, providers.EndpointPortOf(d.Provider))
			if err := waitFor(ctx, r, "the endpoint "+base+"/readyz", 100*time.Millisecond, func(ctx context.Context) error {
				_, err := d.Probe(ctx, base, "/readyz")
				return err
			}); err != nil {
				return err
			}
			exclude := []string{}
			if !wantMember {
				exclude = append(exclude, name(r))
			}
			// Waited for within the step's time, not judged on one read: a
			// member's status has seconds to answer, and a busy host (or
			// a member applying the snapshot it just caught up with) can
			// miss them while the member is fine. Each read has the step's
			// time, not waitFor's few seconds a check: reaching etcd may
			// take an SSH login through a bastion.
			for _, c := range d.Flavor().EtcdClusters() {
				r.Waiting("etcd %s member of %s", c, name(r))
				var last error
				err := wait.Until(ctx, 200*time.Millisecond, "etcd "+c+" member of "+name(r), func() (bool, error) {
					if last = verifyMember(ctx, d, c, name(r), wantMember, exclude); last != nil {
						r.Observe(last.Error())
					}
					return last == nil, nil
				})
				if err != nil {
					// The member's own state says more than the timeout.
					return cmp.Or(last, err)
				}
			}
			return nil
		},
	}
}

// verifyMember checks that replica is a healthy voter of cluster (or, with
// !want, not a member).
func verifyMember(ctx context.Context, d *Deps, cluster, replica string, want bool, exclude []string) error {
	ms, err := d.clusterMembers(ctx, cluster, exclude...)
	if err != nil {
		return err
	}
	m, found := d.findMember(ms, cluster, replica, "")
	switch {
	case want && (!found || m.Learner || !m.Healthy):
		return fmt.Errorf("etcd %s member of %s is not a healthy voter: %+v", cluster, replica, m)
	case !want && found:
		return fmt.Errorf("etcd %s member of %s is still in the cluster", cluster, replica)
	}
	return nil
}

// promotePlan is the promotion step's plan, with what the provider says
// the promotion costs clients of the static IP (lb.PromotionNoter).
func promotePlan(d *Deps) []string {
	plan := []string{"first add only: staticIP.Detach", "loadBalancer.Create(static IP, [replica that held it]) with /readyz health checks", "wait until the LB reports it healthy"}
	if n := d.ProviderCaps().LBPromotionNoter; n != nil {
		if note := n.PromotionNote(); note != "" {
			plan = append(plan, "outage: "+note)
		}
	}
	return plan
}

// checkFirstLB asks a load balancer that can check itself
// (lb.CreateChecker) whether the first add's promote-static-ip-to-lb
// would give a reachable endpoint, before anything changes: its targets
// are the master cloned and the replica being added (its address not
// known yet); once the load balancer exists there is nothing to check.
func checkFirstLB(ctx context.Context, d *Deps, rs []providers.Replica, source, adding string) error {
	cc := d.ProviderCaps().LBCreateChecker
	if cc == nil {
		return nil
	}
	if _, err := d.Provider.LoadBalancer().Get(ctx); !errors.Is(err, errkind.NotFound) {
		return err
	}
	ip, _, err := d.Provider.StaticIP().Get(ctx)
	if err != nil {
		return err
	}
	for _, rep := range rs {
		if rep.Name == source {
			return cc.CheckCreate(ctx, ip, []lb.Target{{Name: rep.Name, Address: rep.Address}, {Name: adding}})
		}
	}
	return nil
}
