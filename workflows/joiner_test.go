package workflows

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers"
)

// joinFlavor is a flavor whose masters join with their own tool and
// record the endpoint; it records the calls made to it.
type joinFlavor struct {
	flavors.Flavor // unused methods panic
	endpoint       string
	calls          []string
}

func (f *joinFlavor) Name() string { return "joiner" }
func (f *joinFlavor) Join(context.Context, providers.Replica, time.Duration) error {
	return nil
}
func (f *joinFlavor) Leave(context.Context, providers.Replica) error { return nil }
func (f *joinFlavor) StopAPIServer(context.Context, providers.Replica) error {
	return nil
}
func (f *joinFlavor) Endpoint(context.Context) (string, error) { return f.endpoint, nil }
func (f *joinFlavor) AddServingSANs(_ context.Context, r providers.Replica, hosts ...string) error {
	f.calls = append(f.calls, "sans "+r.Name+" "+strings.Join(hosts, ","))
	return nil
}
func (f *joinFlavor) PointMaster(_ context.Context, r providers.Replica, endpoint string) error {
	f.calls = append(f.calls, "point "+r.Name+" "+endpoint)
	return nil
}
func (f *joinFlavor) SetEndpoint(_ context.Context, endpoint string) error {
	f.calls = append(f.calls, "set "+endpoint)
	f.endpoint = endpoint
	return nil
}

// vipProvider has two running masters, a VIP and an endpoint port of
// its own.
type vipProvider struct {
	providers.Provider // unused methods panic
	replicas           []providers.Replica
}

func (p *vipProvider) Instances() providers.Instances { return fakeInstances{p} }
func (p *vipProvider) StaticIP() lb.StaticIP          { return fakeVIP{} }
func (p *vipProvider) EndpointPort() int              { return 8443 }
func (p *vipProvider) LoadBalancer() lb.LoadBalancer  { return nil }

type fakeInstances struct{ p *vipProvider }

func (i fakeInstances) List(context.Context) ([]providers.Replica, error) {
	return i.p.replicas, nil
}
func (fakeInstances) Get(context.Context, string) (providers.Replica, error) {
	panic("unused")
}
func (fakeInstances) ReserveAddress(context.Context, string, string) (string, error) {
	panic("unused")
}
func (fakeInstances) ReleaseAddress(context.Context, string) error { panic("unused") }
func (fakeInstances) Create(context.Context, string, string, providers.Template) (providers.Replica, error) {
	panic("unused")
}
func (fakeInstances) Recreate(context.Context, string, providers.Template) (providers.Replica, error) {
	panic("unused")
}
func (fakeInstances) Delete(context.Context, string) error { panic("unused") }

type fakeVIP struct{}

func (fakeVIP) Get(context.Context) (string, string, error) { return "198.18.1.100", "", nil }
func (fakeVIP) Attach(context.Context, string) error        { return nil }
func (fakeVIP) Detach(context.Context) error                { return nil }

func stepNames(wf *Workflow) []string {
	var out []string
	for _, s := range wf.Steps {
		out = append(out, s.Name)
	}
	return out
}

// TestJoinerSteps: a flavor whose masters join with their own tool gets
// add-replica without hamaster's learner (the join adds it), the load
// balancer and the conversion before the join; and remove-replica with
// the tool's leave after the member's removal and before the machine's
// release, and no early stop.
func TestJoinerSteps(t *testing.T) {
	t.Parallel()
	d := &Deps{Cluster: "c", StateDir: t.TempDir(), Provider: &vipProvider{}, Master: &joinFlavor{}}
	tests := []struct {
		name string
		wf   *Workflow
		want []string
	}{
		{"add-replica", AddReplica(d, AddParams{Name: "m1"}), []string{StepPreflight, StepSnapshot, StepReserveAddress, StepPromoteLB, StepConvertEndpoint, StepCreateVM, StepJoin, StepAddToLB, StepDNS, StepVerify}},
		{"remove-replica", RemoveReplica(d, RemoveParams{Name: "m1"}), []string{StepPreflight, StepDrainTarget, StepSnapshot, StepMoveLeader, StepRemoveFromLB, StepDNS, StepStopReplica, StepRemoveMember, StepLeave, StepDeleteVM, StepDemote, StepVerify}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := stepNames(tt.wf); !slices.Equal(got, tt.want) {
				t.Errorf("steps\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

// TestConvertStep: a cluster whose masters record no endpoint takes the
// VIP's (at the provider's endpoint port): every master's certificate
// names it before it is recorded, and the kubeconfigs move last; a
// cluster that records one keeps it; a resumed run converts again
// idempotently to the endpoint it chose.
func TestConvertStep(t *testing.T) {
	t.Parallel()
	masters := []providers.Replica{
		{Name: "a", Address: "198.18.1.1", State: providers.StateRunning},
		{Name: "b", Address: "198.18.1.2", State: providers.StateProvisioning}, // the one joining
		{Name: "c", Address: "198.18.1.3", State: providers.StateRunning},
	}
	tests := []struct {
		name     string
		recorded string
		want     []string
	}{
		{"none recorded", "", []string{"sans a 198.18.1.100", "sans c 198.18.1.100", "set 198.18.1.100:8443", "point a https://198.18.1.100:8443", "point c https://198.18.1.100:8443"}},
		{"recorded kept", "lb.example.com:6443", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &joinFlavor{endpoint: tt.recorded}
			d := &Deps{Cluster: "c", StateDir: t.TempDir(), Provider: &vipProvider{replicas: masters}, Master: f}
			wf := &Workflow{Name: "convert", Params: map[string]string{}, Steps: []Step{convertStep(d)}}
			rn := &Runner{Store: NewJournalStore(d.StateDir, d.Cluster), Sink: &recorder{}}
			j, _, err := rn.Prepare(wf, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := rn.Execute(context.Background(), wf, j); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(f.calls, tt.want) {
				t.Errorf("calls\n got %q\nwant %q", f.calls, tt.want)
			}
		})
	}
}

// TestRunningMastersRefusesStopped: the endpoint moves on every master,
// so a stopped one refuses before anything changes, naming it.
func TestRunningMastersRefusesStopped(t *testing.T) {
	t.Parallel()
	d := &Deps{Cluster: "c", Provider: &vipProvider{replicas: []providers.Replica{
		{Name: "a", State: providers.StateRunning}, {Name: "b", State: providers.StateStopped},
	}}, Master: &joinFlavor{}}
	_, err := runningMasters(context.Background(), d)
	if err == nil || !strings.Contains(err.Error(), "b (") {
		t.Fatalf("want a refusal naming b, got %v", err)
	}
}
