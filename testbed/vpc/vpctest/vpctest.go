// Package vpctest starts a testbed/vpc VPC for a test: a random ID and
// external /24 (so tests run in parallel), root and iproute2 checked
// first, and everything removed, and checked removed, when the test ends.
package vpctest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/testbed/vpc"
)

// VPC is a running test VPC.
type VPC struct {
	*vpc.VPC
	// ID is the namespaces' ID (hm-<ID>-…, uplink hm<ID>u).
	ID string
	// Third is the third octet of the external range 198.18.Third.0/24
	// (RFC 2544's test-network range: nothing of it leaves the
	// namespaces).
	Third int
}

// Need fails the test under CI and skips it elsewhere when the machine
// cannot make network namespaces (not root), and fails it when iproute2's
// ip is missing.
func Need(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("network namespaces need root; CI runs as root")
		}
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("iproute2's ip is needed (apt-get install iproute2): %v", err)
	}
}

// New checks Need, then creates a VPC with internal subnet 10.128.0.0/20.
func New(ctx context.Context, t testing.TB, prefix string) *VPC {
	t.Helper()
	return NewSubnet(ctx, t, prefix, netip.MustParsePrefix("10.128.0.0/20"))
}

// NewSubnet is New with another internal range (an EC2 VPC's CIDR, whose
// subnets are ranges of it).
func NewSubnet(ctx context.Context, t testing.TB, prefix string, subnet netip.Prefix) *VPC {
	t.Helper()
	Need(t)
	// Tests in other packages run at the same time and pick their ranges
	// the same way: a range (or ID) already taken makes `ip` answer "File
	// exists"; try another.
	var v *VPC
	for attempt := 1; ; attempt++ {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		x, _ := rand.Int(rand.Reader, big.NewInt(140))
		v = &VPC{ID: prefix + hex.EncodeToString(b), Third: 100 + int(x.Int64())}
		var err error
		v.VPC, err = vpc.New(ctx, vpc.Options{ID: v.ID, Subnet: subnet, External: netip.MustParsePrefix(fmt.Sprintf("198.18.%d.0/24", v.Third))})
		if err == nil {
			break
		}
		if attempt == 20 || !strings.Contains(err.Error(), "File exists") {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if err := v.Close(); err != nil {
			t.Error(err)
		}
		out, _ := exec.Command("ip", "netns", "list").Output()
		if strings.Contains(string(out), "hm-"+v.ID) {
			t.Errorf("namespaces left: %s", out)
		}
	})
	return v
}

// External is the external address 198.18.Third.host.
func (v *VPC) External(host byte) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte(v.Third), host})
}

// Routed reports, without sending a packet, whether the operator's
// namespace routes addr into this VPC (through its uplink).
func (v *VPC) Routed(addr netip.Addr) (bool, string) {
	r, err := exec.Command("ip", "route", "get", addr.String()).CombinedOutput()
	return err == nil && strings.Contains(string(r), "hm"+v.ID+"u"), strings.TrimSpace(string(r))
}
