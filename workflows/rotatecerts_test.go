package workflows_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/workflows"
	"github.com/hamaster/hamaster/workflows/workflowstest"
)

// TestDNSNameAddedThenCertsRotated: after add-replica --dns-name only the
// new replica's certificate has the name, so status marks the others and
// the endpoint check (verified for the name) fails; rotate-certs reissues
// them one at a time and every handshake through the LB succeeds.
func TestDNSNameAddedThenCertsRotated(t *testing.T) {
	t.Parallel()
	e, ctx := startEnv(t, "rot", 3*time.Minute)
	e.grow(ctx, 1)
	d := e.deps(nil)
	wf := workflows.AddReplica(d, workflows.AddParams{Name: "rot-master-dns", DNSKind: "static", DNSName: "api.rot.example.test", Timeout: time.Minute})
	if err := workflows.Execute(ctx, d, wf, workflows.Options{}); err != nil {
		t.Fatalf("add with --dns-name: %v", err)
	}
	rep, err := workflows.Status(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, c := range rep.Certificates {
		if strings.Contains(c.Problem, "api.rot.example.test") {
			marked++
		}
		if !strings.Contains(strings.Join(c.IPs, ","), "10.0.0.1") {
			t.Errorf("certificate of %s lacks the service IP 10.0.0.1: %v", c.Replica, c.IPs)
		}
	}
	if marked != 2 || rep.Healthy() {
		t.Fatalf("before rotation: %d certificates marked (want 2), healthy %v, endpoint error %q", marked, rep.Healthy(), rep.EndpointError)
	}
	names, err := workflows.CertsNeedingRotation(ctx, d, "", workflows.CertRenewWindow)
	if err != nil || len(names) != 2 {
		t.Fatalf("needing rotation: %v %v", names, err)
	}
	pr := startProber(t, e)
	start := time.Now()
	err = workflows.Execute(ctx, d, workflows.RotateCerts(d, workflows.RotateParams{DrainGrace: 300 * time.Millisecond, HealthTimeout: time.Minute}, names), workflows.Options{})
	pr.Finish()
	if err != nil {
		t.Fatalf("rotate-certs: %v", err)
	}
	t.Logf("rotated %v in %s; readyz through the LB: %d ok, %d failed", names, time.Since(start).Round(time.Millisecond), pr.OK.Load(), pr.Failed.Load())
	if pr.Failed.Load() != 0 {
		t.Errorf("%d client failures during rotation: %v", pr.Failed.Load(), pr.Failures())
	}
	rep = workflowstest.Settled(ctx, t, d)
	for _, c := range rep.Certificates {
		if c.Problem != "" {
			t.Errorf("after rotation, %s: %s", c.Replica, c.Problem)
		}
	}
	if !rep.Healthy() {
		t.Fatalf("after rotation: not healthy (endpoint: %s)", rep.EndpointError)
	}
	// A second run finds nothing to do.
	if names, _ := workflows.CertsNeedingRotation(ctx, d, "", workflows.CertRenewWindow); len(names) != 0 {
		t.Errorf("still needing rotation: %v", names)
	}
}
