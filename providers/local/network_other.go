//go:build !linux

package local

import (
	"errors"
	"net/netip"
)

func errBenchmarkLinux() error {
	return errors.New("the benchmark address range is made local with netlink, which only Linux has")
}

func addLoAddress(netip.Prefix) error { return errBenchmarkLinux() }
func delLoAddress(netip.Prefix) error { return errBenchmarkLinux() }
func loAddressIn(netip.Prefix) (netip.Prefix, bool, error) {
	return netip.Prefix{}, false, nil
}
