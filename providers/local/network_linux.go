package local

import (
	"errors"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
)

// addLoAddress adds a to lo, labelled loLabel; present already is fine.
func addLoAddress(a netip.Prefix) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	err = netlink.AddrAdd(lo, &netlink.Addr{IPNet: ipNet(a), Label: loLabel})
	if errors.Is(err, syscall.EEXIST) {
		return nil
	}
	return err
}

// delLoAddress removes a from lo; absent already is fine.
func delLoAddress(a netip.Prefix) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	err = netlink.AddrDel(lo, &netlink.Addr{IPNet: ipNet(a)})
	if errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// loAddressIn returns an address of lo inside p, if any.
func loAddressIn(p netip.Prefix) (netip.Prefix, bool, error) {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return netip.Prefix{}, false, err
	}
	addrs, err := netlink.AddrList(lo, netlink.FAMILY_V4)
	if err != nil {
		return netip.Prefix{}, false, err
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		if have := netip.PrefixFrom(ip, ones); have.Overlaps(p) {
			return have, true, nil
		}
	}
	return netip.Prefix{}, false, nil
}

func ipNet(a netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}
}
