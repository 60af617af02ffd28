// Package flavortest is the conformance suite every flavor passes on each
// provider it supports, real or fake: its etcd clusters reached through
// the provider's way in, its member naming matching what the masters run,
// a clone that leaves its source alone, and the apiserver's certificate
// verified the way the workflows' probes verify it.
package flavortest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"maps"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/providertest"
)

// Harness is what a flavor's test on one provider gives the suite.
type Harness struct {
	// Provider is bound to a cluster with exactly one running replica
	// (master 0), built by the tool the flavor names.
	Provider providers.Provider
	// Flavor is the flavor under test, bound to Provider.
	Flavor flavors.Flavor
	// ClusterCA verifies the apiservers' certificates when the flavor
	// does not carry its own (hamaster issues them); nil otherwise.
	ClusterCA *x509.CertPool
	// ReplicaName names the replica a clone is made for (its address is
	// reserved and released by the suite); providers that find masters by
	// name give one of theirs.
	ReplicaName string
	// Timeout bounds each call (default 2 minutes).
	Timeout time.Duration
}

// Run runs the suite. Subtests run in order: they share the cluster.
func Run(t *testing.T, h Harness) {
	if h.Timeout == 0 {
		h.Timeout = 2 * time.Minute // also the cleanup's bound
	}
	ctx := providertest.CallContext(h.Timeout)
	f, p := h.Flavor, h.Provider
	var master providers.Replica
	members := map[string][]etcdmember.Member{}

	t.Run("registered and found", func(t *testing.T) {
		if !slices.Contains(registry.Names(), f.Name()) {
			t.Fatalf("flavor %q is not among registry.Names() %v", f.Name(), registry.Names())
		}
		g, err := registry.Open(f.Name(), p, nil)
		if err != nil || g.Name() != f.Name() {
			t.Fatalf("registry.Open(%q) = %v, %v", f.Name(), g, err)
		}
		if got := registry.Detect(p); got != f.Name() {
			t.Errorf("the %s provider finds %q on masters built as %q", p.Name(), got, f.Name())
		}
		rs, err := p.Instances().List(ctx(t))
		if err != nil || len(rs) != 1 || !rs[0].Running() {
			t.Fatalf("List = %+v, %v; want master 0 running alone", rs, err)
		}
		master = rs[0]
	})
	t.Run("every etcd cluster has master 0's member, named the flavor's way", func(t *testing.T) {
		cs := f.EtcdClusters()
		if len(cs) == 0 || cs[0] != flavors.EtcdMain {
			t.Fatalf("EtcdClusters() = %v; want %q first", cs, flavors.EtcdMain)
		}
		for _, c := range cs {
			cli, err := f.EtcdCluster(ctx(t), c)
			if err != nil {
				t.Fatalf("etcd %s: %v", c, err)
			}
			ms, err := cli.Members(ctx(t))
			cli.Close()
			if err != nil {
				t.Fatalf("etcd %s members: %v", c, err)
			}
			name, peer := f.EtcdMember(c, master.Name, master.Address)
			if n2, p2 := f.EtcdMember(c, master.Name, master.Address); n2 != name || p2 != peer {
				t.Errorf("EtcdMember(%s) is not deterministic: %s %s then %s %s", c, name, peer, n2, p2)
			}
			byName, ok := providers.FindMember(ms, name, "")
			if !ok || !byName.Healthy {
				t.Fatalf("etcd %s members %+v: none healthy named %q (EtcdMember)", c, ms, name)
			}
			if _, ok := providers.FindMember(ms, "", peer); !ok {
				t.Errorf("etcd %s members %+v: none with peer URL %s (EtcdMember)", c, ms, peer)
			}
			members[c] = ms
		}
	})
	t.Run("an unknown cluster and excluding every master are refused", func(t *testing.T) {
		if cli, err := f.EtcdCluster(ctx(t), "no-such-cluster"); err == nil {
			cli.Close()
			t.Error("etcd cluster no-such-cluster: connected")
		}
		cli, err := f.EtcdCluster(ctx(t), flavors.EtcdMain, master.Name)
		if err == nil {
			cli.Close()
			t.Fatal("etcd through no master: connected")
		}
		if !errors.Is(err, errkind.FailedPrecondition) {
			t.Errorf("etcd through no master: %v; want errkind.FailedPrecondition", err)
		}
	})
	t.Run("a clone leaves its source alone and changes the etcd environment (or, for a joining flavor, carries the machine only)", func(t *testing.T) {
		addr, err := p.Instances().ReserveAddress(ctx(t), h.ReplicaName, master.Zone)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c, cancel := context.WithTimeout(context.Background(), h.Timeout)
			defer cancel()
			if err := p.Instances().ReleaseAddress(c, h.ReplicaName); err != nil {
				t.Errorf("release %s's address: %v", h.ReplicaName, err)
			}
		})
		src, orig := master.Template.Clone(), master.Template.Clone()
		for _, ms := range [][]etcdmember.Member{nil, members[flavors.EtcdMain]} {
			got, err := f.CloneTemplate(ctx(t), src, h.ReplicaName, addr, map[string][]etcdmember.Member{flavors.EtcdMain: ms}, nil)
			if err != nil {
				t.Fatalf("CloneTemplate for %s at %s: %v", h.ReplicaName, addr, err)
			}
			if !reflect.DeepEqual(src, orig) {
				t.Fatal("CloneTemplate changed its source")
			}
			if got.Version != src.Version || !maps.Equal(got.Machine, src.Machine) {
				t.Errorf("clone: version %q machine %v; want the source's %q %v", got.Version, got.Machine, src.Version, src.Machine)
			}
			if flavors.CapabilitiesOf(f).Joiner != nil {
				// The new master joins with its own tool: nothing of the
				// source's configuration or keys travels in its template.
				if len(got.Env) != 0 || len(got.Files) != 0 || len(got.ExtraArgs) != 0 {
					t.Errorf("clone of a joining flavor carries env %v, files %v, args %v; want the machine only", slices.Collect(maps.Keys(got.Env)), slices.Collect(maps.Keys(got.Files)), got.ExtraArgs)
				}
			} else if maps.Equal(got.Env, src.Env) {
				t.Error("clone: the environment is the source's: a new master needs its own etcd settings")
			}
		}
	})
	t.Run("master 0's apiserver serves APIServerPort, the provider's port", func(t *testing.T) {
		u, err := url.Parse(p.APIServerURL(master))
		if err != nil {
			t.Fatal(err)
		}
		want := strconv.Itoa(f.APIServerPort())
		if u.Port() != want {
			t.Errorf("APIServerURL(master 0) = %s; want port %s, the flavor's", u, want)
		}
		if got := providers.APIServerPortOf(p); got != f.APIServerPort() {
			t.Errorf("the provider builds its LB and probes for port %d; want the flavor's %d", got, f.APIServerPort())
		}
	})
	t.Run("the apiserver's certificate verifies for APIServerName", func(t *testing.T) {
		pool := h.ClusterCA
		if flavors.CapabilitiesOf(f).ReplicaCertIssuer == nil { // the masters carry their own
			pemBytes, err := f.MasterCA(ctx(t))
			if err != nil {
				t.Fatalf("MasterCA: %v", err)
			}
			pool = x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pemBytes) {
				t.Fatal("MasterCA is not PEM")
			}
		} else if pool == nil {
			t.Fatal("the harness gives no ClusterCA for a flavor whose certificates hamaster issues")
		}
		u, err := url.Parse(p.APIServerURL(master))
		if err != nil {
			t.Fatal(err)
		}
		dial := (&net.Dialer{}).DialContext
		if d := providers.OwnCapabilitiesOf(p).APIServerDialer; d != nil {
			dial = d.DialAPIServer
		}
		raw, err := dial(ctx(t), "tcp", u.Host)
		if err != nil {
			t.Fatalf("dial %s: %v", u.Host, err)
		}
		name := f.APIServerName()
		if name == "" {
			name = u.Hostname()
		}
		conn := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: name, MinVersion: tls.VersionTLS12})
		defer conn.Close()
		if err := conn.HandshakeContext(ctx(t)); err != nil {
			t.Errorf("TLS to %s verified for %q: %v", u.Host, name, err)
		}
	})
	t.Run("the running version checks", func(t *testing.T) {
		if master.Template.Version == "" {
			return // a devel build names no version: nothing to check
		}
		if err := f.CheckVersion(ctx(t), master.Template.Version); err != nil {
			t.Errorf("CheckVersion(%s), master 0's own: %v", master.Template.Version, err)
		}
	})
}
