package metal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/metal/vip"
)

const lbInventory = `vip: 192.0.2.100
hosts:
  - name: cp-1
    address: 192.0.2.11
    role: control-plane
  - name: w-1
    address: 192.0.2.20
    role: worker
  - name: cp-2
    address: 192.0.2.12
    role: control-plane
  - name: cp-3
    address: cp-3.lab.example
    role: control-plane
`

// noHosts is an executor that fails the test: what it guards must not
// reach any host.
type noHosts struct {
	t    *testing.T
	host string
}

func (n noHosts) Run(_ context.Context, cmd string) ([]byte, []byte, error) {
	n.t.Errorf("ran %q on %s", cmd, n.host)
	return nil, nil, errors.New("no host")
}

func (n noHosts) Upload(_ context.Context, path string, _ []byte, _ os.FileMode) error {
	n.t.Errorf("wrote %s on %s", path, n.host)
	return errors.New("no host")
}

func openLB(t *testing.T, opts map[string]string) *Provider {
	t.Helper()
	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(inv, []byte(lbInventory), 0o600); err != nil {
		t.Fatal(err)
	}
	o := map[string]string{OptInventory: inv, OptSSHKey: filepath.Join(dir, "key")}
	for k, v := range opts {
		o[k] = v
	}
	pr, err := New(t.Context(), providers.Settings{Cluster: "prod", StateDir: filepath.Join(dir, "state"), Options: o})
	if err != nil {
		t.Fatal(err)
	}
	p := pr.(*Provider)
	p.execFor = func(host string) vip.Executor { return noHosts{t, host} }
	return p
}

// Each master's VIP config lists every target in the inventory's order,
// with a priority that depends only on its place among the inventory's
// control-plane hosts (a worker between them does not count).
func TestVIPConfig(t *testing.T) {
	p := openLB(t, nil)
	s := &lbState{VIP: "192.0.2.100", Targets: []lb.Target{{Name: "cp-2", Address: "192.0.2.12"}, {Name: "cp-1", Address: "192.0.2.11"}}, Drained: []string{"cp-2"}}
	c := p.vipConfig(s, "cp-2")
	if got := []string{c.Masters[0].Name, c.Masters[1].Name}; !slices.Equal(got, []string{"cp-1", "cp-2"}) {
		t.Errorf("masters %v, want the inventory's order", got)
	}
	if c.Priority != 160 || p.vipConfig(s, "cp-1").Priority != 200 || p.vipConfig(s, "cp-3").Priority != 120 {
		t.Errorf("priorities %d, %d", c.Priority, p.vipConfig(s, "cp-1").Priority)
	}
	if c.FrontendPort != vip.DefaultFrontendPort || c.APIServerPort != providers.APIServerPort || !slices.Equal(c.Drained, []string{"cp-2"}) {
		t.Errorf("config %+v", c)
	}
	if !slices.Equal(c.Peers, []string{"192.0.2.11", "192.0.2.12"}) || c.RouterID != 100 {
		t.Errorf("peers %v (want every control-plane host with an IPv4 address), router id %d (want the VIP's last byte)", c.Peers, c.RouterID)
	}
	if _, err := c.Validate(); err != nil {
		t.Error(err)
	}
	if p.EndpointPort() != 8443 || providers.EndpointPortOf(p) != 8443 {
		t.Errorf("EndpointPort %d", p.EndpointPort())
	}
	if q := openLB(t, map[string]string{OptVIPPort: "9443"}); q.EndpointPort() != 9443 || q.vipConfig(s, "cp-1").FrontendPort != 9443 {
		t.Errorf("--%s 9443: %d", OptVIPPort, q.EndpointPort())
	}
}

func TestVIPPortOption(t *testing.T) {
	for _, v := range []string{"0", "65536", "x", "6443"} {
		dir := t.TempDir()
		inv := filepath.Join(dir, "inventory.yaml")
		os.WriteFile(inv, []byte(lbInventory), 0o600)
		_, err := New(t.Context(), providers.Settings{Cluster: "prod", StateDir: dir, Options: map[string]string{OptInventory: inv, OptSSHKey: "k", OptVIPPort: v}})
		if !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), "--"+OptVIPPort) {
			t.Errorf("--%s %s: %v", OptVIPPort, v, err)
		}
	}
}

// With no load balancer recorded, Get is NotFound, the static IP is the
// unattached VIP, and the deletes succeed, all without reaching a host.
func TestNoLoadBalancer(t *testing.T) {
	p := openLB(t, nil)
	ctx := t.Context()
	l := p.LoadBalancer()
	if _, err := l.Get(ctx); !errors.Is(err, errkind.NotFound) {
		t.Errorf("Get = %v, want NotFound", err)
	}
	if ok, err := lb.Exists(ctx, l); ok || err != nil {
		t.Errorf("Exists = %v, %v", ok, err)
	}
	if ip, holder, err := p.StaticIP().Get(ctx); ip != "192.0.2.100" || holder != "" || err != nil {
		t.Errorf("StaticIP.Get = %q, %q, %v", ip, holder, err)
	}
	if err := p.StaticIP().Detach(ctx); err != nil {
		t.Error(err)
	}
	if err := p.StaticIP().Attach(ctx, "cp-1"); err != nil {
		t.Error(err)
	}
	for name, f := range map[string]func() error{
		"DrainTarget":  func() error { return l.DrainTarget(ctx, "cp-1") },
		"RemoveTarget": func() error { return l.RemoveTarget(ctx, "cp-1") },
		"Delete":       func() error { return l.Delete(ctx) },
	} {
		if err := f(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := l.AddTarget(ctx, lb.Target{Name: "cp-1"}); !errors.Is(err, errkind.NotFound) {
		t.Errorf("AddTarget with no LB = %v, want NotFound", err)
	}
	if _, err := os.Stat(p.lbFile()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s written: %v", p.lbFile(), err)
	}
}

// Create refuses, before any host is changed or anything recorded: an
// address other than the VIP, a target not in the inventory, one whose
// address is no IPv4 literal (VRRP's unicast peers).
func TestCreateRefusals(t *testing.T) {
	p := openLB(t, nil)
	l := p.LoadBalancer()
	for _, c := range []struct {
		ip      string
		targets []lb.Target
		want    string
	}{
		{"192.0.2.99", []lb.Target{{Name: "cp-1", Address: "192.0.2.11"}}, "--" + OptVIP},
		{"", nil, "no target"},
		{"", []lb.Target{{Name: "cp-9", Address: "192.0.2.19"}}, "cp-9"},
		{"", []lb.Target{{Name: "cp-3"}}, "not an IPv4 address"},
	} {
		err := l.Create(t.Context(), c.ip, c.targets)
		if !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Create(%q, %v) = %v; want InvalidArgument naming %q", c.ip, c.targets, err, c.want)
		}
	}
	if _, err := os.Stat(p.lbFile()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s written: %v", p.lbFile(), err)
	}
}

// The record survives a new provider (a crash and a re-run): Get reads
// it (here with no host answering, every target unhealthy, saying why).
func TestRecordPersists(t *testing.T) {
	p := openLB(t, nil)
	s := &lbState{VIP: "192.0.2.100", Targets: []lb.Target{{Name: "cp-1", Address: "192.0.2.11"}}, Drained: []string{"cp-1"}}
	if err := p.saveLB(s); err != nil {
		t.Fatal(err)
	}
	got, err := p.loadLB()
	if err != nil || got.VIP != s.VIP || !slices.Equal(got.Targets, s.Targets) || !slices.Equal(got.Drained, s.Drained) {
		t.Fatalf("loadLB = %+v, %v", got, err)
	}
	p.execFor = func(string) vip.Executor { return failing{} }
	st, err := p.LoadBalancer().Get(t.Context())
	if err != nil || st.IP != s.VIP || st.Holder != "" || len(st.Targets) != 1 || st.Targets[0].Healthy || !st.Targets[0].Draining || !strings.Contains(st.Targets[0].Reason, "HAProxy") {
		t.Fatalf("Get = %+v, %v", st, err)
	}
	if err := p.saveLB(nil); err != nil {
		t.Fatal(err)
	}
	if got, err := p.loadLB(); got != nil || err != nil {
		t.Fatalf("after removal: %+v, %v", got, err)
	}
}

// failing is a host that does not answer.
type failing struct{}

func (failing) Run(context.Context, string) ([]byte, []byte, error) {
	return nil, nil, errkind.Errorf(errkind.Unavailable, "connection refused")
}
func (failing) Upload(context.Context, string, []byte, os.FileMode) error {
	return errkind.Errorf(errkind.Unavailable, "connection refused")
}

// A planned move waits at most handoffWait, inside the lifetime of the
// drop of new connections it sets on the old holder (which outlives an
// interrupted handoff by that lifetime at most).
func TestHandoffWaitInsideTheDropLifetime(t *testing.T) {
	t.Parallel()
	if handoffWait >= vip.SynDropLifetime {
		t.Errorf("handoffWait %v ≥ vip.SynDropLifetime %v: a slow handoff would outlast its drop", handoffWait, vip.SynDropLifetime)
	}
}
