// Package vpc builds a cloud VPC out of Linux network namespaces, for the
// cloud fakes' data planes: what a VM sees and what an operator outside
// the cloud can and cannot reach.
//
//   - Each VM is a network namespace with its own loopback (a kube-up
//     master's etcd listens on 127.0.0.1:2379 and :4002, each master its
//     own) and one interface, eth0, on the VPC's internal subnet.
//   - A router namespace holds the subnet's bridge and gateway; VMs reach
//     each other over it, and their hostnames resolve through
//     /etc/netns/<vm>/hosts (GCE's internal DNS resolves instance names),
//     which `ip netns exec` mounts over /etc/hosts. There is no DNS
//     server: /etc/netns/<vm>/resolv.conf names the VM's own loopback, so
//     a name not (yet) in the hosts file fails at once instead of sending
//     queries towards the machine's resolver.
//   - The operator's namespace (the caller's) reaches only the external
//     range, routed into the router through one veth: a VM's external
//     address, or an address the router itself holds (a load balancer's).
//     The internal subnet has no route from it.
//
// It needs root and iproute2's `ip` (Debian's iproute2). Nothing leaves
// the machine: every address lives in namespaces this package made, and
// Close removes them all.
package vpc

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/hamaster/hamaster/internal/iproute"
)

// Options describe a VPC.
type Options struct {
	// ID names the namespaces (hm-<ID>-...) and interfaces; 1-6 lower-case
	// letters or digits, unique on the machine.
	ID string
	// Subnet is the internal range, e.g. 10.128.0.0/20 (GCE's default
	// us-central1 subnet); its first address is the gateway.
	Subnet netip.Prefix
	// External is the range external addresses come from, e.g.
	// 198.18.0.0/24 (RFC 2544's range for test networks); its last two
	// addresses are the uplink's ends (the operator's, the router's).
	External netip.Prefix
}

// VPC is a running set of namespaces.
type VPC struct {
	o        Options
	router   string // router namespace
	uplink   string // the operator's end of the uplink veth
	gw, self netip.Addr
	peer     netip.Addr // the router's end of the uplink

	mu  sync.Mutex
	vms map[string]*VM
	// lastIndex is the last VM index handed out.
	lastIndex int
	hosts     map[string]netip.Addr
	// static names every VM resolves whether or not a VM has them
	// (SetStaticHosts).
	static map[string]netip.Addr
	ext    map[netip.Addr]string // external address → VM name, "" for the router
}

// VM is one namespace on the VPC.
type VM struct {
	Name     string
	NS       string
	Internal netip.Addr
	index    int
}

// New creates the router namespace, its bridge and the uplink.
func New(ctx context.Context, o Options) (*VPC, error) {
	if o.ID == "" || len(o.ID) > 6 || strings.Trim(o.ID, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		return nil, fmt.Errorf("vpc: ID %q: want 1-6 lower-case letters or digits", o.ID)
	}
	if !o.Subnet.IsValid() || !o.Subnet.Addr().Is4() || !o.External.IsValid() || !o.External.Addr().Is4() {
		return nil, fmt.Errorf("vpc: Subnet %v and External %v must be IPv4 prefixes", o.Subnet, o.External)
	}
	o.Subnet, o.External = o.Subnet.Masked(), o.External.Masked()
	v := &VPC{o: o, router: "hm-" + o.ID + "-r", uplink: "hm" + o.ID + "u", gw: o.Subnet.Addr().Next(),
		self: lastAddr(o.External), peer: lastAddr(o.External).Prev(), vms: map[string]*VM{}, hosts: map[string]netip.Addr{}, ext: map[netip.Addr]string{}}
	steps := [][]string{
		{"netns", "add", v.router},
		{"-n", v.router, "link", "set", "lo", "up"},
		{"-n", v.router, "link", "add", "br0", "type", "bridge"},
		{"-n", v.router, "addr", "add", v.gw.String() + "/" + fmt.Sprint(o.Subnet.Bits()), "dev", "br0"},
		{"-n", v.router, "link", "set", "br0", "up"},
		{"link", "add", v.uplink, "type", "veth", "peer", "name", "up0", "netns", v.router},
		{"addr", "add", v.self.String() + "/32", "dev", v.uplink},
		{"link", "set", v.uplink, "up"},
		{"-n", v.router, "addr", "add", v.peer.String() + "/32", "dev", "up0"},
		{"-n", v.router, "link", "set", "up0", "up"},
		{"-n", v.router, "route", "add", v.self.String() + "/32", "dev", "up0"},
		{"route", "add", o.External.String(), "via", v.peer.String(), "dev", v.uplink, "src", v.self.String(), "onlink"},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			v.Close()
			return nil, err
		}
	}
	if err := sysctl(ctx, v.router, "net/ipv4/ip_forward", "1"); err != nil {
		v.Close()
		return nil, err
	}
	return v, nil
}

// Subnet is the internal range.
func (v *VPC) Subnet() netip.Prefix { return v.o.Subnet }

// Gateway is the subnet's gateway (the router's address on it).
func (v *VPC) Gateway() netip.Addr { return v.gw }

// External is the external range.
func (v *VPC) External() netip.Prefix { return v.o.External }

// ExternalUsable reports whether addr may be given to a VM or the router:
// in the external range, and neither its network, broadcast or uplink
// address.
func (v *VPC) ExternalUsable(addr netip.Addr) bool {
	return v.o.External.Contains(addr) && addr != v.o.External.Addr() && addr != v.self && addr != v.peer && addr != v.self.Next()
}

// AddVM creates a VM namespace with eth0 on the subnet at internal, the
// gateway as its default route, and every VM's hostname in its hosts file.
func (v *VPC) AddVM(ctx context.Context, name string, internal netip.Addr) (*VM, error) {
	if !v.o.Subnet.Contains(internal) || internal == v.gw {
		return nil, fmt.Errorf("vpc: VM %s: internal address %v is not a host address of %v", name, internal, v.o.Subnet)
	}
	v.mu.Lock()
	if _, dup := v.vms[name]; dup {
		v.mu.Unlock()
		return nil, fmt.Errorf("vpc: VM %s exists", name)
	}
	// Indexes are never reused: a deleted namespace lives on (with its
	// veth in the router) while a process still runs in it, so a new VM
	// must not take its names.
	v.lastIndex++
	vm := &VM{Name: name, Internal: internal, index: v.lastIndex}
	vm.NS = fmt.Sprintf("hm-%s-%d", v.o.ID, vm.index)
	v.vms[name] = vm
	v.hosts[name] = internal
	v.mu.Unlock()
	peer := fmt.Sprintf("v%d", vm.index)
	steps := [][]string{
		{"netns", "add", vm.NS},
		{"-n", vm.NS, "link", "set", "lo", "up"},
		{"-n", v.router, "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", vm.NS},
		{"-n", v.router, "link", "set", peer, "master", "br0"},
		{"-n", v.router, "link", "set", peer, "up"},
		{"-n", vm.NS, "addr", "add", internal.String() + "/" + fmt.Sprint(v.o.Subnet.Bits()), "dev", "eth0"},
		{"-n", vm.NS, "link", "set", "eth0", "up"},
		{"-n", vm.NS, "route", "add", "default", "via", v.gw.String()},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return nil, err
		}
	}
	return vm, v.writeHosts()
}

// SetStaticHosts makes every VM resolve names whether or not a VM has
// them, as a cloud's DNS answers names it derives from addresses (EC2
// resolves ip-a-b-c-d for every address of the VPC); a VM's own name
// wins. It replaces the previous set.
func (v *VPC) SetStaticHosts(names map[string]netip.Addr) error {
	v.mu.Lock()
	v.static = make(map[string]netip.Addr, len(names))
	for n, a := range names {
		v.static[n] = a
	}
	v.mu.Unlock()
	return v.writeHosts()
}

// RemoveVM deletes a VM's namespace (its veth goes with it) and its
// external address.
func (v *VPC) RemoveVM(ctx context.Context, name string) error {
	v.mu.Lock()
	vm := v.vms[name]
	delete(v.vms, name)
	delete(v.hosts, name)
	var exts []netip.Addr
	for a, holder := range v.ext {
		if holder == name {
			exts = append(exts, a)
		}
	}
	v.mu.Unlock()
	if vm == nil {
		return nil
	}
	for _, a := range exts {
		if err := v.ClearExternal(ctx, a); err != nil {
			return err
		}
	}
	if err := ip(ctx, "netns", "del", vm.NS); err != nil {
		return err
	}
	_ = os.RemoveAll(filepath.Join("/etc/netns", vm.NS))
	return v.writeHosts()
}

// SetExternal gives an external address to a VM (holder is its name) or
// to the router (holder ""), where a load balancer process listens. An
// address has one holder at a time: setting it moves it.
func (v *VPC) SetExternal(ctx context.Context, addr netip.Addr, holder string) error {
	if !v.o.External.Contains(addr) || addr == v.self || addr == v.peer {
		return fmt.Errorf("vpc: %v is not an external address of %v", addr, v.o.External)
	}
	if err := v.ClearExternal(ctx, addr); err != nil {
		return err
	}
	v.mu.Lock()
	vm := v.vms[holder]
	v.mu.Unlock()
	if holder != "" && vm == nil {
		return fmt.Errorf("vpc: no VM %s", holder)
	}
	var steps [][]string
	if vm == nil {
		steps = [][]string{{"-n", v.router, "addr", "add", addr.String() + "/32", "dev", "lo"}}
	} else {
		steps = [][]string{
			{"-n", vm.NS, "addr", "add", addr.String() + "/32", "dev", "eth0"},
			{"-n", v.router, "route", "replace", addr.String() + "/32", "dev", "br0"},
		}
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return err
		}
	}
	v.mu.Lock()
	v.ext[addr] = holder
	v.mu.Unlock()
	return nil
}

// ClearExternal takes an external address from whoever holds it; absent
// is success.
func (v *VPC) ClearExternal(ctx context.Context, addr netip.Addr) error {
	v.mu.Lock()
	holder, ok := v.ext[addr]
	vm := v.vms[holder]
	delete(v.ext, addr)
	v.mu.Unlock()
	if !ok {
		return nil
	}
	a := addr.String() + "/32"
	if holder == "" {
		return ipTolerant(ctx, "-n", v.router, "addr", "del", a, "dev", "lo")
	}
	_ = ipTolerant(ctx, "-n", v.router, "route", "del", a, "dev", "br0")
	if vm == nil {
		return nil
	}
	return ipTolerant(ctx, "-n", vm.NS, "addr", "del", a, "dev", "eth0")
}

// Command runs name with args inside a VM's namespace (holder "" is the
// router), its /etc/hosts the VPC's.
func (v *VPC) Command(ctx context.Context, holder, name string, args ...string) (*exec.Cmd, error) {
	ns := v.router
	if holder != "" {
		v.mu.Lock()
		vm := v.vms[holder]
		v.mu.Unlock()
		if vm == nil {
			return nil, fmt.Errorf("vpc: no VM %s", holder)
		}
		ns = vm.NS
	}
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...), nil
}

// Close deletes every namespace, the uplink and the hosts files.
func (v *VPC) Close() error {
	ctx := context.Background()
	v.mu.Lock()
	var nss []string
	for _, vm := range v.vms {
		nss = append(nss, vm.NS)
	}
	v.vms = map[string]*VM{}
	v.mu.Unlock()
	var errs []error
	for _, ns := range append(nss, v.router) {
		if err := ipTolerant(ctx, "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
		_ = os.RemoveAll(filepath.Join("/etc/netns", ns))
	}
	if err := ipTolerant(ctx, "link", "del", v.uplink); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// writeHosts gives every VM a hosts file naming every VM (written in
// place: `ip netns exec` bind-mounts the file, so running processes see
// new names).
func (v *VPC) writeHosts() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	all := make(map[string]netip.Addr, len(v.static)+len(v.hosts))
	for n, a := range v.static {
		all[n] = a
	}
	for n, a := range v.hosts {
		all[n] = a
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n")
	for _, n := range names {
		fmt.Fprintf(&b, "%s\t%s\n", all[n], n)
	}
	for _, vm := range v.vms {
		dir := filepath.Join("/etc/netns", vm.NS)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("vpc: %w", err)
		}
		resolv := filepath.Join(dir, "resolv.conf")
		if _, err := os.Stat(resolv); os.IsNotExist(err) {
			if err := os.WriteFile(resolv, []byte(resolvConf), 0o644); err != nil {
				return fmt.Errorf("vpc: resolv.conf of %s: %w", vm.Name, err)
			}
		}
		f, err := os.OpenFile(filepath.Join(dir, "hosts"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return fmt.Errorf("vpc: %w", err)
		}
		_, err = f.WriteString(b.String())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("vpc: hosts of %s: %w", vm.Name, err)
		}
	}
	return nil
}

// resolvConf is every VM's resolver configuration: no DNS server in the
// VPC (names come from the hosts file); a query goes to the VM's own
// loopback and fails fast.
const resolvConf = "# hamaster vpc: no DNS server; instance names are in /etc/hosts\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n"

func ip(ctx context.Context, args ...string) error { return iproute.Run(ctx, "vpc", args...) }

// ipTolerant is ip for deletions: what is already gone is success.
func ipTolerant(ctx context.Context, args ...string) error {
	return iproute.RunTolerant(ctx, "vpc", []string{"No such file", "Cannot find device", "No such device",
		"Cannot assign requested address", "No such process"}, args...)
}

// sysctl sets /proc/sys/<key> inside a namespace (per-namespace network
// settings such as ip_forward).
func sysctl(ctx context.Context, ns, key, value string) error {
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "sh", "-c", "echo "+value+" > /proc/sys/"+key).CombinedOutput()
	if err != nil {
		return fmt.Errorf("vpc: set %s=%s in %s: %v: %s", key, value, ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	n := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) | host
	n-- // not the broadcast address
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}
