package gce_test

import (
	"context"
	"errors"
	"github.com/hamaster/hamaster/flavors/flavortest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/providers/providertest"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/testbed/gce/gcefake"
	"github.com/hamaster/hamaster/testbed/gce/gcetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	c := gcetest.Up(t, "conf", gcetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	t.Run("commands run on a master over SSH", func(t *testing.T) {
		var r providers.MachineRunner = c.Provider
		out, _, err := r.RunOnMachine(ctx, c.Master, "echo ran on; cat /etc/hostname 2>/dev/null || hostname")
		if err != nil || !strings.HasPrefix(string(out), "ran on\n") {
			t.Fatalf("RunOnMachine = %q, %v", out, err)
		}
		if _, stderr, err := r.RunOnMachine(ctx, c.Master, "echo refused >&2; exit 3"); err == nil || !strings.Contains(err.Error(), c.Master) || !strings.Contains(string(stderr), "refused") {
			t.Errorf("a failing command = %v (stderr %q); want an error naming the master", err, stderr)
		}
		if _, _, err := r.RunOnMachine(ctx, "no-such-master", "true"); !errors.Is(err, errkind.NotFound) {
			t.Errorf("an unknown master = %v; want NotFound", err)
		}
	})
	t.Run("flavor kubeup", func(t *testing.T) {
		flavortest.Run(t, flavortest.Harness{Provider: c.Provider, Flavor: c.Flavor(t), ReplicaName: c.Master + "-f1a", Timeout: time.Minute})
	})
	providertest.Run(t, providertest.Harness{
		Provider:    c.Provider,
		Timeout:     time.Minute,
		ReplicaName: c.Master + "-c0f",
		Template: func(t *testing.T, name, _ string) providers.Template {
			return c.StandaloneTemplate(ctx, t, name)
		},
	})
}

func TestCloudDNS(t *testing.T) {
	t.Parallel()
	f := gcetest.Fake(t, gcefake.Options{Subnet: 251})
	f.AddManagedZone("z", "example.test.")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	p, err := gce.New(ctx, providers.Settings{Cluster: "dns", StateDir: t.TempDir(), Options: map[string]string{
		gce.OptProject: f.Project(), gce.OptZones: gcetest.ZoneA, gce.OptEndpoint: f.URL, gce.OptDNSZone: "z", remote.OptUser: "unused"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.DNS("route53"); !errors.Is(err, errkind.InvalidArgument) {
		t.Fatalf("DNS(route53) = %v", err)
	}
	recs, err := p.DNS("clouddns")
	if err != nil {
		t.Fatal(err)
	}
	const name = "api.example.test"
	steps := []struct {
		what string
		ips  []string // nil: delete
	}{
		{"create", []string{"127.0.251.200"}},
		{"same again", []string{"127.0.251.200"}},
		{"replace", []string{"127.0.251.201", "127.0.251.202"}},
		{"delete", nil},
		{"delete again", nil},
	}
	for _, s := range steps {
		var id string
		if s.ips == nil {
			id, err = recs.Delete(ctx, name)
		} else {
			id, err = recs.Upsert(ctx, name, s.ips)
		}
		if err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		if err := recs.Wait(ctx, id); err != nil {
			t.Fatalf("%s: wait %s: %v", s.what, id, err)
		}
		got, err := recs.Get(ctx, name)
		switch {
		case s.ips == nil && !errors.Is(err, errkind.NotFound):
			t.Errorf("%s: Get = %v, %v; want NotFound", s.what, got, err)
		case s.ips != nil && (err != nil || !slices.Equal(got, s.ips)):
			t.Errorf("%s: Get = %v, %v; want %v", s.what, got, err, s.ips)
		}
		if f := f.Records("z", name+".", "A"); !slices.Equal(f, s.ips) {
			t.Errorf("%s: the fake holds %v, want %v", s.what, f, s.ips)
		}
	}
}
