// Package vip is the bare-metal cluster endpoint: a VIP held by keepalived
// (VRRP) with HAProxy on every master balancing TCP to every apiserver, as
// kubeadm's docs/ha-considerations.md lays out ("keepalived and haproxy",
// "Option 1: Run the services on the operating system": the
// distribution's packages, started by systemd). It renders the
// configuration of one master (keepalived.conf, the check and notify
// scripts, haproxy.cfg and two systemd units of hamaster's own,
// hamaster-keepalived.service and hamaster-haproxy.service) and runs the
// operations on one host over an Executor (SSH in production:
// *remote.Client): CheckDaemons, Apply, Remove, Holder, Status,
// Handoff/Resume (planned VIP move) and Drain/Ready (one HAProxy backend).
//
// Why the host's daemons and not the doc's option 2 (static pods): what
// runs must be what is tested. The rendered configuration needs
// keepalived 2.1.0 (track_file, check_unicast_src) and the doc's image,
// osixia/keepalived:2.0.20, the newest of its line, has 2.0.20, which
// logs "Unknown keyword" for both and goes on without them (a planned
// handoff then waits for a move that never comes). The test beds run
// Debian 12's packages (keepalived 2.2.7, HAProxy 2.6), the very binaries
// a Debian master runs, and CheckDaemons refuses a host whose keepalived
// or HAProxy is older than the configuration needs, before any change.
//
// The cluster endpoint is VIP:FrontendPort (8443 by default): HAProxy
// listens on every address of every master at that port, the apiservers
// keep 0.0.0.0:6443, as the doc's "Bootstrap the cluster" section does with
// --control-plane-endpoint vip.mycluster.local:8443.
//
// Failover follows the apiserver, not only the machine: keepalived's check
// is the local apiserver's /readyz and HAProxy's own monitor every second,
// fall 2, and a failing check puts the VRRP instance into FAULT (weight
// 0): the holder sends a priority-0 advert and drops the VIP, and the
// backup with the highest priority takes it after its skew time (under
// 1 s) — not after three missed adverts. See docs/metal.md, "The VIP".
package vip

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/hamaster/hamaster/errkind"
)

// Defaults applied to zero Config fields.
const (
	DefaultAPIServerPort = 6443
	DefaultFrontendPort  = 8443
	DefaultHealthPort    = 8404
	DefaultRouterID      = 51
	// DefaultKeepalivedPath and DefaultHAProxyPath are where the
	// distributions' packages put the daemons (Debian's and Ubuntu's
	// keepalived and haproxy, RHEL's too): the units run the ones
	// CheckDaemons finds on the host's PATH, these when none is given.
	DefaultKeepalivedPath = "/usr/sbin/keepalived"
	DefaultHAProxyPath    = "/usr/sbin/haproxy"
)

// Master is one apiserver behind HAProxy and one VRRP peer.
type Master struct {
	// Name is the master's (and HAProxy server's) name: a DNS-1123 label.
	Name string
	// Address is the host's IPv4 address: VRRP's unicast source or peer
	// and the apiserver's address.
	Address string
}

// Config is the VIP's configuration on one host.
type Config struct {
	// VIP is the cluster endpoint's IPv4 address, on the masters' subnet.
	VIP string
	// Interface carries the VIP; "" means the interface holding the
	// host's address (Apply finds it on the host).
	Interface string
	// RouterID is VRRP's virtual_router_id, 1..255: the same on every
	// master, unique among the clusters on the segment (default 51).
	RouterID int
	// Priority is this host's VRRP priority, 1..254 (255 is the address
	// owner's): it decides only the first election, nopreempt keeps the
	// VIP where it is afterwards. Give each master a different one.
	Priority int
	// Host is this host's name, one of Masters.
	Host string
	// Masters are every master, this host included, in a stable order.
	Masters []Master
	// APIServerPort is the apiservers' port (default 6443).
	APIServerPort int
	// FrontendPort is HAProxy's: the cluster endpoint is VIP:FrontendPort
	// (default 8443). It must differ from APIServerPort: the apiserver
	// binds 0.0.0.0.
	FrontendPort int
	// HealthPort is HAProxy's monitor on 127.0.0.1 that keepalived's check
	// asks (default 8404).
	HealthPort int
	// Peers are more VRRP peers' IPv4 addresses besides Masters': hosts
	// that may become masters (the metal provider passes every
	// control-plane host of its inventory). keepalived's unicast_peer
	// list is every other master and every peer, in address order, so it
	// stays the same as masters come and go: a reload that changes it
	// from empty (keepalived then falls back to multicast) to some peers,
	// or back, restarts the VRRP instance, which drops the VIP for ~2 s
	// (keepalived 2.2.7 on the lab: "sent 0 priority", BACKUP (init)).
	// A peer that runs no keepalived only receives adverts it ignores.
	Peers []string
	// Drained names masters whose HAProxy server takes no new connection
	// (weight 0), so that a reload keeps a drain made through Drain.
	Drained []string
	// KeepalivedPath and HAProxyPath are the daemons the units run,
	// absolute paths (defaults above; Apply sets what CheckDaemons finds
	// on the host).
	KeepalivedPath string
	HAProxyPath    string
}

var (
	labelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	ifaceRE = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,15}$`)
	binRE   = regexp.MustCompile(`^/[A-Za-z0-9_.+/-]+$`)
)

// withDefaults returns c with zero fields filled in.
func (c Config) withDefaults() Config {
	if c.RouterID == 0 {
		c.RouterID = DefaultRouterID
	}
	if c.APIServerPort == 0 {
		c.APIServerPort = DefaultAPIServerPort
	}
	if c.FrontendPort == 0 {
		c.FrontendPort = DefaultFrontendPort
	}
	if c.HealthPort == 0 {
		c.HealthPort = DefaultHealthPort
	}
	if c.KeepalivedPath == "" {
		c.KeepalivedPath = DefaultKeepalivedPath
	}
	if c.HAProxyPath == "" {
		c.HAProxyPath = DefaultHAProxyPath
	}
	return c
}

// Validate fills the defaults and checks c, reporting every problem at
// once, each naming the field; the error is errkind.InvalidArgument.
func (c Config) Validate() (Config, error) {
	c = c.withDefaults()
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	vip, err := netip.ParseAddr(c.VIP)
	switch {
	case err != nil:
		bad("vip: %q is not an IP address", c.VIP)
	case !vip.Is4():
		// VRRP for IPv6 needs version 3 and an instance of its own.
		bad("vip: %s is not IPv4 (IPv6 VIPs are not supported yet)", c.VIP)
	}
	if c.Interface != "" && !ifaceRE.MatchString(c.Interface) {
		bad("interface: %q is not an interface name", c.Interface)
	}
	if c.RouterID < 1 || c.RouterID > 255 {
		bad("routerID: %d is outside 1..255", c.RouterID)
	}
	if c.Priority < 1 || c.Priority > 254 {
		bad("priority: %d is outside 1..254", c.Priority)
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"apiServerPort", c.APIServerPort}, {"frontendPort", c.FrontendPort}, {"healthPort", c.HealthPort}} {
		if p.v < 1 || p.v > 65535 {
			bad("%s: %d is outside 1..65535", p.name, p.v)
		}
	}
	if c.FrontendPort == c.APIServerPort {
		bad("frontendPort: %d is the apiserver's port (it binds 0.0.0.0): HAProxy needs another (8443)", c.FrontendPort)
	}
	if c.HealthPort == c.APIServerPort || c.HealthPort == c.FrontendPort {
		bad("healthPort: %d clashes with the apiserver's or HAProxy's frontend port", c.HealthPort)
	}
	for _, b := range []struct{ name, path string }{{"keepalivedPath", c.KeepalivedPath}, {"haproxyPath", c.HAProxyPath}} {
		if !binRE.MatchString(b.path) {
			bad("%s: %q is not an absolute path (a systemd unit's ExecStart needs one)", b.name, b.path)
		}
	}
	if len(c.Masters) == 0 {
		bad("masters: empty")
	}
	names, addrs := map[string]bool{}, map[netip.Addr]string{}
	for i, m := range c.Masters {
		if !labelRE.MatchString(m.Name) {
			bad("masters[%d].name: %q is not a DNS-1123 label", i, m.Name)
		}
		if names[m.Name] {
			bad("masters[%d].name: %q is listed twice", i, m.Name)
		}
		names[m.Name] = true
		a, err := netip.ParseAddr(m.Address)
		switch {
		case err != nil || !a.Is4():
			bad("masters[%d].address: %q (%s) is not an IPv4 address", i, m.Address, m.Name)
			continue
		case a == vip:
			bad("masters[%d].address: %s (%s) is the VIP", i, m.Address, m.Name)
		}
		if other, ok := addrs[a]; ok {
			bad("masters[%d].address: %s (%s) is also %s's", i, m.Address, m.Name, other)
		}
		addrs[a] = m.Name
	}
	if !names[c.Host] {
		bad("host: %q is not one of masters", c.Host)
	}
	for i, p := range c.Peers {
		switch a, err := netip.ParseAddr(p); {
		case err != nil || !a.Is4():
			bad("peers[%d]: %q is not an IPv4 address", i, p)
		case a == vip:
			bad("peers[%d]: %s is the VIP", i, p)
		}
	}
	for i, d := range c.Drained {
		if !names[d] {
			bad("drained[%d]: %q is not one of masters", i, d)
		}
	}
	if len(errs) > 0 {
		return c, errkind.Errorf(errkind.InvalidArgument, "vip config of %s: %s", c.Host, strings.Join(errs, "; "))
	}
	return c, nil
}

// self is this host's entry of Masters.
func (c Config) self() Master {
	i := slices.IndexFunc(c.Masters, func(m Master) bool { return m.Name == c.Host })
	return c.Masters[i]
}

// DefaultPriority is the VRRP priority of the i-th (0-based) of n
// masters: 200 for the first, then down in steps of 120/(n-1), at most 40
// (200, 160, 120 for three masters; never below 80). A backup takes the
// VIP after its skew time (RFC 5798 6.1: Skew_Time = ((256 − Priority) ×
// Master_Adver_Interval) / 256, with 0.5 s adverts 109 ms at 200, 188 ms
// at 160), and priorities far apart make the backups' timers expire far
// apart: when the holder gives the VIP up (its priority-0 advert), the
// first backup's advert must reach the others before their own timers
// run out. A step of 1 (the priorities this replaced: 200, 199, …) put
// two backups' expiries ~2 ms apart, less than an advert takes on a busy
// host, and both took the VIP (make bench VIP=1 saw two holders within
// ~30 ms); 40 puts them 78 ms apart (19.5 ms with thirteen masters). The
// top stays at 200: at 250 the first backup's skew was 12 ms, and on the
// lab it took the VIP before the old holder had removed it (one poll saw
// both holding it in TestLoadBalancerOnTheLab).
func DefaultPriority(i, n int) int {
	const top, lowest, widest = 200, 80, 40
	step := widest
	if n > 1 {
		step = min(max((top-lowest)/(n-1), 1), widest)
	}
	return max(top-step*min(max(i, 0), max(n-1, 0)), 1)
}

// Endpoint is the cluster endpoint, VIP:FrontendPort (kubeadm's
// --control-plane-endpoint).
func (c Config) Endpoint() string {
	c = c.withDefaults()
	return fmt.Sprintf("%s:%d", c.VIP, c.FrontendPort)
}
