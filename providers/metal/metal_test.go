//go:build metallab

// The metal lab's tier ('make test-metal', as root): the provider on the
// lab's hosts over real SSH.

package metal_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/metal"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

func open(t *testing.T, lab *metallab.Lab, cluster, inventory, knownHosts string) *metal.Provider {
	t.Helper()
	p, err := metal.New(context.Background(), providers.Settings{Cluster: cluster, StateDir: t.TempDir(), Options: map[string]string{
		metal.OptInventory: inventory, metal.OptSSHKey: lab.ClientKeyFile, metal.OptSSHKnownHosts: knownHosts}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p.(*metal.Provider)
}

// Claiming, listing and releasing hosts; a host that another cluster
// claims, that runs a control plane hamaster did not put there, that
// keeps etcd data, that refuses SSH or shows the wrong host key, is
// refused before anything changes.
func TestInstancesOnTheLab(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lab := metallabtest.Start(ctx, t, 4)
	p := open(t, lab, "prod", lab.InventoryFile, lab.KnownHostsFile)
	inst := p.Instances()
	run := func(host, cmd string) {
		t.Helper()
		if _, stderr, err := p.RunOnMachine(ctx, host, cmd); err != nil {
			t.Fatalf("%s: %s: %v %s", host, cmd, err, stderr)
		}
	}

	// host-1 runs a control plane built before hamaster (kubeadm init's
	// master 0: its manifest is what tells it).
	run("host-1", "mkdir -p /etc/kubernetes/manifests && echo 'kind: Pod' > /etc/kubernetes/manifests/kube-apiserver.yaml && mkdir -p /var/lib/etcd/member")
	// host-3 is another cluster's; host-4 keeps etcd data.
	run("host-3", "mkdir -p /var/lib/hamaster && echo staging > "+metal.Claim)
	run("host-4", "mkdir -p /var/lib/etcd/member")

	rs, err := inst.List(ctx)
	if err != nil || len(rs) != 1 || rs[0].Name != "host-1" || !rs[0].Running() {
		t.Fatalf("List = %+v, %v; want host-1 running alone", rs, err)
	}
	if free, err := p.FreeHost(ctx, ""); err != nil || free != "host-2" {
		t.Errorf("FreeHost = %q, %v; want host-2", free, err)
	}
	// Listed once, host-1 is recorded as prod's: with its apiserver's
	// manifest set aside (as stop-replica and a restart after
	// rotate-certs do) it stays listed, where a cluster that never
	// listed it cannot tell it from a host keeping etcd data.
	run("host-1", "mv /etc/kubernetes/manifests/kube-apiserver.yaml /etc/kubernetes/kube-apiserver.yaml.aside")
	if rs, err := inst.List(ctx); err != nil || len(rs) != 1 || rs[0].Name != "host-1" || !rs[0].Running() {
		t.Errorf("List with host-1's manifest aside = %+v, %v; want host-1 running", rs, err)
	}
	if r, err := inst.Get(ctx, "host-1"); err != nil || !r.Running() {
		t.Errorf("Get(host-1) with its manifest aside = %+v, %v; want running", r, err)
	}
	if free, err := p.FreeHost(ctx, ""); err != nil || free != "host-2" {
		t.Errorf("FreeHost with host-1's manifest aside = %q, %v; want host-2", free, err)
	}
	if rs, err := open(t, lab, "prod", lab.InventoryFile, lab.KnownHostsFile).Instances().List(ctx); err != nil || len(rs) != 0 {
		t.Errorf("List by a new state directory with host-1's manifest aside = %+v, %v; want none", rs, err)
	}
	run("host-1", "mv /etc/kubernetes/kube-apiserver.yaml.aside /etc/kubernetes/manifests/kube-apiserver.yaml")
	for _, tc := range []struct{ host, want string }{
		{"host-1", "already runs a control plane"},
		{"host-3", `claimed by cluster "staging"`},
		{"host-4", "keeps etcd data"},
		{"host-9", "not in the metal inventory"},
	} {
		_, err := inst.ReserveAddress(ctx, tc.host, "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReserveAddress(%s) = %v; want %q", tc.host, err, tc.want)
		}
	}

	// host-2: reserved, claimed (provisioning until its flavor joins it),
	// then running once a control plane runs there.
	addr, err := inst.ReserveAddress(ctx, "host-2", "")
	if err != nil || addr != lab.Host("host-2").Addr.String() {
		t.Fatalf("ReserveAddress(host-2) = %q, %v", addr, err)
	}
	for range 2 {
		r, err := inst.Create(ctx, "host-2", "", providers.Template{})
		if err != nil || r.State != providers.StateProvisioning {
			t.Fatalf("Create(host-2) = %+v, %v; want provisioning", r, err)
		}
	}
	run("host-2", "mkdir -p /etc/kubernetes/manifests && echo 'kind: Pod' > /etc/kubernetes/manifests/kube-apiserver.yaml")
	if r, err := inst.Get(ctx, "host-2"); err != nil || !r.Running() {
		t.Fatalf("Get(host-2) = %+v, %v; want running", r, err)
	}
	// Another cluster on the same inventory does not see it as free.
	other := open(t, lab, "staging", lab.InventoryFile, lab.KnownHostsFile)
	if _, err := other.Instances().ReserveAddress(ctx, "host-2", ""); err == nil {
		t.Error("cluster staging reserved prod's host-2")
	}

	// Release refuses while the control plane is there, then succeeds
	// and leaves nothing of hamaster's on the host.
	if err := inst.Delete(ctx, "host-2"); !errors.Is(err, errkind.FailedPrecondition) {
		t.Fatalf("Delete(host-2) with a control plane = %v; want FailedPrecondition", err)
	}
	run("host-2", "rm -rf /etc/kubernetes/manifests")
	for range 2 {
		if err := inst.Delete(ctx, "host-2"); err != nil {
			t.Fatalf("Delete(host-2): %v", err)
		}
	}
	out, _, err := p.RunOnMachine(ctx, "host-2", "ls -A /var/lib/hamaster")
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("host-2 after release: /var/lib/hamaster holds %q (%v)", out, err)
	}
	if rs, _ := inst.List(ctx); len(rs) != 1 {
		t.Errorf("List after release = %+v", rs)
	}

	// A claimed host that stops answering (its link down) is listed as
	// stopped, within the probe's bound.
	if _, err := inst.Create(ctx, "host-2", "", providers.Template{}); err != nil {
		t.Fatal(err)
	}
	link := func(state string) {
		t.Helper()
		if out, err := exec.CommandContext(ctx, "ip", "netns", "exec", lab.Host("host-2").NS, "ip", "link", "set", "eth0", state).CombinedOutput(); err != nil {
			t.Fatalf("host-2 link %s: %v %s", state, err, out)
		}
	}
	link("down")
	start := time.Now()
	rs, err = inst.List(ctx)
	link("up")
	if err != nil || len(rs) != 2 || rs[1].Name != "host-2" || rs[1].State != providers.StateStopped {
		t.Fatalf("List with host-2 down = %+v, %v; want host-2 stopped", rs, err)
	}
	t.Logf("List with a claimed host down took %v", time.Since(start).Round(time.Millisecond))
}

// A wrong host key and an unreachable host are refused naming the host.
func TestRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// host-2's login user may not use sudo.
	lab := metallabtest.StartWith(ctx, t, metallab.Options{Hosts: 2, NoSudo: []string{"host-2"}})
	// known_hosts with host-1's key under host-2's address and vice versa.
	b, err := os.ReadFile(lab.KnownHostsFile)
	if err != nil {
		t.Fatal(err)
	}
	a1, a2 := lab.Host("host-1").Addr.String(), lab.Host("host-2").Addr.String()
	swapped := strings.NewReplacer(a1+" ", a2+" ", a2+" ", a1+" ").Replace(string(b))
	bad := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(bad, []byte(swapped), 0o600); err != nil {
		t.Fatal(err)
	}
	p := open(t, lab, "prod", lab.InventoryFile, bad)
	if _, err := p.Instances().ReserveAddress(ctx, "host-1", ""); err == nil || !strings.Contains(err.Error(), "host-1") || !strings.Contains(strings.ToLower(err.Error()), "key") {
		t.Errorf("wrong host key: %v; want a refusal naming host-1 and its key", err)
	}

	// A login that cannot become root: refused before any change, naming
	// the host, the user and the fix.
	good := open(t, lab, "prod", lab.InventoryFile, lab.KnownHostsFile)
	_, err = good.Instances().ReserveAddress(ctx, "host-2", "")
	if !errors.Is(err, errkind.FailedPrecondition) {
		t.Errorf("host without passwordless sudo: %v; want FailedPrecondition", err)
	}
	for _, want := range []string{"host-2", metallab.LoginUser, "sudo -n", "NOPASSWD"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("host without passwordless sudo: %v; want it to say %q", err, want)
		}
	}
	root, err := lab.Dial(ctx, lab.Host("host-2"))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if out, _, err := root.Run(ctx, "ls -A /var/lib/hamaster"); err != nil || len(out) != 0 {
		t.Errorf("host-2 after the refusal: /var/lib/hamaster holds %q (%v), want nothing", out, err)
	}

	// A VIP someone else already answers for (host-2 holds it outside
	// keepalived): refused by the load balancer's preflight, from host-1;
	// free again, accepted.
	cc := good.LoadBalancer().(lb.CreateChecker)
	targets := []lb.Target{{Name: "host-1", Address: a1}}
	vipOn := "ip addr add " + lab.VIP.String() + "/24 dev eth0"
	if _, _, err := root.Run(ctx, vipOn); err != nil {
		t.Fatal(err)
	}
	err = cc.CheckCreate(ctx, "", targets)
	if !errors.Is(err, errkind.FailedPrecondition) || !strings.Contains(err.Error(), "already in use") || !strings.Contains(err.Error(), "host-1") {
		t.Errorf("CheckCreate with the VIP in use: %v; want FailedPrecondition saying it is in use, seen from host-1", err)
	}
	if _, _, err := root.Run(ctx, strings.Replace(vipOn, " add ", " del ", 1)); err != nil {
		t.Fatal(err)
	}
	if err := cc.CheckCreate(ctx, "", targets); err != nil {
		t.Errorf("CheckCreate with the VIP free: %v", err)
	}

	// A keepalived older than the configuration needs (the kubeadm doc's
	// image's 2.0.20) first on host-1's PATH: refused before any change,
	// naming the host, the version found and the one needed.
	root1, err := lab.Dial(ctx, lab.Host("host-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer root1.Close()
	old := "/usr/local/bin/keepalived"
	if err := root1.Upload(ctx, old, []byte("#!/bin/sh\necho 'Keepalived v2.0.20 (01/22,2020)' >&2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	err = cc.CheckCreate(ctx, "", targets)
	for _, want := range []string{"host-1", "keepalived 2.0.20 (" + old + ")", "older than 2.1.0", "apt-get install keepalived haproxy"} {
		if !errors.Is(err, errkind.FailedPrecondition) || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckCreate with keepalived 2.0.20: %v; want FailedPrecondition saying %q", err, want)
		}
	}
	if _, _, err := root1.Run(ctx, "rm "+old); err != nil {
		t.Fatal(err)
	}
	if err := cc.CheckCreate(ctx, "", targets); err != nil {
		t.Errorf("CheckCreate with Debian's keepalived again: %v", err)
	}

	// An inventory host nobody answers on.
	inv, err := metal.Load(lab.InventoryFile)
	if err != nil {
		t.Fatal(err)
	}
	inv.Hosts = append(inv.Hosts, metal.Host{Name: "host-9", Address: lab.Subnet.Addr().Next().Next().Next().Next().Next().Next().Next().Next().Next().String(), Role: metal.RoleControlPlane})
	data, err := inv.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	invFile := filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(invFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	q := open(t, lab, "prod", invFile, lab.KnownHostsFile)
	if _, err := q.Instances().ReserveAddress(ctx, "host-9", ""); !errors.Is(err, errkind.FailedPrecondition) || !strings.Contains(err.Error(), "host-9 does not answer") {
		t.Errorf("unreachable host: %v; want FailedPrecondition naming host-9", err)
	}
}
