package gcefake_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/hamaster/hamaster/testbed/gce/gcefake"
	"github.com/hamaster/hamaster/testbed/gce/gcetest"
)

// TestRefusesWhatComputeRefuses: each case is a request the real API
// answers with an error, and the error the fake must give.
func TestRefusesWhatComputeRefuses(t *testing.T) {
	t.Parallel()
	f, ac, _ := newFake(t)
	ctx := context.Background()
	opts := []option.ClientOption{option.WithEndpoint(f.URL), option.WithoutAuthentication()}
	bs, err := compute.NewRegionBackendServicesRESTClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	fw, err := compute.NewFirewallsRESTClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	cases := []struct {
		name       string
		call       func() error
		code       int
		reasonPart string
	}{
		{"upper-case name", func() error { _, err := ac.Insert(ctx, insertReq("Kubernetes-master-ip")); return err }, 400, "Must be a match of regex"},
		{"64-character name", func() error { _, err := ac.Insert(ctx, insertReq(strings.Repeat("a", 64))); return err }, 400, "Must be a match of regex"},
		{"name ending in a dash", func() error { _, err := ac.Insert(ctx, insertReq("kubernetes-")); return err }, 400, "Must be a match of regex"},
		{"backend service without a health check", func() error {
			_, err := bs.Insert(ctx, &computepb.InsertRegionBackendServiceRequest{Project: f.Project(), Region: "us-central1", BackendServiceResource: &computepb.BackendService{
				Name: proto.String("kubernetes-master"), LoadBalancingScheme: proto.String("EXTERNAL"), Protocol: proto.String("TCP")}})
			return err
		}, 400, "health check is required"},
		{"firewall rule with a bad range", func() error {
			_, err := fw.Insert(ctx, &computepb.InsertFirewallRequest{Project: f.Project(), FirewallResource: &computepb.Firewall{
				Name: proto.String("x"), SourceRanges: []string{"35.191.0.0/33"}, Allowed: []*computepb.Allowed{{IPProtocol: proto.String("tcp")}}}})
			return err
		}, 400, "sourceRanges[0]"},
	}
	for _, c := range cases {
		err := c.call()
		var ge *googleapi.Error
		if !errors.As(err, &ge) || ge.Code != c.code || !strings.Contains(ge.Message, c.reasonPart) {
			t.Errorf("%s: err = %v, want %d containing %q", c.name, err, c.code, c.reasonPart)
		}
	}
	if got := f.Names("addresses"); len(got) != 0 {
		t.Errorf("refused inserts left %v", got)
	}
}

// TestOperationFailsInside: quota and capacity errors come back in a DONE
// operation, not from the call, and the insert leaves nothing.
func TestOperationFailsInside(t *testing.T) {
	t.Parallel()
	f, ac, _ := newFake(t)
	ctx := context.Background()
	f.SetFaults(func(c gcefake.Call) *gcefake.Fault {
		if c.Method == "compute.addresses.insert" && c.Attempt == 1 {
			return &gcefake.Fault{Code: 403, Reason: "QUOTA_EXCEEDED", Message: "Quota 'STATIC_ADDRESSES' exceeded. Limit: 8.0 in region us-central1.", InOperation: true}
		}
		return nil
	})
	op, err := ac.Insert(ctx, insertReq("q"))
	if err != nil {
		t.Fatalf("the call itself failed (%v); quota errors come inside the operation", err)
	}
	err = op.Wait(ctx)
	if err == nil || !strings.Contains(err.Error(), "QUOTA_EXCEEDED") {
		t.Fatalf("operation error = %v, want QUOTA_EXCEEDED", err)
	}
	if _, err := ac.Get(ctx, &computepb.GetAddressRequest{Project: f.Project(), Region: "us-central1", Address: "q"}); err == nil {
		t.Fatal("a failed insert left its resource")
	}
	op, err = ac.Insert(ctx, insertReq("q"))
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Wait(ctx); err != nil {
		t.Fatalf("the retry after the quota error: %v", err)
	}
}

// TestEventualConsistency: with Visibility set, a resource whose insert is
// DONE is not found for a while, then is.
func TestEventualConsistency(t *testing.T) {
	t.Parallel()
	f := gcetest.Fake(t, gcefake.Options{Subnet: 249, Visibility: time.Second})
	ctx := context.Background()
	ac, err := compute.NewAddressesRESTClient(ctx, option.WithEndpoint(f.URL), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	oc, err := compute.NewRegionOperationsRESTClient(ctx, option.WithEndpoint(f.URL), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	op, err := ac.Insert(ctx, insertReq("late"))
	if err != nil {
		t.Fatal(err)
	}
	// The operations "wait" method returns when DONE (the client's
	// op.Wait polls with a backoff that would outlast the window).
	w, err := oc.Wait(ctx, &computepb.WaitRegionOperationRequest{Project: f.Project(), Region: "us-central1", Operation: op.Name()})
	if err != nil || w.GetStatus() != computepb.Operation_DONE {
		t.Fatalf("wait = %v, %v", w.GetStatus(), err)
	}
	// When the fake marked it DONE, from the operation's endTime (the
	// fake's clock is this machine's): the client's own clock after the
	// wait returned lags it by however long the answer took to arrive,
	// which on a busy machine is a good part of the delay.
	done, err := time.Parse(time.RFC3339Nano, w.GetEndTime())
	if err != nil {
		t.Fatalf("the operation's endTime %q: %v", w.GetEndTime(), err)
	}
	get := func() error {
		_, err := ac.Get(ctx, &computepb.GetAddressRequest{Project: f.Project(), Region: "us-central1", Address: "late"})
		return err
	}
	var ge *googleapi.Error
	if err := get(); !errors.As(err, &ge) || ge.Code != 404 {
		t.Fatalf("get right after DONE = %v, want 404", err)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for get() != nil {
		// A hang guard, 10 x the fake's 1 s visibility delay.
		if d := time.Since(done); d > 10*time.Second {
			t.Fatalf("hang guard: still not visible %v after DONE (the fake's delay is 1 s)", d)
		}
		<-tick.C
	}
	// Fidelity, not speed: the fake hides it at least as long as it says
	// (a slow machine only lengthens this).
	if d := time.Since(done); d < 900*time.Millisecond {
		t.Errorf("visible after %v, want about 1s", d)
	}
}
