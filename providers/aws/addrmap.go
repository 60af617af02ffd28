package aws

import (
	"net/netip"
	"sort"
	"strings"

	"github.com/hamaster/hamaster/errkind"
)

// addrMap translates between the addresses the cloud reports (private IPs
// of instances, the Elastic IP's public address) and the addresses hamaster
// dials and puts into certificates and etcd peer URLs. In production it is
// empty: both views are the same. Tests map moto's VPC (10.x, not routable
// here) and its Elastic IP onto loopback addresses, so that every byte
// hamaster sends goes to a loopback address.
//
// Syntax: "cloudPrefix=netPrefix,..." with equal prefix lengths, e.g.
// "10.0.1.0/24=127.0.42.0/24,54.10.20.30/32=127.0.42.1/32". Host bits are
// carried over. An address outside every prefix is the same in both views.
type addrMap []struct{ cloud, net netip.Prefix }

func parseAddrMap(v string) (addrMap, error) {
	var m addrMap
	for _, kv := range strings.Split(v, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		a, b, ok := strings.Cut(kv, "=")
		ca, err1 := netip.ParsePrefix(a)
		nb, err2 := netip.ParsePrefix(b)
		if !ok || err1 != nil || err2 != nil || ca.Bits() != nb.Bits() || !ca.Addr().Is4() || !nb.Addr().Is4() {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--%s: %q: want cloudCIDR=netCIDR with equal IPv4 prefix lengths", OptAddressMap, kv)
		}
		m = append(m, struct{ cloud, net netip.Prefix }{ca.Masked(), nb.Masked()})
	}
	// The most specific prefix wins (a /32 for the Elastic IP inside a
	// mapped range).
	sort.SliceStable(m, func(i, j int) bool { return m[i].cloud.Bits() > m[j].cloud.Bits() })
	return m, nil
}

func translate(ip string, from, to netip.Prefix) (string, bool) {
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is4() || !from.Contains(a) {
		return "", false
	}
	t, x := to.Addr().As4(), a.As4()
	bits := from.Bits()
	var out [4]byte
	for i := 0; i < 4; i++ {
		maskBits := min(max(bits-8*i, 0), 8)
		mask := byte(0xff << (8 - maskBits))
		out[i] = t[i]&mask | x[i]&^mask
	}
	return netip.AddrFrom4(out).String(), true
}

// toNet is the address hamaster uses for a cloud address.
func (m addrMap) toNet(ip string) string {
	for _, e := range m {
		if v, ok := translate(ip, e.cloud, e.net); ok {
			return v
		}
	}
	return ip
}

// toCloud is the cloud address of an address hamaster uses.
func (m addrMap) toCloud(ip string) string {
	for _, e := range m {
		if v, ok := translate(ip, e.net, e.cloud); ok {
			return v
		}
	}
	return ip
}
