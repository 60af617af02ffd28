//go:build metallab

// The metal lab's tier ('make test-metal', as root): the flavor on a
// master built by the real kubeadm init, on the metal provider's hosts.

package kubeadm_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/flavors/flavortest"
	"github.com/hamaster/hamaster/flavors/kubeadm"
	"github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/metal"
	"github.com/hamaster/hamaster/testbed/kubelet"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

const labVersion = "v1.33.13"

// The flavor on a kubeadm master 0 (kubeadm init with the VIP as its
// controlPlaneEndpoint, the VIP put on host-1 by hand): the flavor
// conformance suite; Join of host-2 (two voters, its Node); a join
// whose kubelet dies half-way leaves no member and no Node, and the next
// join of that host succeeds; RemoveMember + Leave, and the host
// released clean.
func TestFlavorOnKubeadmMasters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	lab, p, run := kubeadmHosts(ctx, t, metallabtest.KubeadmOptions(t, 3, labVersion))
	h1, h2, h3 := lab.Hosts[0], lab.Hosts[1], lab.Hosts[2]
	run(h1.Name, fmt.Sprintf("ip addr add %s/24 dev eth0", lab.VIP))
	if _, err := lab.KubeadmInit(ctx, h1, metallab.KubeadmInit{Version: labVersion, ControlPlaneEndpoint: lab.VIPEndpoint()}); err != nil {
		t.Fatal(err)
	}
	f, err := kubeadm.New(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	registry.Attach(p, f)

	t.Run("conformance", func(t *testing.T) {
		flavortest.Run(t, flavortest.Harness{Provider: p, Flavor: f, ReplicaName: h3.Name})
	})
	if t.Failed() {
		return
	}
	if v, err := f.RunningVersion(ctx, h1.Name); err != nil || v != labVersion {
		t.Errorf("RunningVersion(host-1) = %q, %v", v, err)
	}
	if err := f.CheckVersion(ctx, "v1.35.0"); err == nil {
		t.Error("CheckVersion(v1.35.0) on v1.33 masters: no error (kubeadm upgrades one minor at a time)")
	}
	if err := f.CheckVersion(ctx, "v1.34.4"); err != nil {
		t.Errorf("CheckVersion(v1.34.4): %v", err)
	}

	members := func() []etcdmember.Member { t.Helper(); return flavortest.Members(ctx, t, f) }
	nodes := func() string {
		return run(h1.Name, "kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -o name | sort | tr '\\n' ' '")
	}
	claim := func(h *metallab.Host) providers.Replica { t.Helper(); return claimHost(ctx, t, p, h) }

	// host-2 joins.
	start := time.Now()
	if err := f.Join(ctx, claim(h2), 0); err != nil {
		t.Fatalf("Join(host-2): %v", err)
	}
	t.Logf("Join(host-2) took %v", time.Since(start).Round(time.Millisecond))
	flavortest.Voters(ctx, t, f, 2) // after the join
	if r, err := p.Instances().Get(ctx, h2.Name); err != nil || !r.Running() {
		t.Errorf("host-2 after its join: %+v, %v; want running", r, err)
	}
	// status's kubeadm view of the two masters, against their files.
	checkView(ctx, t, f, p, lab.VIPEndpoint(), h1.Name, h2.Name)

	// host-3's join loses its kubelet half-way (once its etcd member
	// exists): no member, no Node, a clean host afterwards.
	r3 := claim(h3)
	joined := make(chan error, 1)
	go func() { joined <- f.Join(ctx, r3, 2*time.Minute) }() // a healthy join takes 20-40 s here
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer wcancel()
	if err := wait.Until(wctx, 200*time.Millisecond, "host-3's etcd member", func() (bool, error) {
		for _, m := range members() {
			if strings.Contains(strings.Join(m.PeerURLs, ","), h3.Addr.String()) {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	lab.StopKubelet(h3)
	if err := <-joined; err == nil {
		t.Fatal("Join(host-3) with its kubelet stopped half-way succeeded")
	} else {
		t.Logf("Join(host-3) failed as it should: %v", err)
	}
	for _, m := range members() {
		if strings.Contains(strings.Join(m.PeerURLs, ","), h3.Addr.String()) {
			t.Errorf("host-3's member %s (learner %v) survived the failed join", m.Name, m.Learner)
		}
	}
	if n := nodes(); strings.Contains(n, "node/host-3") {
		t.Errorf("Node host-3 survived the failed join: %s", n)
	}
	if left := run(h3.Name, "ls -A /etc/kubernetes/manifests /var/lib/etcd 2>/dev/null | grep -v ':$' | grep -v '^$' || true"); left != "" {
		t.Errorf("host-3 after the failed join keeps %q", left)
	}
	// Its kubelet back (the operator restarts the service), the next
	// join succeeds.
	if err := lab.Install(ctx, h3, labVersion); err != nil {
		t.Fatal(err)
	}
	if err := f.Join(ctx, r3, 0); err != nil {
		t.Fatalf("Join(host-3) again: %v", err)
	}
	if ms := members(); len(ms) != 3 {
		t.Fatalf("members after host-3's second join: %+v", ms)
	}

	// host-2 leaves: its member removed through the others first, then
	// kubeadm reset, its Node deleted, the host released clean.
	r2, err := p.Instances().Get(ctx, h2.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.RemoveMember(ctx, r2); err != nil {
		t.Fatal(err)
	}
	// Between the two: kubeadm's view names host-2's Node without a
	// member, and the command.
	if v, err := f.View(ctx); err != nil {
		t.Errorf("View with host-2's member removed: %v", err)
	} else if !slices.ContainsFunc(v.Problems, func(p string) bool {
		return strings.Contains(p, "control-plane Node host-2 has no etcd member: `hamaster remove-replica --name host-2`")
	}) {
		t.Errorf("View with host-2's member removed: problems %q", v.Problems)
	}
	if err := f.Leave(ctx, r2); err != nil {
		t.Fatal(err)
	}
	if ms := members(); len(ms) != 2 {
		t.Errorf("members after host-2 left: %+v", ms)
	}
	if n := nodes(); strings.Contains(n, "node/host-2") || !strings.Contains(n, "node/host-3") {
		t.Errorf("Nodes after host-2 left: %s", n)
	}
	lab.StopKubelet(h2) // the operator's systemctl stop kubelet, before the host is handed back
	if err := p.Instances().Delete(ctx, h2.Name); err != nil {
		t.Fatalf("release host-2: %v", err)
	}
}

// checkView checks the flavor's View of masters (healthy, joined)
// against what is on them: the endpoint and version kubeadm init was
// given, every master's Node Ready with the control-plane role, each
// static pod's config.hash the one the kubelet computes from the
// manifest on that master, the apiserver certificate's and the CA's
// expiry (as check-expiration reports them) those of the files under
// /etc/kubernetes/pki there, and no problem.
func checkView(ctx context.Context, t *testing.T, f *kubeadm.Flavor, p *metal.Provider, endpoint string, masters ...string) {
	t.Helper()
	start := time.Now()
	v, err := f.View(ctx)
	if err != nil {
		t.Fatalf("View: %v", err)
	}
	t.Logf("View took %v: %+v", time.Since(start).Round(time.Millisecond), v)
	if v.Endpoint != endpoint || v.Version != labVersion {
		t.Errorf("View: endpoint %q version %q; want %q %q", v.Endpoint, v.Version, endpoint, labVersion)
	}
	if len(v.Problems) > 0 {
		t.Errorf("View of healthy masters: problems %q", v.Problems)
	}
	// Built with the endpoint from the start: nothing names one master.
	if len(v.Pinned) > 0 || v.PinnedError != "" {
		t.Errorf("View of masters built with an endpoint: pinned %v (%s)", v.Pinned, v.PinnedError)
	}
	notAfter := func(host, path string) time.Time {
		t.Helper()
		out, _, err := p.RunOnMachine(ctx, host, "cat "+path)
		if err != nil {
			t.Fatalf("%s: cat %s: %v", host, path, err)
		}
		b, _ := pem.Decode(out)
		if b == nil {
			t.Fatalf("%s: %s is not PEM", host, path)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c.NotAfter
	}
	for _, name := range masters {
		i := slices.IndexFunc(v.Masters, func(m flavors.MasterView) bool { return m.Replica == name })
		if i < 0 {
			t.Errorf("View has no master %s: %+v", name, v.Masters)
			continue
		}
		m := v.Masters[i]
		if m.Node != name || !m.NodeReady || !m.ControlPlane || m.KubeletVersion != labVersion || m.Error != "" {
			t.Errorf("View of %s: %+v", name, m)
		}
		for _, c := range kubeadm.StaticPodComponents {
			file := kubeadm.ManifestsDir + "/" + c + ".yaml"
			out, _, err := p.RunOnMachine(ctx, name, "cat "+file)
			if err != nil {
				t.Fatalf("%s: cat %s: %v", name, file, err)
			}
			sp, err := kubelet.ParseStaticPod(out, file, m.Node)
			if err != nil {
				t.Fatal(err)
			}
			if m.StaticPods[c] != sp.Hash {
				t.Errorf("View of %s: %s's config.hash %q; the manifest there hashes to %q", name, c, m.StaticPods[c], sp.Hash)
			}
		}
		want := map[string]time.Time{
			"apiserver": notAfter(name, "/etc/kubernetes/pki/apiserver.crt"),
			"ca":        notAfter(name, kubeadm.CACert),
		}
		for _, c := range m.Certificates {
			if w, ok := want[c.Name]; ok {
				// check-expiration prints RFC 3339 seconds.
				if !c.Expires.Equal(w.Truncate(time.Second)) {
					t.Errorf("View of %s: %s expires %v; the file says %v", name, c.Name, c.Expires, w)
				}
				delete(want, c.Name)
			}
		}
		if len(want) > 0 || len(m.Certificates) < 10 {
			t.Errorf("View of %s: certificates %+v; missing %v", name, m.Certificates, want)
		}
	}
}

// kubeadmHosts starts a lab as o says (needing bins on the machine),
// installs labVersion on every host and opens the metal provider on it:
// the lab, the provider (closed at cleanup) and a way to run a command
// on a host that fails the test when it fails.
func kubeadmHosts(ctx context.Context, t *testing.T, o metallab.Options, bins ...string) (*metallab.Lab, *metal.Provider, func(host, cmd string) string) {
	t.Helper()
	lab := metallabtest.StartKubeadm(ctx, t, o, labVersion, bins...)
	pr, err := metal.New(ctx, providers.Settings{Cluster: "lab", StateDir: t.TempDir(), Options: map[string]string{
		metal.OptInventory: lab.InventoryFile, metal.OptSSHKey: lab.ClientKeyFile, metal.OptSSHKnownHosts: lab.KnownHostsFile}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	p := pr.(*metal.Provider)
	run := func(host, cmd string) string {
		t.Helper()
		return flavortest.RunOn(ctx, t, p, host, cmd)
	}
	return lab, p, run
}

// claimHost makes a lab host a replica of p's cluster (the metal
// provider's Create claims it from the inventory).
func claimHost(ctx context.Context, t *testing.T, p *metal.Provider, h *metallab.Host) providers.Replica {
	t.Helper()
	r, err := p.Instances().Create(ctx, h.Name, "", providers.Template{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}
