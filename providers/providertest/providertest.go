// Package providertest is the conformance suite every provider must pass,
// real or fake: replicas from a template, the static IP, the load balancer
// and DNS, each call repeated to show it converges.
package providertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers"
)

// Harness is what a provider's test gives the suite.
type Harness struct {
	// Provider is bound to a cluster with exactly one running replica
	// (master 0) holding the static IP, and no load balancer.
	Provider providers.Provider
	// Template returns a template that boots a standalone replica (its own
	// one-member etcd) named name on address.
	Template func(t *testing.T, name, address string) providers.Template
	// Timeout bounds each call (clouds' operations are slow).
	Timeout time.Duration
	// ReplicaName names the extra replica the suite creates (default
	// "conformance-replica"; providers that find masters by name, as
	// kube-up's GCE masters are found, give one of theirs).
	ReplicaName string
}

// CallContext returns, for a (sub)test, a context bounded by timeout (2
// minutes when 0) that ends with it: the conformance suites' bound on
// each call.
func CallContext(timeout time.Duration) func(t *testing.T) context.Context {
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	return func(t *testing.T) context.Context {
		c, cancel := context.WithTimeout(context.Background(), timeout)
		t.Cleanup(cancel)
		return c
	}
}

// Run runs the suite. Subtests run in order: they share the cluster.
func Run(t *testing.T, h Harness) {
	ctx := CallContext(h.Timeout)
	p := h.Provider
	inst := p.Instances()
	var master providers.Replica

	t.Run("list finds master 0", func(t *testing.T) {
		rs, err := inst.List(ctx(t))
		if err != nil || len(rs) != 1 || !rs[0].Running() {
			t.Fatalf("List = %+v, %v; want one running replica", rs, err)
		}
		master = rs[0]
		got, err := inst.Get(ctx(t), master.Name)
		if err != nil || got.Address != master.Address {
			t.Fatalf("Get(%s) = %+v, %v", master.Name, got, err)
		}
	})
	t.Run("get of an unknown replica is NotFound", func(t *testing.T) {
		_, err := inst.Get(ctx(t), "no-such-replica")
		if !errors.Is(err, errkind.NotFound) {
			t.Fatalf("Get(no-such-replica) = %v, want errkind.NotFound", err)
		}
	})

	extra := h.ReplicaName
	if extra == "" {
		extra = "conformance-replica"
	}
	var addr string
	t.Run("reserve address is idempotent", func(t *testing.T) {
		a1, err := inst.ReserveAddress(ctx(t), extra, "")
		if err != nil {
			t.Fatal(err)
		}
		a2, err := inst.ReserveAddress(ctx(t), extra, "")
		if err != nil || a1 != a2 {
			t.Fatalf("second reservation = %q, %v; want %q", a2, err, a1)
		}
		if a1 == master.Address {
			t.Fatalf("reserved the master's address %s", a1)
		}
		addr = a1
	})
	t.Run("create from a template, twice", func(t *testing.T) {
		tmpl := h.Template(t, extra, addr)
		r1, err := inst.Create(ctx(t), extra, "", tmpl)
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		r2, err := inst.Create(ctx(t), extra, "", tmpl)
		if err != nil || r2.Address != r1.Address || !r2.Running() {
			t.Fatalf("second Create = %+v, %v", r2, err)
		}
		if r1.Address != addr || r1.Template.Version != tmpl.Version {
			t.Fatalf("created replica %+v does not match reservation %s / template version %s", r1, addr, tmpl.Version)
		}
		rs, err := inst.List(ctx(t))
		if err != nil || len(rs) != 2 {
			t.Fatalf("List after create = %d replicas, %v", len(rs), err)
		}
	})
	t.Run("recreate keeps name and address, takes the new template", func(t *testing.T) {
		tmpl := h.Template(t, extra, addr)
		// A v1 release (the node stand-in has no binary for other majors),
		// in release form: a kube-up GCE master gets it as a release
		// tarball, which the provider's release site must publish.
		tmpl.Version = "v1.99.9"
		r, err := inst.Recreate(ctx(t), extra, tmpl)
		if err != nil {
			t.Fatalf("Recreate: %v", err)
		}
		if r.Address != addr || r.Template.Version != tmpl.Version || !r.Running() {
			t.Fatalf("after Recreate: %+v", r)
		}
	})
	t.Run("delete twice, then NotFound", func(t *testing.T) {
		for i := 0; i < 2; i++ {
			if err := inst.Delete(ctx(t), extra); err != nil {
				t.Fatalf("Delete #%d: %v", i+1, err)
			}
		}
		if _, err := inst.Get(ctx(t), extra); !errors.Is(err, errkind.NotFound) {
			t.Fatalf("Get after Delete = %v, want NotFound", err)
		}
		if err := inst.ReleaseAddress(ctx(t), extra); err != nil {
			t.Fatalf("ReleaseAddress after Delete: %v", err)
		}
	})

	sip := p.StaticIP()
	var ip string
	t.Run("static IP detach and attach converge", func(t *testing.T) {
		var holder string
		var err error
		ip, holder, err = sip.Get(ctx(t))
		if err != nil || ip == "" || holder != master.Name {
			t.Fatalf("static IP Get = %q, %q, %v; want attached to %s", ip, holder, err, master.Name)
		}
		for i := 0; i < 2; i++ {
			if err := sip.Detach(ctx(t)); err != nil {
				t.Fatalf("Detach #%d: %v", i+1, err)
			}
		}
		if _, holder, _ = sip.Get(ctx(t)); holder != "" {
			t.Fatalf("still attached to %q after Detach", holder)
		}
		for i := 0; i < 2; i++ {
			if err := sip.Attach(ctx(t), master.Name); err != nil {
				t.Fatalf("Attach #%d: %v", i+1, err)
			}
		}
		if _, holder, _ = sip.Get(ctx(t)); holder != master.Name {
			t.Fatalf("attached to %q, want %s", holder, master.Name)
		}
	})

	l := p.LoadBalancer()
	target := lb.Target{Name: master.Name, Address: master.Address}
	t.Run("load balancer lifecycle", func(t *testing.T) {
		if _, err := l.Get(ctx(t)); !errors.Is(err, errkind.NotFound) {
			t.Fatalf("Get before Create = %v, want NotFound", err)
		}
		own, _ := l.(lb.OwnAddress)
		ownAddress := own != nil && own.OwnAddress() // the LB never takes the static IP
		if !ownAddress {
			if err := sip.Detach(ctx(t)); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 2; i++ {
			if err := l.Create(ctx(t), ip, []lb.Target{target}); err != nil {
				t.Fatalf("Create #%d: %v", i+1, err)
			}
		}
		if err := lb.WaitHealthy(ctx(t), l, master.Name); err != nil {
			t.Fatal(err)
		}
		st, err := l.Get(ctx(t))
		if err != nil || (st.IP != ip) == !ownAddress || st.IP == "" || len(st.Targets) != 1 {
			t.Fatalf("Get = %+v, %v; want one target on %s (an LB with its own address: on another)", st, err, ip)
		}
		for i := 0; i < 2; i++ {
			if err := l.DrainTarget(ctx(t), master.Name); err != nil {
				t.Fatalf("DrainTarget #%d: %v", i+1, err)
			}
		}
		if st, _ := l.Get(ctx(t)); len(st.Targets) != 1 || !st.Targets[0].Draining {
			t.Fatalf("after drain: %+v", st)
		}
		for i := 0; i < 2; i++ {
			if err := l.AddTarget(ctx(t), target); err != nil {
				t.Fatalf("AddTarget #%d: %v", i+1, err)
			}
		}
		if err := lb.WaitHealthy(ctx(t), l, master.Name); err != nil {
			t.Fatalf("undrained target not healthy: %v", err)
		}
		for i := 0; i < 2; i++ {
			if err := l.RemoveTarget(ctx(t), master.Name); err != nil {
				t.Fatalf("RemoveTarget #%d: %v", i+1, err)
			}
		}
		if st, _ := l.Get(ctx(t)); len(st.Targets) != 0 {
			t.Fatalf("targets after remove: %+v", st.Targets)
		}
		if err := l.DrainTarget(ctx(t), "no-such-target"); err != nil {
			t.Fatalf("DrainTarget of a missing target: %v", err)
		}
		for i := 0; i < 2; i++ {
			if err := l.Delete(ctx(t)); err != nil {
				t.Fatalf("Delete #%d: %v", i+1, err)
			}
		}
		if _, err := l.Get(ctx(t)); !errors.Is(err, errkind.NotFound) {
			t.Fatalf("Get after Delete = %v, want NotFound", err)
		}
		if err := sip.Attach(ctx(t), master.Name); err != nil {
			t.Fatalf("re-attach after LB delete: %v", err)
		}
	})

	t.Run("dns static driver", func(t *testing.T) {
		recs, err := p.DNS("static")
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			id, err := recs.Upsert(ctx(t), "api.conformance.example.", []string{ip})
			if err != nil {
				t.Fatal(err)
			}
			if err := recs.Wait(ctx(t), id); err != nil {
				t.Fatal(err)
			}
		}
		got, err := recs.Get(ctx(t), "api.conformance.example.")
		if err != nil || len(got) != 1 || got[0] != ip {
			t.Fatalf("Get = %v, %v", got, err)
		}
		for i := 0; i < 2; i++ {
			if _, err := recs.Delete(ctx(t), "api.conformance.example."); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := recs.Get(ctx(t), "api.conformance.example."); !errors.Is(err, errkind.NotFound) {
			t.Fatalf("Get after Delete = %v", err)
		}
		if _, err := p.DNS("no-such-dns"); !errors.Is(err, errkind.InvalidArgument) {
			t.Fatalf("unknown DNS kind: %v", err)
		}
	})
}
