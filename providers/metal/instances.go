package metal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// Claim is the file on a host saying which cluster's master it is (or is
// becoming: written by Create, before the flavor joins it). A host with
// no claim that runs a control plane is a master built before hamaster
// came (kubeadm init's master 0): it is the cluster's when it is the
// inventory's.
const Claim = "/var/lib/hamaster/claim"

// Control-plane files a host is probed for. A host runs a control plane
// when its static pod directory holds kube-apiserver's manifest (kubeadm:
// /etc/kubernetes/manifests, cmd/kubeadm/app/constants
// KubernetesDir/ManifestsSubDirName); etcd data is /var/lib/etcd
// (kubeadm's etcd.local.dataDir default).
const (
	apiserverManifest = "/etc/kubernetes/manifests/kube-apiserver.yaml"
	etcdDataDir       = "/var/lib/etcd"
)

// probeScript prints what List needs of a host, one key=value a line.
const probeScript = `c=$(cat ` + Claim + ` 2>/dev/null | head -1)
echo "claim=$c"
if [ -f ` + apiserverManifest + ` ]; then echo apiserver=yes; else echo apiserver=no; fi
if [ -n "$(ls -A ` + etcdDataDir + ` 2>/dev/null)" ]; then echo etcd=yes; else echo etcd=no; fi`

// probeTimeout bounds one host's probe: a host that does not answer
// within it is unreachable (remote.DefaultTimeout bounds a new
// connection's dial and handshake; a kept connection to a host that died
// would otherwise wait for its keepalives).
const probeTimeout = 10 * time.Second

// hostState is one host as a probe saw it.
type hostState struct {
	host      Host
	reachable bool
	err       error
	claim     string // the cluster named in the claim, "" for none
	apiserver bool   // runs a control plane
	etcdData  bool
}

// ours reports whether the host is one of this cluster's masters. A host
// with no claim is when it runs a control plane, or when this cluster
// recorded it as one (adopt) and it still keeps etcd data: master 0 with
// its apiserver's manifest set aside for a while (remove-replica's
// stop-replica, a restart after rotate-certs or recover), which must
// stay listed so that a resumed command finds it.
func (s hostState) ours(cluster string, recorded bool) bool {
	return s.claim == cluster || (s.claim == "" && (s.apiserver || (recorded && s.etcdData)))
}

// state is the replica state of a host of this cluster that answers: a
// claimed host without a control plane is being joined.
func (s hostState) state() string {
	if !s.apiserver && s.claim != "" {
		return providers.StateProvisioning
	}
	return providers.StateRunning
}

// adopt records a master that runs a control plane with no claim (one
// its own tool built: kubeadm init's master 0) as this cluster's the
// first time it is listed, so that it stays listed while its apiserver's
// manifest is set aside (ours) and, like a claimed host, as stopped when
// it stops answering. Only the state directory's record changes; the
// host is left as it is. Idempotent.
func (p *Provider) adopt(s hostState, recorded bool) error {
	if recorded || s.claim != "" || !s.apiserver {
		return nil
	}
	if err := p.recordClaim(s.host.Name, true); err != nil {
		return fmt.Errorf("record master %s as cluster %s's: %w", s.host.Name, p.cluster, err)
	}
	return nil
}

// probe reads every control-plane host's state, in parallel.
func (p *Provider) probe(ctx context.Context) []hostState {
	hosts := p.inv.ControlPlaneHosts()
	out := make([]hostState, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() {
			out[i] = p.probeHost(ctx, h)
		})
	}
	wg.Wait()
	return out
}

// probeCache keeps each host's last probe that answered, within one
// process (one command's run): List, Get and FreeHost are called many
// times a run, and on a real host every SSH session can take a second.
// A probe is reused only while nothing else was done on its host: every
// command run there that is not providers.ReadOnly (before it starts and
// after it ends) and every connection dropped counts a generation, and a
// probe made across a generation's change is not kept. Decisions that
// change a host (claim, release, forget) probe it afresh (probeNow).
type probeCache struct {
	mu   sync.Mutex
	gen  map[string]uint64
	kept map[string]keptProbe
}

type keptProbe struct {
	st  hostState
	gen uint64
}

// changed counts a generation on host: its kept probe is dropped.
func (c *probeCache) changed(host string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == nil {
		c.gen = map[string]uint64{}
	}
	c.gen[host]++
	delete(c.kept, host)
}

// get is host's kept probe, and the generation a new probe starts at.
func (c *probeCache) get(host string) (hostState, bool, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.kept[host]
	return k.st, ok && k.gen == c.gen[host], c.gen[host]
}

// keep keeps st, probed from generation gen, unless host changed since.
func (c *probeCache) keep(host string, st hostState, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen[host] != gen {
		return
	}
	if c.kept == nil {
		c.kept = map[string]keptProbe{}
	}
	c.kept[host] = keptProbe{st, gen}
}

// probeHost is h's state: the kept probe when nothing was done on h
// since it was made and h still answers on its connection (a ping: a
// round trip, no session), otherwise a new one (kept when h answered).
func (p *Provider) probeHost(ctx context.Context, h Host) hostState {
	st, ok, gen := p.probes.get(h.Name)
	if ok {
		err := p.ping(ctx, h.Name)
		if err == nil {
			return st
		}
		p.probes.changed(h.Name)
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			// No answer within the probe's bound on a live
			// connection: a probe would wait as long again.
			return hostState{host: h, err: err}
		}
	}
	st = p.probeNow(ctx, h)
	if st.reachable {
		p.probes.keep(h.Name, st, gen)
	}
	return st
}

// probeNow probes h over SSH, one session.
func (p *Provider) probeNow(ctx context.Context, h Host) hostState {
	st := hostState{host: h}
	ctx, cancel := context.WithTimeout(providers.ReadOnly(ctx), probeTimeout)
	defer cancel()
	stdout, _, err := p.RunOnMachine(ctx, h.Name, probeScript)
	if err != nil {
		st.err = err
		return st
	}
	st.reachable = true
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "claim":
			st.claim = strings.TrimSpace(v)
		case "apiserver":
			st.apiserver = v == "yes"
		case "etcd":
			st.etcdData = v == "yes"
		}
	}
	return st
}

// instances implements providers.Instances over the inventory's
// control-plane hosts.
type instances struct{ p *Provider }

// List implements providers.Instances: the hosts this cluster claims,
// and those that run a control plane with no claim (master 0, built by
// its own tool; recorded as this cluster's when first listed, see
// adopt). A claimed or recorded host that does not answer SSH is listed as
// stopped, as a cloud lists a VM that is down; an unclaimed one that
// does not answer cannot be told apart from a free one, and is left out
// with a warning.
func (in *instances) List(ctx context.Context) ([]providers.Replica, error) {
	known, err := in.p.loadClaims()
	if err != nil {
		return nil, err
	}
	var out []providers.Replica
	for _, st := range in.p.probe(ctx) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		switch {
		case st.reachable && st.ours(in.p.cluster, known[st.host.Name]):
			if err := in.p.adopt(st, known[st.host.Name]); err != nil {
				return nil, err
			}
			out = append(out, in.p.replica(st.host, st.state()))
		case !st.reachable && known[st.host.Name]:
			out = append(out, in.p.replica(st.host, providers.StateStopped))
		case !st.reachable:
			in.p.log.Warn("metal: host does not answer SSH; not listed", "host", st.host.Name, "err", st.err)
		}
	}
	slices.SortFunc(out, func(a, b providers.Replica) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (p *Provider) replica(h Host, state string) providers.Replica {
	return providers.Replica{Name: h.Name, Zone: h.Zone, Address: h.Address, State: state,
		Template: providers.Template{Machine: map[string]string{"host": h.Name}}}
}

// Get implements providers.Instances.
func (in *instances) Get(ctx context.Context, name string) (providers.Replica, error) {
	h, err := in.p.inv.Host(name)
	if err != nil {
		return providers.Replica{}, errkind.Errorf(errkind.NotFound, "replica %s: %w", name, err)
	}
	known, err := in.p.loadClaims()
	if err != nil {
		return providers.Replica{}, err
	}
	st := in.p.probeHost(ctx, h)
	switch {
	case st.reachable && st.ours(in.p.cluster, known[name]):
		if err := in.p.adopt(st, known[name]); err != nil {
			return providers.Replica{}, err
		}
		return in.p.replica(h, st.state()), nil
	case !st.reachable && known[name]:
		return in.p.replica(h, providers.StateStopped), nil
	case !st.reachable:
		return providers.Replica{}, errkind.Errorf(errkind.Unavailable, "host %s does not answer: %w", name, st.err)
	}
	return providers.Replica{}, errkind.Errorf(errkind.NotFound, "host %s is not a master of cluster %s", name, in.p.cluster)
}

// ReserveAddress implements providers.Instances: the host's own address.
// The host must be a free control-plane host of the inventory (in zone,
// when one is given): not a master of any cluster, no etcd data left,
// answering SSH. Idempotent: this cluster's own claim is accepted.
func (in *instances) ReserveAddress(ctx context.Context, name, zone string) (string, error) {
	h, err := in.p.freeHost(ctx, name, zone)
	if err != nil {
		return "", err
	}
	if err := in.p.recordClaim(name, true); err != nil {
		return "", err
	}
	return h.Address, nil
}

// freeHost is the inventory's control-plane host name (in zone, unless
// zone is ""), reachable and free to become this cluster's new master.
func (p *Provider) freeHost(ctx context.Context, name, zone string) (Host, error) {
	h, err := p.inv.Host(name)
	if err != nil {
		return Host{}, errkind.Errorf(errkind.InvalidArgument, "--name %s: %w (the metal provider's replicas are the inventory's hosts)", name, err)
	}
	if !h.ControlPlane() {
		return Host{}, errkind.Errorf(errkind.InvalidArgument, "--name %s: the host's role is %s; a master runs only on a %s host", name, h.Role, RoleControlPlane)
	}
	if zone != "" && h.Zone != zone {
		return Host{}, errkind.Errorf(errkind.InvalidArgument, "--zone %s: host %s is in zone %q", zone, name, h.Zone)
	}
	if err := p.probeNow(ctx, h).free(p.cluster); err != nil {
		return Host{}, err
	}
	return h, nil
}

// free says why a host cannot become this cluster's new master, nil when
// it can (or already is becoming one).
func (s hostState) free(cluster string) error {
	h := s.host.Name
	switch {
	case !s.reachable:
		return errkind.Errorf(errkind.FailedPrecondition, "host %s does not answer SSH: %v", h, s.err)
	case s.claim != "" && s.claim != cluster:
		return errkind.Errorf(errkind.FailedPrecondition, "host %s is claimed by cluster %q (%s)", h, s.claim, Claim)
	case s.apiserver && s.claim == "":
		return errkind.Errorf(errkind.FailedPrecondition, "host %s already runs a control plane (%s) that hamaster did not put there", h, apiserverManifest)
	case s.etcdData && s.claim == "":
		return errkind.Errorf(errkind.FailedPrecondition, "host %s keeps etcd data in %s: clean it (kubeadm reset) before it joins", h, etcdDataDir)
	}
	return nil
}

// FreeHost is the first control-plane host, in the inventory's order,
// that can become a new master (in zone, when given): what add-replica
// takes when no --name is given.
func (p *Provider) FreeHost(ctx context.Context, zone string) (string, error) {
	known, err := p.loadClaims()
	if err != nil {
		return "", err
	}
	var why []error
	for _, st := range p.probe(ctx) {
		if zone != "" && st.host.Zone != zone {
			continue
		}
		if st.ours(p.cluster, known[st.host.Name]) {
			continue // already a master of this cluster
		}
		if err := st.free(p.cluster); err != nil {
			why = append(why, err)
			continue
		}
		return st.host.Name, nil
	}
	return "", errkind.Errorf(errkind.FailedPrecondition, "no free %s host in the inventory%s: %w", RoleControlPlane, inZone(zone), errors.Join(why...))
}

func inZone(z string) string {
	if z == "" {
		return ""
	}
	return " in zone " + z
}

// ReleaseAddress implements providers.Instances: the reservation is
// forgotten (the host's address stays the host's).
func (in *instances) ReleaseAddress(_ context.Context, name string) error {
	return in.p.recordClaim(name, false)
}

// Create implements providers.Instances: the host is claimed for the
// cluster (Claim written on it). Nothing boots: the flavor joins it. The
// template is not written: a metal master is configured by its flavor's
// tool (kubeadm join), not by a template on the machine.
func (in *instances) Create(ctx context.Context, name, zone string, _ providers.Template) (providers.Replica, error) {
	if _, err := in.ReserveAddress(ctx, name, zone); err != nil {
		return providers.Replica{}, err
	}
	script := fmt.Sprintf("mkdir -p %s && printf '%%s\\n' %s > %s.tmp && mv -f %s.tmp %s",
		dirOf(Claim), remote.ShellQuote(in.p.cluster), Claim, Claim, Claim)
	if _, _, err := in.p.RunOnMachine(ctx, name, script); err != nil {
		return providers.Replica{}, fmt.Errorf("claim host %s: %w", name, err)
	}
	return in.Get(ctx, name)
}

// Recreate implements providers.Instances: metal hosts are not re-imaged;
// their flavor upgrades them in place.
func (in *instances) Recreate(_ context.Context, name string, _ providers.Template) (providers.Replica, error) {
	return providers.Replica{}, errkind.Errorf(errkind.FailedPrecondition, "host %s: the metal provider does not re-image hosts; the cluster's flavor upgrades its masters in place", name)
}

// Delete implements providers.Instances: the host is released (its claim
// removed), never powered off. It refuses while the host still runs a
// control plane or keeps etcd data: the flavor leaves first (kubeadm
// reset), so a released host is clean. Absent (not ours) is success.
func (in *instances) Delete(ctx context.Context, name string) error {
	h, err := in.p.inv.Host(name)
	if err != nil {
		return nil // not a host of the inventory: nothing of ours
	}
	known, err := in.p.loadClaims()
	if err != nil {
		return err
	}
	st := in.p.probeNow(ctx, h)
	if !st.reachable {
		return errkind.Errorf(errkind.Unavailable, "release host %s: it does not answer SSH: %v", name, st.err)
	}
	if !st.ours(in.p.cluster, known[name]) {
		return in.p.recordClaim(name, false)
	}
	if st.apiserver || st.etcdData {
		return errkind.Errorf(errkind.FailedPrecondition, "release host %s: it still runs a control plane (%s) or keeps etcd data (%s); the flavor leaves first", name, apiserverManifest, etcdDataDir)
	}
	if _, _, err := in.p.RunOnMachine(ctx, name, "rm -f "+Claim+" && rmdir "+dirOf(Claim)+" 2>/dev/null; true"); err != nil {
		return fmt.Errorf("release host %s: %w", name, err)
	}
	return in.p.recordClaim(name, false)
}

var _ providers.Forgetter = (*instances)(nil)

// Forget implements providers.Forgetter: a host that does not answer SSH
// is dropped from this cluster's record (recover leaves it out of the
// rebuilt cluster). Its claim and control-plane files stay on it, so it
// lists as this cluster's master again once it answers, and
// remove-replica then resets and releases it. A host that answers is
// refused: Delete releases it clean.
func (in *instances) Forget(ctx context.Context, name string) error {
	h, err := in.p.inv.Host(name)
	if err != nil {
		return nil
	}
	if st := in.p.probeNow(ctx, h); st.reachable {
		return errkind.Errorf(errkind.FailedPrecondition, "forget host %s: it answers SSH; release it clean instead (remove-replica)", name)
	}
	in.p.log.Warn("metal: a host that does not answer is forgotten; its files stay on it", "host", name)
	return in.p.recordClaim(name, false)
}

func dirOf(p string) string { return p[:strings.LastIndex(p, "/")] }
