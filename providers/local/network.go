package local

import (
	"fmt"
	"net/netip"

	"github.com/hamaster/hamaster/errkind"
)

// Where a local cluster's replicas live (ClusterInfo.Addresses).
const (
	// AddressesLoopback: 127.0.N.0/24. Linux routes all of 127.0.0.0/8 to
	// lo, so nothing is configured and no privilege is needed. The default
	// for the apiserver stand-in.
	AddressesLoopback = "loopback"
	// AddressesBenchmark: 198.18.N.0/24, from RFC 2544's benchmarking
	// range (198.18.0.0/15, never routed on the internet), made local by
	// adding 198.18.N.1/24 to lo (labelled lo:hamaster): on a loopback
	// device the kernel makes the whole prefix local, as 127.0.0.1/8 does
	// for 127.0.0.0/8. Needs root (CAP_NET_ADMIN) once, at 'local up';
	// 'local down' removes the address. The default for the real
	// kube-apiserver, which refuses to publish a loopback address in the
	// "kubernetes" Endpoints (ValidateEndpointIP in
	// pkg/apis/core/validation), so with loopback addresses 'kubectl get
	// endpoints kubernetes' would list none.
	AddressesBenchmark = "benchmark"
)

// loLabel marks the addresses hamaster adds to lo (ip addr show lo).
const loLabel = "lo:hamaster"

// Prefix is the cluster's /24: 127.0.N.0/24 or 198.18.N.0/24.
func (ci ClusterInfo) Prefix() netip.Prefix {
	return netip.PrefixFrom(ci.Address(0), 24)
}

// Address is host x of the cluster's /24 (.1 is the static IP, replicas
// from .2).
func (ci ClusterInfo) Address(x int) netip.Addr {
	if ci.Benchmark() {
		return netip.AddrFrom4([4]byte{198, 18, byte(ci.Subnet), byte(x)})
	}
	return netip.AddrFrom4([4]byte{127, 0, byte(ci.Subnet), byte(x)})
}

// Benchmark reports whether the replicas live in 198.18.N.0/24.
func (ci ClusterInfo) Benchmark() bool { return ci.Addresses == AddressesBenchmark }

// loAddress is the address Up adds to lo for a benchmark-range cluster.
func (ci ClusterInfo) loAddress() netip.Prefix { return netip.PrefixFrom(ci.Address(1), 24) }

// ensureNetwork makes the cluster's addresses local: nothing for
// loopback; 198.18.N.1/24 on lo for benchmark (idempotent; run before any
// process of the cluster starts, so a reboot that dropped the address is
// repaired by the next command that boots a replica).
func (p *Provider) ensureNetwork() error {
	if !p.info.Benchmark() {
		return nil
	}
	if err := addLoAddress(p.info.loAddress()); err != nil {
		return errkind.Errorf(errkind.FailedPrecondition, "cluster %s lives in %s: add %s to lo: %v (needs root or CAP_NET_ADMIN; or create the cluster with 'local up --addresses %s')",
			p.cluster, p.info.Prefix(), p.info.loAddress(), err, AddressesLoopback)
	}
	return nil
}

// removeNetwork undoes ensureNetwork (idempotent).
func (p *Provider) removeNetwork() error {
	if !p.info.Benchmark() {
		return nil
	}
	if err := delLoAddress(p.info.loAddress()); err != nil {
		return fmt.Errorf("remove %s from lo (remove it by hand with 'ip addr del %s dev lo'): %w", p.info.loAddress(), p.info.loAddress(), err)
	}
	return nil
}
