package local_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/hamaster/hamaster/flavors/flavortest"
	"github.com/hamaster/hamaster/flavors/hamaster"
	"github.com/hamaster/hamaster/flavors/registry"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/local"
	"github.com/hamaster/hamaster/providers/providertest"
	"github.com/hamaster/hamaster/testbed/local/localtest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, addresses := range []string{local.AddressesLoopback, local.AddressesBenchmark} {
		t.Run(addresses, func(t *testing.T) {
			t.Parallel()
			conformance(t, addresses)
		})
	}
}

func conformance(t *testing.T, addresses string) {
	c := localtest.Up(t, "conformance", localtest.Options{Addresses: addresses})
	pki := filepath.Join(c.Settings.StateDir, c.Settings.Cluster, "pki")
	ca, err := certs.LoadCA(filepath.Join(pki, "ca.crt"), filepath.Join(pki, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	master, err := c.Provider.Instances().Get(context.Background(), local.MasterName("conformance"))
	if err != nil {
		t.Fatal(err)
	}
	if want := c.Provider.Info().Address(2).String(); master.Address != want {
		t.Fatalf("master-0 on %s, want %s (%s)", master.Address, want, addresses)
	}
	t.Run("flavor hamaster", func(t *testing.T) {
		f, err := hamaster.New(c.Provider)
		if err != nil {
			t.Fatal(err)
		}
		registry.Attach(c.Provider, f)
		flavortest.Run(t, flavortest.Harness{Provider: c.Provider, Flavor: f, ClusterCA: ca.Pool(), ReplicaName: "conformance-flavor"})
	})
	providertest.Run(t, providertest.Harness{
		Provider: c.Provider,
		Template: func(t *testing.T, name, address string) providers.Template {
			files, err := hamaster.ReplicaFiles(ca, name, address, certs.APIServerSANs{StaticIP: c.Provider.Info().StaticIP})
			if err != nil {
				t.Fatal(err)
			}
			tmpl := master.Template.Clone()
			tmpl.Files = files
			tmpl.Env[nodeapi.KeyInitialEtcdCluster] = name + "=" + providers.PeerURL(address)
			tmpl.Env[nodeapi.KeyEtcdInitialClusterState] = "new"
			return tmpl
		},
	})
}

func TestStalePIDFileIsNotARunningReplica(t *testing.T) {
	t.Parallel()
	c := localtest.Up(t, "stalepid", localtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := local.MasterName("stalepid")
	// A pid file naming a live process that is not ours (this test).
	pidFile := filepath.Join(c.Settings.StateDir, "stalepid", "replicas", name, "node.pid")
	orig, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pidFile, []byte("1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := c.Provider.Instances().Get(ctx, name)
	if err != nil || r.Running() {
		t.Fatalf("replica with a stale pid file: %+v, %v; want stopped", r, err)
	}
	if err := os.WriteFile(pidFile, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.Provider.Instances().Get(ctx, name); !r.Running() {
		t.Fatalf("replica with its real pid file is %s", r.State)
	}
}

func TestOpenUnknownClusterNamesIt(t *testing.T) {
	t.Parallel()
	_, err := local.New(context.Background(), providers.Settings{Cluster: "nope", StateDir: t.TempDir()})
	if !errors.Is(err, errkind.NotFound) || !strings.Contains(err.Error(), "local up --cluster nope") {
		t.Fatalf("err = %v", err)
	}
}

func TestSubnetConflictRefused(t *testing.T) {
	t.Parallel()
	c := localtest.Up(t, "subnet-a", localtest.Options{})
	s := c.Settings
	s.Cluster = "subnet-b"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := local.Up(ctx, s, local.UpOptions{Certificates: hamaster.ReplicaFiles, Version: "v1.30.2"}, func(string) {})
	if !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), "subnet-a") {
		t.Fatalf("second cluster on the same subnet: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.StateDir, "subnet-b", "replicas")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused up left state behind: %v", err)
	}
}

// TestUpControlPlaneRefusedBeforeAnythingChanges: a bad --control-plane,
// or a real control plane whose version has no kube-apiserver binary, is
// an InvalidArgument naming the flag, and no cluster state is written.
func TestUpControlPlaneRefusedBeforeAnythingChanges(t *testing.T) {
	t.Parallel()
	bins := t.TempDir()
	cases := []struct {
		name    string
		o       local.UpOptions
		wantErr []string
	}{
		{"unknown control plane", local.UpOptions{Certificates: hamaster.ReplicaFiles, Version: "v1.33.13", ControlPlane: "kind"}, []string{"--control-plane", `"kind"`, "standin", "real"}},
		{"unknown address range", local.UpOptions{Certificates: hamaster.ReplicaFiles, Version: "v1.30.2", Addresses: "public"}, []string{"--addresses", `"public"`, "loopback", "benchmark"}},
		{"real without a binary", local.UpOptions{Certificates: hamaster.ReplicaFiles, Version: "v1.30.2", ControlPlane: "real", KubeAPIServerDir: bins}, []string{"--control-plane real --version v1.30.2", "no kube-apiserver", "make kube-apiserver"}},
		// No --version: the newest pinned; the error names what is built
		// here and what 'make kube-apiserver' builds.
		{"real default version not built", local.UpOptions{Certificates: hamaster.ReplicaFiles, ControlPlane: "real", KubeAPIServerDir: bins}, []string{"--version " + nodeapi.NewestPinnedKubeVersion(), "built here: v1.33.13", "'make kube-apiserver' builds " + strings.Join(nodeapi.PinnedKubeVersions(), " and "), "tools/kube-apiserver/build.sh VERSION"}},
	}
	if err := os.MkdirAll(filepath.Join(bins, "v1.33.13"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(nodeapi.KubeAPIServerPath(bins, "v1.33.13"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			state := t.TempDir()
			s := providers.Settings{Cluster: "cp", StateDir: state, Options: map[string]string{local.OptNodeBinary: "/nonexistent"}}
			_, err := local.Up(context.Background(), s, tc.o, func(string) {})
			if !errors.Is(err, errkind.InvalidArgument) {
				t.Fatalf("err = %v, want InvalidArgument", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q does not name %q", err, w)
				}
			}
			if ents, _ := os.ReadDir(state); len(ents) != 0 {
				t.Errorf("state dir has %v after a refused up; want nothing written", ents)
			}
		})
	}
}

// The real apiserver's --service-cluster-ip-range (the node's default)
// must be the range whose first address the certificates cover.
func TestServiceRangeMatchesCertificates(t *testing.T) {
	t.Parallel()
	if nodeapi.DefaultServiceClusterIPRange != certs.DefaultServiceCIDR {
		t.Fatalf("node's default SERVICE_CLUSTER_IP_RANGE %s, certificates' service range %s: the kubernetes service IP would not be in the apiserver certificate",
			nodeapi.DefaultServiceClusterIPRange, certs.DefaultServiceCIDR)
	}
}

// TestBenchmarkAddressesOnLo: a cluster in the benchmark range adds its
// /24 to lo at up (replicas and the static IP in 198.19.N.0/24, none a
// loopback address), refuses a second cluster on the same /24 (another
// state dir: only lo shows it), and removes the address at down.
func TestBenchmarkAddressesOnLo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := localtest.AllocSubnet(t)
	s := providers.Settings{Cluster: "bench", StateDir: t.TempDir(), Options: map[string]string{
		local.OptNodeBinary: localtest.NodeBinary(t),
		local.OptSubnet:     strconv.Itoa(n),
	}}
	t.Cleanup(func() { _ = local.Down(context.Background(), s) })
	p, err := local.Up(ctx, s, local.UpOptions{Certificates: hamaster.ReplicaFiles, Version: "v1.30.2", Addresses: local.AddressesBenchmark, Env: map[string]string{"ETCD_UNSAFE_NO_FSYNC": "true"}}, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	prefix := netip.MustParsePrefix(fmt.Sprintf("198.19.%d.0/24", n))
	info := p.Info()
	if info.StaticIP != fmt.Sprintf("198.19.%d.1", n) || info.Prefix() != prefix {
		t.Fatalf("static IP %s in %s, want 198.19.%d.1 in %s", info.StaticIP, info.Prefix(), n, prefix)
	}
	m, err := p.Instances().Get(ctx, local.MasterName("bench"))
	if err != nil {
		t.Fatal(err)
	}
	if a := netip.MustParseAddr(m.Address); !prefix.Contains(a) || a.IsLoopback() {
		t.Fatalf("master-0 on %s, want a non-loopback address in %s", a, prefix)
	}
	if !loHas(t, prefix) {
		t.Fatalf("lo has no address in %s after up", prefix)
	}
	// The same /24 from another state dir: refused, and nothing written.
	other := s
	other.Cluster, other.StateDir = "bench2", t.TempDir()
	_, err = local.Up(ctx, other, local.UpOptions{Certificates: hamaster.ReplicaFiles, Version: "v1.30.2", Addresses: local.AddressesBenchmark}, func(string) {})
	if !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), prefix.String()) || !strings.Contains(err.Error(), "--subnet") {
		t.Fatalf("second cluster on %s: %v, want InvalidArgument naming it and --subnet", prefix, err)
	}
	if ents, _ := os.ReadDir(other.StateDir); len(ents) != 0 {
		t.Errorf("refused up wrote %v", ents)
	}
	// The record keeps the choice: a later up may not change it.
	if _, err := local.Up(ctx, s, local.UpOptions{Certificates: hamaster.ReplicaFiles, Version: "v1.30.2", Addresses: local.AddressesLoopback}, func(string) {}); !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), "--addresses loopback") {
		t.Fatalf("up with another --addresses: %v", err)
	}
	if err := local.Down(ctx, s); err != nil {
		t.Fatal(err)
	}
	if loHas(t, prefix) {
		t.Fatalf("lo still has an address in %s after down", prefix)
	}
}

func loHas(t *testing.T, p netip.Prefix) bool {
	t.Helper()
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := lo.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP.To4()); ok && p.Contains(ip) {
				return true
			}
		}
	}
	return false
}
