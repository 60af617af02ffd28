package gce_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/option"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/testbed/gce/gcefake"
	"github.com/hamaster/hamaster/testbed/gce/gcetest"
)

// TestLBNeedsTheHealthCheckFirewallRule: the fake's health checker drops
// probes no firewall rule lets in, as GCE's do. The provider's rule makes
// master 0 healthy; without it the LB never sees a healthy backend; the
// static IP still attached makes the forwarding rule a 409
// IP_IN_USE_BY_ANOTHER_RESOURCE the provider must not take for "exists".
func TestLBNeedsTheHealthCheckFirewallRule(t *testing.T) {
	t.Parallel()
	c := gcetest.Up(t, "fw", gcetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	p := c.Provider
	master, err := p.Instances().Get(ctx, c.Master)
	if err != nil {
		t.Fatal(err)
	}
	target := lb.Target{Name: master.Name, Address: master.Address}
	l := p.LoadBalancer()
	err = l.Create(ctx, c.StaticIP, []lb.Target{target})
	if !errors.Is(err, errkind.FailedPrecondition) || !strings.Contains(err.Error(), "IP_IN_USE_BY_ANOTHER_RESOURCE") {
		t.Fatalf("Create while the static IP is on master 0 = %v, want FailedPrecondition naming IP_IN_USE_BY_ANOTHER_RESOURCE", err)
	}
	if got := c.Fake.Names("forwardingRules"); len(got) != 0 {
		t.Fatalf("forwarding rules %v after a refused insert", got)
	}
	if err := lb.Promote(ctx, p.StaticIP(), l, target); err != nil {
		t.Fatalf("promote: %v", err)
	}
	fws, err := compute.NewFirewallsRESTClient(ctx, option.WithEndpoint(c.Fake.URL), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	defer fws.Close()
	// kube-up's MASTER_NAME-https (tcp:443 from anywhere) lets the probes
	// in too; an operator who narrowed it to their clients, as many do,
	// relies on the provider's rule alone. Without either, no probe passes.
	for _, fw := range []string{c.Master + "-lb-health-checks", c.Master + "-https"} {
		op, err := fws.Delete(ctx, &computepb.DeleteFirewallRequest{Project: c.Fake.Project(), Firewall: fw})
		if err != nil {
			t.Fatalf("delete firewall rule %s: %v", fw, err)
		}
		if err := op.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitHealth(ctx, t, l, c.Master, false)
	// Prepare is idempotent and puts the rule back.
	if err := l.(lb.Preparer).Prepare(ctx, []lb.Target{target}); err != nil {
		t.Fatal(err)
	}
	waitHealth(ctx, t, l, c.Master, true)
}

func waitHealth(ctx context.Context, t *testing.T, l lb.LoadBalancer, name string, want bool) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := l.Get(ctx)
		if err == nil {
			for _, tg := range st.Targets {
				if tg.Name == name && tg.Healthy == want {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("target %s never became healthy=%v (last %+v, %v)", name, want, st, err)
		case <-tick.C:
		}
	}
}

// TestCreateSurvivesCapacityAndQuotaInsideOperations: errors Compute
// reports inside a DONE operation come back with their code and the kind
// that tells the operator what to do; a second try converges.
func TestCreateSurvivesCapacityAndQuotaInsideOperations(t *testing.T) {
	t.Parallel()
	c := gcetest.Up(t, "cap", gcetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	name := c.Master + "-c4p"
	// A standalone master (the conformance suite's template): master 0's
	// own kube-env would not let it join.
	if _, err := c.Provider.Instances().ReserveAddress(ctx, name, gcetest.ZoneA); err != nil {
		t.Fatal(err)
	}
	tmpl := c.StandaloneTemplate(ctx, t, name)
	for _, f := range []struct {
		fault gcefake.Fault
		kind  error
	}{
		{gcefake.Fault{Code: 503, Reason: "ZONE_RESOURCE_POOL_EXHAUSTED", Message: "The zone does not have enough resources available to fulfill the request.", InOperation: true}, errkind.Unavailable},
		{gcefake.Fault{Code: 403, Reason: "QUOTA_EXCEEDED", Message: "Quota 'CPUS' exceeded. Limit: 24.0 in region us-central1.", InOperation: true}, errkind.FailedPrecondition},
	} {
		fault := f.fault
		c.Fake.SetFaults(func(call gcefake.Call) *gcefake.Fault {
			if call.Method == "compute.instances.insert" {
				return &fault
			}
			return nil
		})
		_, err := c.Provider.Instances().Create(ctx, name, gcetest.ZoneA, tmpl)
		if !errors.Is(err, f.kind) || !strings.Contains(err.Error(), fault.Reason) {
			t.Errorf("Create under %s = %v, want %v naming the code", fault.Reason, err, f.kind)
		}
	}
	c.Fake.SetFaults(nil)
	// The reservation and disk of the failed tries are reused.
	if _, err := c.Provider.Instances().Create(ctx, name, gcetest.ZoneA, tmpl); err != nil {
		t.Fatalf("Create after the faults: %v", err)
	}
	if err := c.Provider.Instances().Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
}
