package certs

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/hamaster/hamaster/errkind"
)

// defaultClusterDomain is the cluster DNS domain when none is given.
const defaultClusterDomain = "cluster.local"

// DefaultServiceCIDR is kube-up's SERVICE_CLUSTER_IP_RANGE: its first
// address, 10.0.0.1, is the in-cluster "kubernetes" service that every
// apiserver certificate hamaster issues covers.
const DefaultServiceCIDR = "10.0.0.0/16"

// APIServerSANs describes who an apiserver serving certificate must be
// valid for. Empty strings, in a field or a list, are skipped.
type APIServerSANs struct {
	// StaticIP is the load balancer or static IP of the endpoint; may be "".
	StaticIP string
	// DNSNames are the public DNS names of the endpoint; wildcards such as
	// "*.example.com" are allowed, and entries that are IPs count as IPs.
	DNSNames []string
	// ReplicaIPs are every replica's internal and external IPs.
	ReplicaIPs []string
	// ReplicaNames are every replica's host names; entries that are IPs
	// count as IPs.
	ReplicaNames []string
	// ServiceCIDR is the Kubernetes service range, e.g. "10.0.0.0/16";
	// its first usable address (10.0.0.1), the in-cluster "kubernetes"
	// service, becomes a SAN. "" means no service IP SAN.
	ServiceCIDR string
	// ClusterDomain is the cluster DNS domain; "" means "cluster.local".
	ClusterDomain string
}

// SANs returns the sorted, de-duplicated DNS names and IPs the certificate
// needs: the fields of s plus kubernetes, kubernetes.default,
// kubernetes.default.svc, kubernetes.default.svc.<ClusterDomain>, localhost
// and 127.0.0.1. DNS names are lower-cased without a trailing dot; IPv4
// addresses are 4 bytes long and sort before IPv6 ones. A malformed IP,
// CIDR, DNS name or domain is an errkind.InvalidArgument error naming the
// field and the value.
func (s APIServerSANs) SANs() (dns []string, ips []net.IP, err error) {
	var b sanBuilder
	if v := strings.TrimSpace(s.StaticIP); v != "" {
		if err := b.addIPString("StaticIP", v); err != nil {
			return nil, nil, err
		}
	}
	for i, n := range s.DNSNames {
		if err := b.addName(fmt.Sprintf("DNSNames[%d]", i), n, true); err != nil {
			return nil, nil, err
		}
	}
	for i, v := range s.ReplicaIPs {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if err := b.addIPString(fmt.Sprintf("ReplicaIPs[%d]", i), v); err != nil {
			return nil, nil, err
		}
	}
	for i, n := range s.ReplicaNames {
		if err := b.addName(fmt.Sprintf("ReplicaNames[%d]", i), n, false); err != nil {
			return nil, nil, err
		}
	}
	if v := strings.TrimSpace(s.ServiceCIDR); v != "" {
		ip, err := firstServiceIP(v)
		if err != nil {
			return nil, nil, err
		}
		b.addAddr(ip)
	}
	domain := normalizeDNSName(s.ClusterDomain)
	if domain == "" {
		domain = defaultClusterDomain
	}
	if err := validateDNSName(domain, false); err != nil {
		return nil, nil, errkind.Errorf(errkind.InvalidArgument,
			"ClusterDomain %q is not a valid DNS domain: %v", s.ClusterDomain, err)
	}
	for _, n := range []string{
		"kubernetes",
		"kubernetes.default",
		"kubernetes.default.svc",
		"kubernetes.default.svc." + domain,
		"localhost",
	} {
		b.dns(n)
	}
	b.addAddr(netip.AddrFrom4([4]byte{127, 0, 0, 1}))
	dns, ips = b.result()
	return dns, ips, nil
}

// firstServiceIP returns the first usable address of a service CIDR: the
// network address plus one.
func firstServiceIP(cidr string) (netip.Addr, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return netip.Addr{}, errkind.Errorf(errkind.InvalidArgument,
			"ServiceCIDR %q is not a CIDR such as 10.0.0.0/16: %v", cidr, err)
	}
	p = p.Masked()
	first := p.Addr().Next()
	if !first.IsValid() || !p.Contains(first) {
		return netip.Addr{}, errkind.Errorf(errkind.InvalidArgument,
			"ServiceCIDR %q has no usable address", cidr)
	}
	return first.Unmap(), nil
}

// sanBuilder collects de-duplicated SANs.
type sanBuilder struct {
	names map[string]struct{}
	addrs map[netip.Addr]struct{}
}

func (b *sanBuilder) dns(name string) {
	if b.names == nil {
		b.names = make(map[string]struct{})
	}
	b.names[name] = struct{}{}
}

func (b *sanBuilder) addAddr(a netip.Addr) {
	if b.addrs == nil {
		b.addrs = make(map[netip.Addr]struct{})
	}
	b.addrs[a.Unmap()] = struct{}{}
}

// addIPString adds v, which must be an IP address without a zone.
func (b *sanBuilder) addIPString(field, v string) error {
	a, err := netip.ParseAddr(v)
	if err != nil || a.Zone() != "" {
		return errkind.Errorf(errkind.InvalidArgument, "%s %q is not an IP address", field, v)
	}
	b.addAddr(a)
	return nil
}

// addNetIP adds ip, which must be a 4- or 16-byte address.
func (b *sanBuilder) addNetIP(field string, ip net.IP) error {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return errkind.Errorf(errkind.InvalidArgument, "%s %q is not an IP address", field, ip.String())
	}
	b.addAddr(a)
	return nil
}

// addName adds n as an IP if it is one, else as a DNS name after
// validation. Empty names are skipped.
func (b *sanBuilder) addName(field, n string, allowWildcard bool) error {
	v := strings.TrimSpace(n)
	if v == "" {
		return nil
	}
	if a, err := netip.ParseAddr(v); err == nil && a.Zone() == "" {
		b.addAddr(a)
		return nil
	}
	name := normalizeDNSName(v)
	if err := validateDNSName(name, allowWildcard); err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "%s %q is not a valid DNS name: %v", field, n, err)
	}
	b.dns(name)
	return nil
}

// result returns the sorted names and addresses.
func (b *sanBuilder) result() ([]string, []net.IP) {
	var names []string
	for n := range b.names {
		names = append(names, n)
	}
	slices.Sort(names)
	addrs := make([]netip.Addr, 0, len(b.addrs))
	for a := range b.addrs {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	var ips []net.IP
	for _, a := range addrs {
		ips = append(ips, net.IP(a.AsSlice()))
	}
	return names, ips
}

// normalizeDNSName lower-cases a name and drops surrounding space and a
// trailing dot.
func normalizeDNSName(n string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(n)), ".")
}

// validateDNSName checks a normalized DNS name: at most 253 characters,
// labels of 1 to 63 letters, digits, '-' or '_' that neither start nor end
// with '-', and, if allowWildcard, a leading "*" label before at least two
// more labels.
func validateDNSName(name string, allowWildcard bool) error {
	if name == "" {
		return fmt.Errorf("empty name")
	}
	if len(name) > 253 {
		return fmt.Errorf("longer than 253 characters")
	}
	labels := strings.Split(name, ".")
	for i, l := range labels {
		if i == 0 && l == "*" {
			if !allowWildcard {
				return fmt.Errorf("wildcards are not allowed here")
			}
			if len(labels) < 3 {
				return fmt.Errorf("a wildcard needs at least two labels after it")
			}
			continue
		}
		if l == "" {
			return fmt.Errorf("empty label")
		}
		if len(l) > 63 {
			return fmt.Errorf("label %q is longer than 63 characters", l)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("label %q starts or ends with '-'", l)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("label %q has character %q", l, c)
			}
		}
	}
	return nil
}
