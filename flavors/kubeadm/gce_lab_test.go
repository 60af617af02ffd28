//go:build gcekubeadm

// The GCE fake's kubeadm tier ('make test-gce-kubeadm', as root): the
// flavor on a master 0 made from a kubeadm image and initialised by the
// real kubeadm init over SSH, and a replica the GCE provider clones from
// it that joins.

package kubeadm_test

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors/flavortest"
	"github.com/hamaster/hamaster/flavors/kubeadm"
	"github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/testbed/gce/gcetest"
	"github.com/hamaster/hamaster/testbed/kubeadmhost"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

const gceVersion = "v1.33.13"

// The flavor on the GCE fake: master 0 is a VM from a kubeadm image,
// initialised by the operator's kubeadm init over SSH with the static IP
// (<master>-ip, master 0's access config) as its controlPlaneEndpoint;
// the flavor conformance suite on it; a replica the GCE provider creates
// as a clone (Instances.Create with the flavor's CloneTemplate: the
// machine only, so the same image) joins (two voters, its Node); then it
// leaves (member removed first, kubeadm reset, Node deleted) and its VM is
// deleted.
func TestFlavorOnGCEKubeadmMasters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	metallabtest.Need(t)
	kubeletProgram, binDir := metallabtest.Kubeadm(t, gceVersion)
	c := gcetest.UpKubeadm(t, "kadm", gcetest.KubeadmOptions{Version: gceVersion, Kubelet: kubeletProgram, BinDir: binDir})
	endpoint := net.JoinHostPort(c.StaticIP, "6443")
	out, took, err := c.KubeadmInit(ctx, kubeadmhost.Init{Version: gceVersion, ControlPlaneEndpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubeadm init of %s (controlPlaneEndpoint %s) took %v", c.Master, endpoint, took.Round(time.Millisecond))
	if !strings.Contains(out, "Your Kubernetes control-plane has initialized successfully") {
		t.Fatalf("kubeadm init output:\n%s", out)
	}
	// kubeadm wrote the VM's own /etc/kubernetes, never the machine's.
	if _, err := os.Stat("/etc/kubernetes/admin.conf"); err == nil {
		t.Error("the machine's own /etc/kubernetes/admin.conf exists after kubeadm init on a VM")
	}

	pp, err := gce.New(ctx, c.Settings)
	if err != nil {
		t.Fatal(err)
	}
	p := pp.(*gce.Provider)
	defer p.Close()
	f, err := kubeadm.New(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	registry.Attach(p, f)
	replica := c.Master + "-abc"

	t.Run("conformance", func(t *testing.T) {
		flavortest.Run(t, flavortest.Harness{Provider: p, Flavor: f, ReplicaName: replica})
	})
	if t.Failed() {
		return
	}
	if v, err := f.RunningVersion(ctx, c.Master); err != nil || v != gceVersion {
		t.Errorf("RunningVersion(%s) = %q, %v", c.Master, v, err)
	}
	if err := f.CheckVersion(ctx, "v1.35.0"); err == nil {
		t.Error("CheckVersion(v1.35.0) on v1.33 masters: no error (kubeadm upgrades one minor at a time)")
	}

	run := func(machine, cmd string) string {
		t.Helper()
		return flavortest.RunOn(ctx, t, p, machine, cmd)
	}
	members := func() []etcdmember.Member { t.Helper(); return flavortest.Members(ctx, t, f) }
	nodes := func() string {
		return run(c.Master, "kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -o name | sort | tr '\\n' ' '")
	}

	// A new replica: the provider's clone of master 0 (the image, machine
	// type, tags, the machine's metadata), then kubeadm join.
	master, err := p.Instances().Get(ctx, c.Master)
	if err != nil {
		t.Fatal(err)
	}
	if got := master.Template.Machine[gce.MachineImage]; !strings.HasSuffix(got, "/"+c.Image) {
		t.Fatalf("master 0's image = %q; want %s", got, c.Image)
	}
	tmpl, err := f.CloneTemplate(ctx, master.Template, replica, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r, err := p.Instances().Create(ctx, replica, "", tmpl)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Create(%s) took %v (zone %s, %s, external %s)", replica, time.Since(start).Round(time.Millisecond), r.Zone, r.Address, r.External)
	if got := r.Template.Machine[gce.MachineImage]; got != master.Template.Machine[gce.MachineImage] {
		t.Errorf("the clone's image = %q; want master 0's %q", got, master.Template.Machine[gce.MachineImage])
	}
	if v := run(replica, "kubeadm version -o short"); v != gceVersion {
		t.Errorf("kubeadm on the clone: %q; want %s (the image's)", v, gceVersion)
	}
	start = time.Now()
	if err := f.Join(ctx, r, 0); err != nil {
		t.Fatalf("Join(%s): %v", replica, err)
	}
	t.Logf("Join(%s) took %v", replica, time.Since(start).Round(time.Millisecond))
	flavortest.Voters(ctx, t, f, 2) // after the join
	if n := nodes(); !strings.Contains(n, "node/"+replica) || !strings.Contains(n, "node/"+c.Master) {
		t.Errorf("Nodes after the join: %s", n)
	}
	// The joined master serves the cluster on its own address too.
	if _, err := f.RunningVersion(ctx, replica); err != nil {
		t.Errorf("RunningVersion(%s): %v", replica, err)
	}

	// The static IP moves to the provider's load balancer (lb.Promote, as
	// add-replica does: master 0 gets an ephemeral address), the replica
	// its second target: the controlPlaneEndpoint both masters' kubeconfigs
	// name is then served by the LB on 6443, health-checked on /readyz.
	start = time.Now()
	l := p.LoadBalancer()
	if err := lb.Promote(ctx, p.StaticIP(), l, lb.Target{Name: master.Name, Address: master.Address}); err != nil {
		t.Fatalf("promote the static IP to the load balancer: %v", err)
	}
	if err := l.AddTarget(ctx, lb.Target{Name: replica, Address: r.Address}); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if err := wait.Until(wctx, 200*time.Millisecond, "both masters healthy behind the load balancer", func() (bool, error) {
		st, err := l.Get(wctx)
		if err != nil {
			return false, nil
		}
		healthy := 0
		for _, th := range st.Targets {
			if th.Healthy {
				healthy++
			}
		}
		return healthy == 2, nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("the static IP moved to the load balancer, both masters healthy, in %v", time.Since(start).Round(time.Millisecond))
	for _, m := range []string{c.Master, replica} {
		// admin.conf's server is the controlPlaneEndpoint: the LB now.
		if got := run(m, "kubectl --kubeconfig /etc/kubernetes/admin.conf get node "+m+" -o name"); got != "node/"+m {
			t.Errorf("kubectl on %s through the load balancer: %q", m, got)
		}
	}

	// A second clone's join loses its kubelet half-way (systemctl stop
	// kubelet once its etcd member exists): Join fails within its bound
	// and leaves no member and no Node; the kubelet started again, the
	// next join of that VM succeeds.
	third := c.Master + "-def"
	r3, err := p.Instances().Create(ctx, third, "", tmpl)
	if err != nil {
		t.Fatal(err)
	}
	joined := make(chan error, 1)
	go func() { joined <- f.Join(ctx, r3, time.Minute) }() // a healthy join takes ~20 s here
	if err := wait.Until(wctx, 200*time.Millisecond, third+"'s etcd member", func() (bool, error) {
		for _, m := range members() {
			if strings.Contains(strings.Join(m.PeerURLs, ","), r3.Address) {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	if !c.Fake.StopKubelet(r3.Zone, third) {
		t.Fatalf("%s has no kubelet service", third)
	}
	if err := <-joined; err == nil {
		t.Fatalf("Join(%s) with its kubelet stopped half-way succeeded", third)
	} else {
		t.Logf("Join(%s) failed as it should: %v", third, err)
	}
	for _, m := range members() {
		if strings.Contains(strings.Join(m.PeerURLs, ","), r3.Address) {
			t.Errorf("%s's member %s (learner %v) survived the failed join", third, m.Name, m.Learner)
		}
	}
	if n := nodes(); strings.Contains(n, "node/"+third) {
		t.Errorf("Node %s survived the failed join: %s", third, n)
	}
	if left := run(third, "ls -A /etc/kubernetes/manifests /var/lib/etcd 2>/dev/null | grep -v ':$' | grep -v '^$' || true"); left != "" {
		t.Errorf("%s after the failed join keeps %q", third, left)
	}
	if err := c.Fake.StartKubelet(r3.Zone, third); err != nil {
		t.Fatal(err)
	}
	if err := f.Join(ctx, r3, 0); err != nil {
		t.Fatalf("Join(%s) again: %v", third, err)
	}
	if ms := members(); len(ms) != 3 {
		t.Fatalf("members after %s's second join: %+v", third, ms)
	}
	if err := f.RemoveMember(ctx, r3); err != nil {
		t.Fatal(err)
	}
	if err := f.Leave(ctx, r3); err != nil {
		t.Fatal(err)
	}
	c.Fake.StopKubelet(r3.Zone, third)
	if err := p.Instances().Delete(ctx, third); err != nil {
		t.Fatalf("delete %s: %v", third, err)
	}

	// It leaves: out of the load balancer first, its member removed
	// through master 0, then kubeadm reset, its Node deleted; its VM
	// deleted.
	if err := l.RemoveTarget(ctx, replica); err != nil {
		t.Fatal(err)
	}
	if err := f.RemoveMember(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := f.Leave(ctx, r); err != nil {
		t.Fatal(err)
	}
	if ms := members(); len(ms) != 1 {
		t.Errorf("members after %s left: %+v", replica, ms)
	}
	if n := nodes(); strings.Contains(n, "node/"+replica) {
		t.Errorf("Nodes after %s left: %s", replica, n)
	}
	c.Fake.StopKubelet(r.Zone, replica) // systemctl stop kubelet, before the VM goes
	if err := p.Instances().Delete(ctx, replica); err != nil {
		t.Fatalf("delete %s: %v", replica, err)
	}
}
