package metal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/fsutil"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers/metal/vip"
)

// The metal provider's load balancer is the VIP of package vip on the
// masters themselves, as kubeadm's docs/ha-considerations.md lays it out
// ("keepalived and haproxy", option 1: the services on the operating
// system; package vip says why not option 2's static pods): keepalived (VRRP)
// on every target holds the inventory's VIP, HAProxy beside each
// apiserver listens on VIP:EndpointPort and balances to every target's
// apiserver with /readyz checks. There is no device in front of the
// masters: "creating the load balancer" is writing those files on each
// target over SSH and starting their systemd units (vip.Apply).
//
// What exists is recorded in the state directory
// (<state-dir>/<cluster>/metal-lb.json, written atomically before the
// hosts are changed): lb.Exists and a resumed workflow read it, and a
// crash half-way through Create or AddTarget leaves a record whose
// targets the next call converges to (every operation below re-renders
// every target's files, which vip.Apply makes idempotent).

// lbState is the record of the load balancer.
type lbState struct {
	VIP string `json:"vip"`
	// Targets are the masters behind the VIP, in the order they came.
	Targets []lb.Target `json:"targets"`
	// Drained are targets HAProxy sends no new connection to
	// (vip.Config.Drained: kept across HAProxy's reloads).
	Drained []string `json:"drained,omitempty"`
}

func (s *lbState) target(name string) int {
	return slices.IndexFunc(s.Targets, func(t lb.Target) bool { return t.Name == name })
}

func (p *Provider) lbFile() string { return filepath.Join(p.stateDir, "metal-lb.json") }

// loadLB reads the record; nil when there is none.
func (p *Provider) loadLB() (*lbState, error) {
	b, err := os.ReadFile(p.lbFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p.lbFile(), err)
	}
	var s lbState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("read %s: %w", p.lbFile(), err)
	}
	return &s, nil
}

// saveLB writes the record atomically (nil: removes it).
func (p *Provider) saveLB(s *lbState) error {
	if s == nil {
		if err := os.Remove(p.lbFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", p.lbFile(), err)
		}
		return nil
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p.stateDir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if err := fsutil.WriteFileAtomic(p.lbFile(), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", p.lbFile(), err)
	}
	return nil
}

// Bounds of the waits the load balancer makes on its own.
const (
	// holderWait bounds Create's wait for a holder: keepalived's check
	// must rise (2 × 1 s) and its Master_Down timer pass (3 adverts of
	// 0.5 s) after its unit started it.
	holderWait = 2 * time.Minute
	// handoffWait bounds a planned move of the VIP, which takes seconds
	// (docs/metal.md has the lab's figures).
	handoffWait = 30 * time.Second
)

// loadBalancer implements lb.LoadBalancer with keepalived and HAProxy on
// the masters (package vip).
type loadBalancer struct{ p *Provider }

var (
	_ lb.SessionEnder   = loadBalancer{}
	_ lb.LoadBalancer   = loadBalancer{}
	_ lb.PromotionNoter = loadBalancer{}
	_ lb.StaticIP       = staticIP{}
)

// executor runs the VIP's operations on one host through the provider's
// SSH connection (RunOnMachine and UploadToMachine: the inventory's user,
// the connection dropped and dialed again after a transport failure).
type executor struct {
	p    *Provider
	host string
}

// The VIP's commands change only its own files and daemons (vip.ConfigDir,
// vip.RunDir, its keepalived and HAProxy manifests and processes), none
// of what a probe of the host reads (the claim, kube-apiserver's
// manifest, etcd's data): the host's kept probe stays (probeCache).

func (e executor) Run(ctx context.Context, cmd string) ([]byte, []byte, error) {
	return e.p.run(ctx, e.host, cmd)
}

func (e executor) Upload(ctx context.Context, path string, data []byte, mode os.FileMode) error {
	return e.p.upload(ctx, e.host, path, data, mode)
}

// vipHost is the host named name as package vip reaches it.
func (p *Provider) vipHost(name string) vip.Host {
	var x vip.Executor = executor{p, name}
	if p.execFor != nil {
		x = p.execFor(name)
	}
	return vip.Host{Name: name, Exec: x, Log: p.log}
}

// vipConfig is host's configuration for the record s: every target an
// HAProxy server, in the inventory's order, and every control-plane host
// of the inventory a VRRP peer (vip.Config.Peers), so that keepalived's
// configuration stays the same as masters come and go — a reload that
// changes its peers from none to some (the first AddTarget) or back (the
// last RemoveTarget but one) restarts the VRRP instance and drops the VIP
// for seconds. Each host's priority is
// vip.DefaultPriority of its place among the inventory's control-plane
// hosts (vipPriority), stable too. The VRRP
// router id is the VIP's last byte, so that two clusters of one
// inventory (or one segment) with VIPs in one /24 never share one: each
// master accepts adverts from every control-plane host of the
// inventory.
func (p *Provider) vipConfig(s *lbState, host string) vip.Config {
	masters := make([]vip.Master, 0, len(s.Targets))
	for _, t := range s.Targets {
		masters = append(masters, vip.Master{Name: t.Name, Address: t.Address})
	}
	slices.SortStableFunc(masters, func(a, b vip.Master) int { return p.inventoryIndex(a.Name) - p.inventoryIndex(b.Name) })
	var peers []string
	for _, h := range p.inv.ControlPlaneHosts() {
		if a, err := netip.ParseAddr(h.Address); err == nil && a.Is4() && h.Address != s.VIP {
			peers = append(peers, a.String())
		}
	}
	return vip.Config{
		VIP: s.VIP, Host: host, Masters: masters, Peers: peers, Priority: p.vipPriority(host),
		RouterID: routerID(s.VIP), APIServerPort: p.apiPort, FrontendPort: p.vipPort, Drained: slices.Clone(s.Drained),
	}
}

// vipPriority is host's VRRP priority: vip.DefaultPriority of its place
// among the inventory's control-plane hosts.
func (p *Provider) vipPriority(host string) int {
	cp := p.inv.ControlPlaneHosts()
	// A host not among them (none is: targets are control-plane hosts)
	// would share the lowest priority (DefaultPriority clamps i).
	i := slices.IndexFunc(cp, func(h Host) bool { return h.Name == host })
	if i < 0 {
		i = len(cp)
	}
	return vip.DefaultPriority(i, len(cp))
}

// routerID is VRRP's virtual_router_id for vip: its last byte, or
// vip.DefaultRouterID when that is 0.
func routerID(vipAddr string) int {
	a, err := netip.ParseAddr(vipAddr)
	if err != nil || !a.Is4() || a.As4()[3] == 0 {
		return vip.DefaultRouterID
	}
	return int(a.As4()[3])
}

// inventoryIndex is name's place in the inventory (the hosts not in it
// after every one that is).
func (p *Provider) inventoryIndex(name string) int {
	if i := slices.IndexFunc(p.inv.Hosts, func(h Host) bool { return h.Name == name }); i >= 0 {
		return i
	}
	return len(p.inv.Hosts)
}

// applyAll renders the record on the named targets (all when names is
// nil), one after another, stopping at the first failure.
func (p *Provider) applyAll(ctx context.Context, s *lbState, names []string) error {
	for _, t := range s.Targets {
		if names != nil && !slices.Contains(names, t.Name) {
			continue
		}
		if _, err := vip.Apply(ctx, p.vipHost(t.Name), p.vipConfig(s, t.Name)); err != nil {
			return fmt.Errorf("vip on %s: %w", t.Name, err)
		}
	}
	return nil
}

// holders lists the targets that hold the VIP, asking each in parallel;
// a target that cannot be asked is in errs.
func (p *Provider) holders(ctx context.Context, s *lbState) (held []string, errs []error) {
	res := make([]struct {
		held bool
		err  error
	}, len(s.Targets))
	var wg sync.WaitGroup
	for i, t := range s.Targets {
		wg.Go(func() {
			res[i].held, res[i].err = vip.Holder(ctx, p.vipHost(t.Name), s.VIP)
		})
	}
	wg.Wait()
	for i, r := range res {
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.held:
			held = append(held, s.Targets[i].Name)
		}
	}
	return held, errs
}

// others are the vip.Hosts of every target but name.
func (p *Provider) others(s *lbState, name string) []vip.Host {
	var hs []vip.Host
	for _, t := range s.Targets {
		if t.Name != name {
			hs = append(hs, p.vipHost(t.Name))
		}
	}
	return hs
}

// handoff moves the VIP off name when name holds it and another target
// can take it: a planned move (vip.Handoff: keepalived's maintenance
// file puts name into FAULT, the best backup takes the VIP within its
// skew time). name keeps refusing the VIP until AddTarget takes it back.
// When no other master takes the VIP in time, name may hold it again
// (vip.Resume) and the error says so.
func (p *Provider) handoff(ctx context.Context, s *lbState, name string) error {
	h := p.vipHost(name)
	held, err := vip.Holder(ctx, h, s.VIP)
	if err != nil || !held {
		return err
	}
	peers := p.others(s, name)
	if len(peers) == 0 {
		p.log.Warn("metal: the VIP's holder is the only master: nobody to hand it to", "host", name)
		return nil
	}
	hctx, cancel := context.WithTimeout(ctx, handoffWait)
	defer cancel()
	start := time.Now()
	if err := vip.Handoff(hctx, h, peers, s.VIP); err != nil {
		// Nobody took it (every other master failing its check): let name
		// hold it again rather than leave the VIP to nobody.
		if rerr := vip.Resume(ctx, h); rerr != nil {
			p.log.Warn("metal: resume after a failed handoff", "host", name, "err", rerr)
		}
		return fmt.Errorf("planned move of the VIP %s off %s: %w", s.VIP, name, err)
	}
	p.log.Info("metal: VIP handed off", "from", name, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// unreachable reports whether err says the host could not be reached at
// all (no SSH connection), as opposed to a command that failed on it.
func unreachable(err error) bool {
	return errors.Is(err, errkind.Unavailable) || errors.Is(err, context.DeadlineExceeded)
}

// Get implements lb.LoadBalancer: the recorded VIP and targets, their
// health as the VIP holder's HAProxy sees it ("show stat": the HAProxy
// that serves the clients), or, with no holder, the first target's whose
// HAProxy answers; Status.Holder is the master holding the VIP.
func (l loadBalancer) Get(ctx context.Context) (lb.Status, error) {
	p := l.p
	s, err := p.loadLB()
	if err != nil {
		return lb.Status{}, err
	}
	if s == nil {
		return lb.Status{}, errkind.Errorf(errkind.NotFound, "no load balancer: the VIP %s is not set up on the masters (%s)", p.inv.VIP, p.lbFile())
	}
	st := lb.Status{IP: s.VIP}
	held, _ := p.holders(ctx, s)
	st.Holder = strings.Join(held, ",")
	order := slices.Clone(held)
	for _, t := range s.Targets {
		if !slices.Contains(order, t.Name) {
			order = append(order, t.Name)
		}
	}
	var view []lb.TargetHealth
	var why []string
	for _, name := range order {
		ts, err := vip.Status(ctx, p.vipHost(name))
		if err == nil {
			view, st.Viewer = ts, name
			break
		}
		why = append(why, err.Error())
	}
	for _, t := range s.Targets {
		th := lb.TargetHealth{Name: t.Name, Address: t.Address}
		switch i := slices.IndexFunc(view, func(x lb.TargetHealth) bool { return x.Name == t.Name }); {
		case st.Viewer == "":
			th.Reason = "no master's HAProxy answers: " + strings.Join(why, "; ")
		case i < 0:
			th.Reason = "not in " + st.Viewer + "'s HAProxy configuration yet"
		default:
			th = view[i]
			th.Address = t.Address
		}
		if slices.Contains(s.Drained, t.Name) {
			th.Draining = true
		}
		st.Targets = append(st.Targets, th)
	}
	return st, nil
}

// CheckCreate implements lb.CreateChecker: before anything changes (the
// first add-replica's preflight, with the master cloned and the host being
// added, whose Address may be empty: the inventory's), every target must
// be a control-plane host of the inventory with keepalived and HAProxy
// recent enough and systemd (vip.CheckDaemons), the VIP must lie inside
// the subnet of the interface each target's address is on
// (vip.CheckPrefix), and, unless a create has begun, nobody may answer ARP
// for it (vip.CheckUnused) and VRRP's adverts must reach between every two
// targets (vip.CheckVRRP; kubeadm's ha-considerations.md leaves this to
// the operator, and where they do not arrive each master takes the VIP).
func (l loadBalancer) CheckCreate(ctx context.Context, ip string, targets []lb.Target) error {
	p := l.p
	if ip == "" {
		ip = p.inv.VIP
	}
	peers := make([]vip.VRRPPeer, 0, len(targets))
	for _, t := range targets {
		if t.Address == "" {
			// The host being added: refused here as its
			// ReserveAddress would refuse it, before anything changes.
			h, err := p.freeHost(ctx, t.Name, "")
			if err != nil {
				return err
			}
			t.Address = h.Address
		}
		d, err := vip.CheckDaemons(ctx, p.vipHost(t.Name))
		if err != nil {
			return err
		}
		if err := vip.CheckPrefix(ctx, p.vipHost(t.Name), t.Address, ip); err != nil {
			return err
		}
		peers = append(peers, vip.VRRPPeer{Host: p.vipHost(t.Name), Address: t.Address, Keepalived: d.KeepalivedPath})
	}
	// Nobody answers for it yet: asked from one target, the segment being
	// one (VRRP's adverts need it). Once a create has begun (its record
	// is written before any keepalived starts) the holder may be ours, and
	// the VIP's keepalived may run on the router id the probe would use.
	s, err := p.loadLB()
	if err != nil || s != nil || len(targets) == 0 {
		return err
	}
	if err := vip.CheckUnused(ctx, peers[0].Host, peers[0].Address, ip); err != nil {
		return err
	}
	return vip.CheckVRRP(ctx, routerID(ip), peers)
}

// Create implements lb.LoadBalancer: the record is written, the VIP's
// files applied on every target (their units start keepalived and
// HAProxy), and Create returns once exactly one target holds the VIP. ip
// must be the inventory's VIP ("" means it). An existing load balancer
// gets the targets it lacks.
func (l loadBalancer) Create(ctx context.Context, ip string, targets []lb.Target) error {
	p := l.p
	if ip == "" {
		ip = p.inv.VIP
	}
	if ip != p.inv.VIP {
		return errkind.Errorf(errkind.InvalidArgument, "create the load balancer on %s: the metal provider's is the VIP %s (--%s or the inventory's vip)", ip, p.inv.VIP, OptVIP)
	}
	if len(targets) == 0 {
		return errkind.Errorf(errkind.InvalidArgument, "create the load balancer on %s: no target", ip)
	}
	s, err := p.loadLB()
	if err != nil {
		return err
	}
	if s == nil {
		s = &lbState{VIP: ip}
	}
	for _, t := range targets {
		if err := p.addToRecord(s, t); err != nil {
			return err
		}
	}
	// Every config checked before any host changes.
	for _, t := range s.Targets {
		if _, err := p.vipConfig(s, t.Name).Validate(); err != nil {
			return err
		}
	}
	if err := p.saveLB(s); err != nil {
		return err
	}
	if err := p.applyAll(ctx, s, nil); err != nil {
		return err
	}
	for _, t := range targets {
		if err := vip.Resume(ctx, p.vipHost(t.Name)); err != nil {
			return err
		}
	}
	return p.awaitHolder(ctx, s)
}

// addToRecord adds t to s (or updates its address), taking it out of
// draining; t must be a control-plane host of the inventory.
func (p *Provider) addToRecord(s *lbState, t lb.Target) error {
	h, err := p.inv.Host(t.Name)
	if err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "load balancer target %s: %w", t.Name, err)
	}
	if t.Address == "" {
		t.Address = h.Address
	}
	if i := s.target(t.Name); i >= 0 {
		s.Targets[i] = t
	} else {
		s.Targets = append(s.Targets, t)
	}
	s.Drained = slices.DeleteFunc(s.Drained, func(n string) bool { return n == t.Name })
	return nil
}

// awaitHolder waits until exactly one target holds the VIP.
func (p *Provider) awaitHolder(ctx context.Context, s *lbState) error {
	wctx, cancel := context.WithTimeout(ctx, holderWait)
	defer cancel()
	var held []string
	var errs []error
	err := wait.Until(wctx, 250*time.Millisecond, "one master to hold the VIP "+s.VIP, func() (bool, error) {
		held, errs = p.holders(wctx, s)
		return len(held) == 1, nil
	})
	if err != nil {
		hint := fmt.Sprintf("keepalived runs as the unit %s: is it active on the masters (systemctl status %s), and their apiservers' /readyz 200?", vip.KeepalivedUnit, vip.KeepalivedUnit)
		if len(held) > 1 {
			// Each took the VIP: they do not hear each other's adverts.
			hint = fmt.Sprintf("each of %s took it: VRRP adverts (IP protocol 112, unicast between the masters' addresses) do not reach between them; allow them in every master's firewall and the network between, then run the command again", strings.Join(held, ", "))
		}
		return errkind.Mark(errkind.Unavailable, fmt.Errorf("the VIP %s: holders %v (%s): %w %w", s.VIP, held, hint, err, errors.Join(errs...)))
	}
	p.log.Info("metal: VIP held", "vip", s.VIP, "holder", held[0])
	return nil
}

// AddTarget implements lb.LoadBalancer: t joins every other target's
// keepalived (a unicast peer) and HAProxy (a server), then gets the
// VIP's files itself, and is taken out of draining (its maintenance file
// reset, HAProxy's server state ready). The others first: keepalived on
// t, started before any peer sends it adverts, would hear nobody and take
// the VIP after its Master_Down timer — two holders (unicast VRRP: the
// holder adverts only to the peers it knows).
func (l loadBalancer) AddTarget(ctx context.Context, t lb.Target) error {
	p := l.p
	s, err := p.loadLB()
	if err != nil {
		return err
	}
	if s == nil {
		return errkind.Errorf(errkind.NotFound, "add %s to the load balancer: there is none (%s)", t.Name, p.lbFile())
	}
	if err := p.addToRecord(s, t); err != nil {
		return err
	}
	for _, x := range s.Targets {
		if _, err := p.vipConfig(s, x.Name).Validate(); err != nil {
			return err
		}
	}
	// The new master can run the VIP's daemons before any other master
	// hears of it.
	if _, err := vip.CheckDaemons(ctx, p.vipHost(t.Name)); err != nil {
		return err
	}
	if err := p.saveLB(s); err != nil {
		return err
	}
	var rest []string
	for _, x := range s.Targets {
		if x.Name != t.Name {
			rest = append(rest, x.Name)
		}
	}
	if err := p.applyAll(ctx, s, rest); err != nil {
		return err
	}
	if err := p.applyAll(ctx, s, []string{t.Name}); err != nil {
		return err
	}
	if err := vip.Resume(ctx, p.vipHost(t.Name)); err != nil {
		return err
	}
	// A drain made at run time (DrainTarget) lasts until a reload: undo it
	// on every HAProxy that runs.
	return p.onEveryHAProxy(ctx, s, t.Name, "", vip.Ready)
}

// onEveryHAProxy runs op for server on every target's HAProxy, all at
// once (each a session, whose login can take a second). One that does
// not run or does not know the server is skipped (it serves nothing of
// it), with a warning saying skipped when that is not "".
func (p *Provider) onEveryHAProxy(ctx context.Context, s *lbState, server, skipped string, op func(context.Context, vip.Host, string) error) error {
	errs := make([]error, len(s.Targets))
	var wg sync.WaitGroup
	for i, t := range s.Targets {
		wg.Go(func() { errs[i] = op(ctx, p.vipHost(t.Name), server) })
	}
	wg.Wait()
	var failed []error
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, errkind.Unavailable), errors.Is(err, errkind.NotFound):
			if skipped != "" {
				p.log.Warn("metal: "+skipped, "host", s.Targets[i].Name, "server", server, "err", err)
			}
		default:
			failed = append(failed, err)
		}
	}
	return errors.Join(failed...)
}

// DrainTarget implements lb.LoadBalancer: when name holds the VIP and
// another target can take it, the VIP is handed off first (a planned
// move: docs/metal.md, "The VIP"); then every master's HAProxy sends name
// no new connection (vip.Drain; open ones go on), and the record keeps
// it drained for every later rendering. A HAProxy that does not run is
// left: it serves nothing. Not a target: success.
func (l loadBalancer) DrainTarget(ctx context.Context, name string) error {
	p := l.p
	s, err := p.loadLB()
	if err != nil || s == nil || s.target(name) < 0 {
		return err
	}
	if err := p.handoff(ctx, s, name); err != nil {
		return err
	}
	if !slices.Contains(s.Drained, name) {
		s.Drained = append(s.Drained, name)
		if err := p.saveLB(s); err != nil {
			return err
		}
	}
	if err := p.onEveryHAProxy(ctx, s, name, "drain skipped on a master whose HAProxy does not run or know the server", vip.Drain); err != nil {
		return fmt.Errorf("drain %s: %w", name, err)
	}
	return nil
}

// EndSessions implements lb.SessionEnder: once a drain's grace period
// is over, every master's HAProxy closes the connections still open to
// name (vip.EndSessions), as a cloud LB's draining timeout does; HAProxy
// in TCP mode would otherwise keep a kept-alive client on a drained
// master while its etcd and apiserver are replaced (an in-place upgrade
// answered such clients "etcd failed" on the lab). A HAProxy that does
// not run is left. Not a target: success.
func (l loadBalancer) EndSessions(ctx context.Context, name string) error {
	p := l.p
	s, err := p.loadLB()
	if err != nil || s == nil || s.target(name) < 0 {
		return err
	}
	return p.onEveryHAProxy(ctx, s, name, "sessions left on a master whose HAProxy does not run or know the server", vip.EndSessions)
}

// RemoveTarget implements lb.LoadBalancer: the VIP is handed off when
// name holds it, the VIP's files and daemons are removed from name
// (vip.Remove: nothing of the VIP left on the host), then the other
// targets are rendered without it. name first: while its keepalived
// runs, dropping it from its peers' lists would let it take the VIP
// alongside the holder. A host that cannot be reached is forgotten with
// a warning (its files stay until it comes back and is removed again).
// Not a target: success.
func (l loadBalancer) RemoveTarget(ctx context.Context, name string) error {
	p := l.p
	s, err := p.loadLB()
	if err != nil || s == nil || s.target(name) < 0 {
		return err
	}
	if err := p.handoff(ctx, s, name); err != nil && (errors.Is(err, vip.ErrNoOtherHolder) || !unreachable(err)) {
		return err
	}
	if err := vip.Remove(ctx, p.vipHost(name), s.VIP); err != nil {
		if !unreachable(err) {
			return err
		}
		p.log.Warn("metal: the removed master does not answer: its VIP files stay there", "host", name, "err", err)
	}
	s.Targets = slices.DeleteFunc(s.Targets, func(t lb.Target) bool { return t.Name == name })
	s.Drained = slices.DeleteFunc(s.Drained, func(n string) bool { return n == name })
	if err := p.saveLB(s); err != nil {
		return err
	}
	return p.applyAll(ctx, s, nil)
}

// Delete implements lb.LoadBalancer: the VIP's files and daemons removed
// from every target (vip.Remove), then the record. No load balancer:
// success. The VIP itself stays the inventory's, held by nobody.
func (l loadBalancer) Delete(ctx context.Context) error {
	p := l.p
	s, err := p.loadLB()
	if err != nil || s == nil {
		return err
	}
	var errs []error
	for _, t := range s.Targets {
		if err := vip.Remove(ctx, p.vipHost(t.Name), s.VIP); err != nil {
			if !unreachable(err) {
				errs = append(errs, err)
				continue
			}
			p.log.Warn("metal: a master does not answer: its VIP files stay there", "host", t.Name, "err", err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delete the load balancer: %w", err)
	}
	return p.saveLB(nil)
}

// PromotionNote implements lb.PromotionNoter: promotion costs no outage
// on metal (the workflow prints it after "outage: ").
func (l loadBalancer) PromotionNote() string {
	return fmt.Sprintf("none: the VIP %s is a new address (keepalived and HAProxy as systemd units on the masters, kubeadm's docs/ha-considerations.md) and the master keeps its own; the endpoint to move to is %s:%d", l.p.inv.VIP, l.p.inv.VIP, l.p.vipPort)
}

// staticIP is the inventory's VIP as the cluster's static IP. On bare
// metal nothing holds it but keepalived, which is the load balancer: the
// address is unattached until the load balancer exists, then the load
// balancer's (Get's holder is always "", as for an LB-owned address).
type staticIP struct{ p *Provider }

var _ lb.HeldByLB = staticIP{}

// HeldByLB implements lb.HeldByLB: only keepalived (the load balancer)
// ever holds the VIP.
func (staticIP) HeldByLB() bool { return true }

// Get implements lb.StaticIP.
func (v staticIP) Get(context.Context) (string, string, error) { return v.p.inv.VIP, "", nil }

// Attach implements lb.StaticIP: a no-op. The VIP is never bound to one
// master outside keepalived (a single master keeps its own address as
// its endpoint until the load balancer exists).
func (staticIP) Attach(context.Context, string) error { return nil }

// Detach implements lb.StaticIP: a no-op, nothing holds the VIP outside
// the load balancer (whose Delete releases it).
func (staticIP) Detach(context.Context) error { return nil }
