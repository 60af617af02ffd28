// Package metal is the bare-metal provider: masters on existing hosts,
// listed in an inventory and reached over SSH, the apiserver's address a
// VIP held by keepalived with HAProxy in front of the apiservers.
//
// What it holds: the inventory (--metal-inventory FILE: its
// format, loader and validation), and the provider's machines
// (Provider.Instances: a new replica claims a free control-plane host,
// checked over SSH before anything changes — a host another cluster
// claims, one running a control plane hamaster did not put there, one
// keeping etcd data, one that does not answer or shows the wrong host
// key is refused — and a removed one is released clean, never powered
// off), the way in (DialMachine, RunOnMachine, UploadToMachine over SSH).
// Not built yet: the VIP and HAProxy (StaticIP and LoadBalancer say so),
// and the CLI's --provider metal.
//
// An inventory is YAML:
//
//	# The cluster endpoint's address: keepalived moves it between the
//	# control-plane hosts. A literal IP, no host's address.
//	vip: 192.0.2.100
//	hosts:
//	  - name: cp-1              # a DNS-1123 label, unique
//	    address: 192.0.2.11     # IPv4 or IPv6 literal, or a hostname; unique
//	    role: control-plane     # control-plane or worker (required)
//	    ssh:                    # optional: user root, port 22
//	      user: root
//	      port: 22
//	    zone: dc1-a             # optional topology: zone and rack
//	    rack: r12
//	  - name: w-1
//	    address: w-1.lab.example.
//	    role: worker
//
// Roles: control-plane hosts are the ones a master may run on (master 0
// and every replica hamaster adds); worker hosts are listed so that a
// command naming one is refused with a reason rather than "unknown host":
// hamaster never puts a master there. Which hosts are masters now is
// observed on the hosts, never written in the inventory.
package metal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/hamaster/hamaster/errkind"
)

// Roles of a host.
const (
	// RoleControlPlane: a master may run here.
	RoleControlPlane = "control-plane"
	// RoleWorker: never a master.
	RoleWorker = "worker"
)

// Defaults of a host's SSH settings.
const (
	DefaultSSHUser = "root"
	DefaultSSHPort = 22
)

// Inventory is the hosts hamaster may use and the cluster endpoint's VIP.
type Inventory struct {
	// VIP is the address the cluster endpoint uses, moved between the
	// control-plane hosts by keepalived: a literal IP, no host's address.
	VIP string `yaml:"vip"`
	// Hosts in the file's order.
	Hosts []Host `yaml:"hosts"`
}

// Host is one machine of the inventory.
type Host struct {
	// Name identifies the host in commands and becomes its master's name:
	// a DNS-1123 label (lower-case letters, digits and '-', at most 63).
	Name string `yaml:"name"`
	// Address is where SSH (and the other masters) reach it: an IPv4 or
	// IPv6 literal or a hostname.
	Address string `yaml:"address"`
	// Role is RoleControlPlane or RoleWorker.
	Role string `yaml:"role"`
	// SSH is how to log in; zero fields take the defaults.
	SSH SSH `yaml:"ssh,omitempty"`
	// Zone and Rack are optional topology labels (Kubernetes label
	// values): new masters are spread over them.
	Zone string `yaml:"zone,omitempty"`
	Rack string `yaml:"rack,omitempty"`
}

// SSH is a host's login.
type SSH struct {
	// User logs in (default root). Any other user runs every command
	// through `sudo -n` and must have passwordless sudo: checked on the
	// first connection, before any change.
	User string `yaml:"user,omitempty"`
	// Port of the host's sshd, 1..65535 (default 22).
	Port int `yaml:"port,omitempty"`
}

// SSHAddr is host:port for dialling the host's sshd.
func (h Host) SSHAddr() string {
	return net.JoinHostPort(h.Address, strconv.Itoa(h.SSH.Port))
}

// ControlPlane reports whether a master may run on the host.
func (h Host) ControlPlane() bool { return h.Role == RoleControlPlane }

// Load reads and validates the inventory at path.
func Load(path string) (*Inventory, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, errkind.Errorf(errkind.InvalidArgument, "metal inventory: %w", err)
	}
	return Parse(bytes.NewReader(b), path)
}

// Parse reads an inventory from r (source names it in errors, e.g. its
// path), fills the defaults and validates it. A field the format does not
// have is an error naming it; every problem found is reported, each
// naming the host and field. Errors are of kind errkind.InvalidArgument.
func Parse(r io.Reader, source string) (*Inventory, error) {
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	var inv Inventory
	if err := dec.Decode(&inv); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errkind.Errorf(errkind.InvalidArgument, "metal inventory %s: empty: want vip and hosts", source)
		}
		return nil, errkind.Errorf(errkind.InvalidArgument, "metal inventory %s: %w (fields: vip, hosts[].name, address, role, ssh.user, ssh.port, zone, rack)", source, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errkind.Errorf(errkind.InvalidArgument, "metal inventory %s: more than one YAML document: want one", source)
	}
	inv.fillDefaults()
	if err := inv.Validate(); err != nil {
		return nil, errkind.Errorf(errkind.InvalidArgument, "metal inventory %s: %w", source, err)
	}
	return &inv, nil
}

// Marshal validates the inventory (defaults filled) and returns it as
// YAML that Parse reads back.
func (inv *Inventory) Marshal() ([]byte, error) {
	c := *inv
	c.Hosts = slices.Clone(inv.Hosts)
	c.fillDefaults()
	if err := c.Validate(); err != nil {
		return nil, errkind.Errorf(errkind.InvalidArgument, "metal inventory: %w", err)
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&c); err != nil {
		return nil, fmt.Errorf("metal inventory: encode: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("metal inventory: encode: %w", err)
	}
	return b.Bytes(), nil
}

func (inv *Inventory) fillDefaults() {
	for i := range inv.Hosts {
		h := &inv.Hosts[i]
		if h.SSH.User == "" {
			h.SSH.User = DefaultSSHUser
		}
		if h.SSH.Port == 0 {
			h.SSH.Port = DefaultSSHPort
		}
	}
}

// Validate checks what can be checked without the hosts: each field's
// form, unique names and addresses (the same IP under two names, however
// written), the VIP a literal IP that is no host's address, and at least
// one control-plane host. It reports every problem, joined. Defaults must
// be filled (Parse does): a zero SSH port is an error here.
func (inv *Inventory) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(inv.Hosts) == 0 {
		bad("hosts: none listed: want at least one control-plane host")
	}
	names := map[string]int{}
	addrs := map[string]int{}
	controlPlanes := 0
	for i, h := range inv.Hosts {
		where := fmt.Sprintf("hosts[%d]", i)
		if h.Name != "" {
			where = fmt.Sprintf("host %s (hosts[%d])", h.Name, i)
		}
		if err := checkLabel(h.Name); err != nil {
			bad("%s: name %q: %v", where, h.Name, err)
		} else if j, dup := names[h.Name]; dup {
			bad("%s: name %s is also hosts[%d]'s: names must be unique", where, h.Name, j)
		} else {
			names[h.Name] = i
		}
		if key, err := addressKey(h.Address); err != nil {
			bad("%s: address %q: %v", where, h.Address, err)
		} else if j, dup := addrs[key]; dup {
			bad("%s: address %s is also host %s's (hosts[%d]): one address, one host", where, h.Address, inv.Hosts[j].Name, j)
		} else {
			addrs[key] = i
		}
		switch h.Role {
		case RoleControlPlane:
			controlPlanes++
		case RoleWorker:
		case "":
			bad("%s: role is required: %s (a master may run there) or %s (never a master)", where, RoleControlPlane, RoleWorker)
		default:
			bad("%s: role %q: want %s or %s", where, h.Role, RoleControlPlane, RoleWorker)
		}
		if h.SSH.Port < 1 || h.SSH.Port > 65535 {
			bad("%s: ssh.port %d: want 1..65535 (default %d)", where, h.SSH.Port, DefaultSSHPort)
		}
		if err := checkUser(h.SSH.User); err != nil {
			bad("%s: ssh.user %q: %v", where, h.SSH.User, err)
		}
		if err := checkLabelValue(h.Zone); err != nil {
			bad("%s: zone %q: %v", where, h.Zone, err)
		}
		if err := checkLabelValue(h.Rack); err != nil {
			bad("%s: rack %q: %v", where, h.Rack, err)
		}
	}
	if len(inv.Hosts) > 0 && controlPlanes == 0 {
		bad("hosts: no host has role %s: a master needs one", RoleControlPlane)
	}
	if inv.VIP == "" {
		bad("vip is required: the cluster endpoint's address, a literal IP that keepalived moves between the control-plane hosts")
	} else if vip, err := netip.ParseAddr(inv.VIP); err != nil || vip.Zone() != "" {
		bad("vip %q: want a literal IPv4 or IPv6 address without a zone, not a hostname", inv.VIP)
	} else if vip = vip.Unmap(); !vip.IsGlobalUnicast() {
		bad("vip %s: want a unicast address (not loopback, multicast, link-local or unspecified)", inv.VIP)
	} else if !vip.Is4() {
		// vip.Config refuses it too; said here, when the inventory is
		// read, so that nothing starts on a VIP no step could bring up.
		bad("vip %s: IPv6 VIPs are not supported yet (keepalived needs a VRRPv3 instance of their own): use an IPv4 address", inv.VIP)
	} else if j, taken := addrs["ip:"+vip.String()]; taken {
		bad("vip %s is host %s's address (hosts[%d]): the VIP must be an address of its own", inv.VIP, inv.Hosts[j].Name, j)
	}
	return errors.Join(errs...)
}

// Host returns the host called name; an unknown name is an error of kind
// errkind.NotFound listing the inventory's names.
func (inv *Inventory) Host(name string) (Host, error) {
	for _, h := range inv.Hosts {
		if h.Name == name {
			return h, nil
		}
	}
	names := make([]string, len(inv.Hosts))
	for i, h := range inv.Hosts {
		names[i] = h.Name
	}
	return Host{}, errkind.Errorf(errkind.NotFound, "host %s is not in the metal inventory (it lists: %s)", name, strings.Join(names, ", "))
}

// ControlPlaneHosts are the hosts a master may run on, in the file's order.
func (inv *Inventory) ControlPlaneHosts() []Host {
	var out []Host
	for _, h := range inv.Hosts {
		if h.ControlPlane() {
			out = append(out, h)
		}
	}
	return out
}

// addressKey checks an address and returns a key under which two
// spellings of the same address are equal: IPs in netip's canonical form
// (an IPv4-mapped IPv6 address is its IPv4 address), hostnames lower case
// without a final dot.
func addressKey(a string) (string, error) {
	if a == "" {
		return "", errors.New("required: an IPv4 or IPv6 literal or a hostname")
	}
	if ip, err := netip.ParseAddr(a); err == nil {
		if ip.Zone() != "" {
			return "", errors.New("an IPv6 address with a zone is not reachable from other hosts: want a global or private address")
		}
		ip = ip.Unmap()
		if ip.IsUnspecified() || ip.IsMulticast() || ip.IsLoopback() {
			return "", errors.New("want a host's unicast address (not loopback, multicast or unspecified)")
		}
		return "ip:" + ip.String(), nil
	}
	if strings.HasPrefix(a, "[") || strings.Contains(a, ":") {
		return "", errors.New("not an IPv6 literal (write it bare, without brackets or port; the port is ssh.port)")
	}
	h := strings.ToLower(strings.TrimSuffix(a, "."))
	if len(h) > 253 {
		return "", errors.New("a hostname has at most 253 characters")
	}
	labels := strings.Split(h, ".")
	numeric := true
	for _, l := range labels {
		if err := checkHostLabel(l); err != nil {
			return "", fmt.Errorf("not an IP literal, nor a hostname: label %q: %v", l, err)
		}
		if strings.Trim(l, "0123456789") != "" {
			numeric = false
		}
	}
	if numeric {
		return "", errors.New("not a valid IPv4 address (and all-numeric hostnames are refused)")
	}
	return "host:" + h, nil
}

// checkLabel checks a DNS-1123 label: 1-63 lower-case letters, digits and
// '-', starting and ending with a letter or digit.
func checkLabel(s string) error {
	if s == "" {
		return errors.New("required: a DNS-1123 label (lower-case letters, digits and '-', at most 63)")
	}
	if len(s) > 63 {
		return errors.New("longer than 63 characters: want a DNS-1123 label")
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case r == '-' && i > 0 && i < len(s)-1:
		default:
			return errors.New("want a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or digit")
		}
	}
	return nil
}

// checkHostLabel checks one label of a hostname (case-insensitive, as
// DNS is; the key is lower-cased before).
func checkHostLabel(l string) error {
	if l == "" {
		return errors.New("empty")
	}
	return checkLabel(l)
}

// checkUser checks a login name: what OpenSSH and useradd accept, less
// what would confuse a command line or user@host.
func checkUser(u string) error {
	if u == "" {
		return fmt.Errorf("required (default %s)", DefaultSSHUser)
	}
	if len(u) > 32 {
		return errors.New("longer than 32 characters")
	}
	for i, r := range u {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_':
		case (r >= '0' && r <= '9') || r == '.' || r == '-':
			if i == 0 {
				return errors.New("want a login name starting with a letter or '_'")
			}
		default:
			return errors.New("want a login name: letters, digits, '_', '.' and '-'")
		}
	}
	return nil
}

// checkLabelValue checks an optional Kubernetes label value: empty, or at
// most 63 letters, digits, '-', '_' and '.', starting and ending with a
// letter or digit.
func checkLabelValue(s string) error {
	if s == "" {
		return nil
	}
	if len(s) > 63 {
		return errors.New("longer than 63 characters: want a Kubernetes label value")
	}
	alnum := func(r byte) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' }
	if !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return errors.New("want a Kubernetes label value: starting and ending with a letter or digit")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return errors.New("want a Kubernetes label value: letters, digits, '-', '_' and '.'")
		}
	}
	return nil
}
