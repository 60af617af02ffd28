package gcefake_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/googleapis/gax-go/v2/apierror"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/hamaster/hamaster/testbed/gce/gcefake"
	"github.com/hamaster/hamaster/testbed/gce/gcetest"
)

func newFake(t *testing.T) (*gcefake.Server, *compute.AddressesClient, *compute.RegionOperationsClient) {
	t.Helper()
	f := gcetest.Fake(t, gcefake.Options{Subnet: 250})
	ctx := context.Background()
	opts := []option.ClientOption{option.WithEndpoint(f.URL), option.WithoutAuthentication()}
	ac, err := compute.NewAddressesRESTClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ac.Close() })
	oc, err := compute.NewRegionOperationsRESTClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { oc.Close() })
	return f, ac, oc
}

func insertReq(name string) *computepb.InsertAddressRequest {
	return &computepb.InsertAddressRequest{Project: "hamaster-test", Region: "us-central1",
		AddressResource: &computepb.Address{Name: proto.String(name), AddressType: proto.String("INTERNAL")}}
}

// An operation is not DONE when its insert returns (PENDING for the first
// half of its latency, RUNNING for the second), and operations.wait
// blocks until it is. The latency is a hang guard, not a speed claim: the
// first get must come within it (3 s; it once came after the 150 ms a
// 300 ms latency leaves PENDING, on a busy machine under -race).
func TestOperationsAdvanceAndWaitBlocks(t *testing.T) {
	t.Parallel()
	f, ac, oc := newFake(t)
	const latency = 3 * time.Second
	f.SetLatency(func(string) time.Duration { return latency })
	ctx := context.Background()
	op, err := ac.Insert(ctx, insertReq("a"))
	if err != nil {
		t.Fatal(err)
	}
	get := func() computepb.Operation_Status {
		o, err := oc.Get(ctx, &computepb.GetRegionOperationRequest{Project: "hamaster-test", Region: "us-central1", Operation: op.Name()})
		if err != nil {
			t.Fatal(err)
		}
		return o.GetStatus()
	}
	if first := get(); first != computepb.Operation_PENDING && first != computepb.Operation_RUNNING {
		t.Errorf("status right after the insert: %v; want PENDING or RUNNING (DONE means the get came after the %v latency: a hang guard)", first, latency)
	}
	w, err := oc.Wait(ctx, &computepb.WaitRegionOperationRequest{Project: "hamaster-test", Region: "us-central1", Operation: op.Name()})
	if err != nil || w.GetStatus() != computepb.Operation_DONE {
		t.Fatalf("wait = %v, %v; want DONE", w.GetStatus(), err)
	}
	if last := get(); last != computepb.Operation_DONE {
		t.Errorf("status after wait: %v; want DONE", last)
	}
	a, err := ac.Get(ctx, &computepb.GetAddressRequest{Project: "hamaster-test", Region: "us-central1", Address: "a"})
	if err != nil || !strings.HasPrefix(a.GetAddress(), "127.0.250.") {
		t.Fatalf("address = %v, %v; want a loopback IP of the fake's subnet", a.GetAddress(), err)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	f, ac, _ := newFake(t)
	ctx := context.Background()
	if _, err := ac.Insert(ctx, insertReq("dup")); err != nil {
		t.Fatal(err)
	}
	code := func(err error) (int, string) {
		var ge *googleapi.Error
		if !errors.As(err, &ge) {
			t.Fatalf("error %v (%T) is not a *googleapi.Error", err, err)
		}
		reason := ""
		if len(ge.Errors) > 0 {
			reason = ge.Errors[0].Reason
		}
		return ge.Code, reason
	}
	cases := []struct {
		name   string
		call   func() error
		code   int
		reason string
	}{
		{"get missing", func() error {
			_, err := ac.Get(ctx, &computepb.GetAddressRequest{Project: "hamaster-test", Region: "us-central1", Address: "nope"})
			return err
		}, 404, "notFound"},
		{"insert twice", func() error { _, err := ac.Insert(ctx, insertReq("dup")); return err }, 409, "alreadyExists"},
		{"wrong project", func() error {
			_, err := ac.Get(ctx, &computepb.GetAddressRequest{Project: "other", Region: "us-central1", Address: "dup"})
			return err
		}, 404, "notFound"},
		{"fault 429", func() error {
			f.SetFaults(func(c gcefake.Call) *gcefake.Fault {
				if c.Method == "compute.addresses.get" {
					return &gcefake.Fault{Code: 429, Reason: "rateLimitExceeded"}
				}
				return nil
			})
			defer f.SetFaults(nil)
			_, err := ac.Get(ctx, &computepb.GetAddressRequest{Project: "hamaster-test", Region: "us-central1", Address: "dup"})
			var ae *apierror.APIError
			if !errors.As(err, &ae) {
				t.Errorf("429 is not an *apierror.APIError: %T", err)
			}
			return err
		}, 429, "rateLimitExceeded"},
		{"fault 503", func() error {
			f.SetFaults(func(c gcefake.Call) *gcefake.Fault { return &gcefake.Fault{Code: 503} })
			defer f.SetFaults(nil)
			// (The client retries a 503 on a get by itself; an insert it
			// does not retry, so the error shows.)
			_, err := ac.Insert(ctx, insertReq("unavailable"))
			return err
		}, 503, "backendError"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if err == nil {
				t.Fatal("no error")
			}
			if got, reason := code(err); got != c.code || reason != c.reason {
				t.Fatalf("got %d %s, want %d %s (%v)", got, reason, c.code, c.reason, err)
			}
		})
	}
	if n := f.Calls()["compute.addresses.get"]; n != 3 {
		t.Errorf("calls counted: %d gets", n)
	}
}

// TestDiscoveryValidation sends raw bodies: an unknown or mistyped field
// is a 400 as on the real API; an unknown path a 404.
func TestDiscoveryValidation(t *testing.T) {
	t.Parallel()
	f, _, _ := newFake(t)
	base := f.URL + "/compute/v1/projects/hamaster-test"
	cases := []struct {
		name, method, path, body string
		code                     int
		msg                      string
	}{
		{"valid", "POST", "/regions/us-central1/addresses", `{"name":"ok","addressType":"EXTERNAL"}`, 200, ""},
		{"unknown field", "POST", "/regions/us-central1/addresses", `{"name":"x","adressType":"EXTERNAL"}`, 400, `adressType\" at 'address': Cannot find field`},
		{"bad enum", "POST", "/regions/us-central1/addresses", `{"name":"x","addressType":"PUBLIC"}`, 400, "is not one of"},
		{"mistyped", "POST", "/zones/us-central1-a/instances", `{"name":"x","canIpForward":"yes"}`, 400, "TYPE_BOOL"},
		{"nested unknown", "POST", "/zones/us-central1-a/instances", `{"name":"x","networkInterfaces":[{"netwrk":"n"}]}`, 400, `netwrk\" at 'instance.networkInterfaces[0]'`},
		{"unknown method", "POST", "/regions/us-central1/addresses/ok/frobnicate", `{}`, 404, "no method"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.code || !strings.Contains(string(b), c.msg) {
				t.Fatalf("%s %s = %d %s; want %d containing %q", c.method, c.path, resp.StatusCode, b, c.code, c.msg)
			}
		})
	}
}

func TestRequestIDDeduplicates(t *testing.T) {
	t.Parallel()
	_, ac, _ := newFake(t)
	ctx := context.Background()
	r := insertReq("once")
	r.RequestId = proto.String("5f0c5d0e-1111-4222-8333-944445555666")
	op1, err := ac.Insert(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	op2, err := ac.Insert(ctx, r)
	if err != nil || op2.Name() != op1.Name() {
		t.Fatalf("repeated requestId: %v, %v; want the first operation %s", op2, err, op1.Name())
	}
}
