package workflows

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember/etcdtest"
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
	drainErr       error
}

func (f *joinFlavor) Name() string { return "joiner" }
func (f *joinFlavor) Join(context.Context, providers.Replica, time.Duration) error {
	return nil
}
func (f *joinFlavor) Leave(context.Context, providers.Replica) error { return nil }
func (f *joinFlavor) Joined(context.Context, providers.Replica, time.Duration) (bool, error) {
	return true, nil
}
func (f *joinFlavor) Drain(_ context.Context, r providers.Replica, _ time.Duration) error {
	f.calls = append(f.calls, "drain "+r.Name)
	return f.drainErr
}
func (f *joinFlavor) Uncordon(_ context.Context, r providers.Replica) error {
	f.calls = append(f.calls, "uncordon "+r.Name)
	return nil
}
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
func (f *joinFlavor) PointConsumers(_ context.Context, endpoint string) error {
	f.calls = append(f.calls, "consumers "+endpoint)
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
func (i fakeInstances) Get(_ context.Context, name string) (providers.Replica, error) {
	for _, r := range i.p.replicas {
		if r.Name == name {
			return r, nil
		}
	}
	return providers.Replica{}, errkind.Errorf(errkind.NotFound, "no replica %s", name)
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
		{"remove-replica", RemoveReplica(d, RemoveParams{Name: "m1"}), []string{StepPreflight, StepDrainNode, StepDrainTarget, StepSnapshot, StepMoveLeader, StepRemoveFromLB, StepDNS, StepStopReplica, StepRemoveMember, StepLeave, StepDeleteVM, StepDemote, StepVerify}},
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
		{"none recorded", "", []string{"sans a 198.18.1.100", "sans c 198.18.1.100", "set 198.18.1.100:8443", "consumers 198.18.1.100:8443", "point a https://198.18.1.100:8443", "point c https://198.18.1.100:8443"}},
		{"recorded kept", "lb.example.com:6443", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &joinFlavor{endpoint: tt.recorded}
			d := &Deps{Cluster: "c", StateDir: t.TempDir(), Provider: &vipProvider{replicas: masters}, Master: f}
			wf := &Workflow{Name: "convert", Params: map[string]string{}, Steps: []Step{convertStep(d)}}
			runWorkflow(context.Background(), t, d, wf, &recorder{}, nil)
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

// undoFlavor is an etcdFlavor whose masters join with their own tool: it
// records the calls and says whether an interrupted join completed.
type undoFlavor struct {
	*etcdFlavor
	joined bool
	calls  []string
}

// EtcdMember: a member that never started has no name, only its peer URL.
func (*undoFlavor) EtcdMember(_, replica, address string) (string, string) {
	return replica, "https://" + address + ":2380"
}
func (f *undoFlavor) Join(_ context.Context, r providers.Replica, _ time.Duration) error {
	f.calls = append(f.calls, "join "+r.Name)
	return nil
}
func (f *undoFlavor) Leave(_ context.Context, r providers.Replica) error {
	f.calls = append(f.calls, "leave "+r.Name)
	return nil
}
func (f *undoFlavor) Joined(_ context.Context, r providers.Replica, _ time.Duration) (bool, error) {
	f.calls = append(f.calls, "joined? "+r.Name)
	return f.joined, nil
}

// TestJoinStepUndo: a join that a crash interrupted is judged before it
// runs again: one that completed (its member a healthy voter) is kept;
// one that did not (the tool says so, its member is still a learner, or
// its machine is not running) is undone (its member removed through the
// other masters, the tool's leave) and joined again; a first join just
// joins, recorded as started first.
func TestJoinStepUndo(t *testing.T) {
	t.Parallel()
	ec := etcdtest.Start(t, 3, etcdtest.Options{})
	const newPeer = "https://10.0.0.14:2380"
	running := providers.Replica{Name: "m-new", Address: "10.0.0.14", State: providers.StateRunning}
	stopped := running
	stopped.State = providers.StateStopped
	voter := providers.Replica{Name: "m-3", State: providers.StateRunning} // a healthy voter already
	tests := []struct {
		name        string
		rep         providers.Replica
		interrupted bool
		learner     bool // m-new is a learner when the step starts
		joined      bool // the tool's verdict on the interrupted join
		want        []string
	}{
		{name: "first join", rep: running, want: []string{"join m-new"}},
		{name: "interrupted, completed", rep: voter, interrupted: true, joined: true, want: []string{"joined? m-3"}},
		{name: "interrupted, not completed", rep: running, interrupted: true, learner: true, want: []string{"joined? m-new", "leave m-new", "join m-new"}},
		{name: "interrupted, the tool says joined but the member is a learner", rep: running, interrupted: true, learner: true, joined: true, want: []string{"joined? m-new", "leave m-new", "join m-new"}},
		{name: "interrupted, the machine not running", rep: stopped, interrupted: true, learner: true, want: []string{"leave m-new", "join m-new"}},
	}
	for _, tt := range tests { // in turn: they share the etcd cluster
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cli := ec.Client(ctx, t)
			if tt.learner {
				if _, err := cli.AddLearner(ctx, "", newPeer); err != nil {
					t.Fatal(err)
				}
			}
			f := &undoFlavor{etcdFlavor: &etcdFlavor{ec: ec}, joined: tt.joined}
			d := &Deps{Cluster: "c", StateDir: t.TempDir(), Provider: &vipProvider{replicas: []providers.Replica{tt.rep}}, Master: f}
			wf := &Workflow{Name: "add-replica", Params: map[string]string{"name": tt.rep.Name}, Steps: []Step{joinStep(d, f, AddParams{Timeout: time.Minute})}}
			j := runWorkflow(ctx, t, d, wf, &recorder{}, func(j *Journal) {
				if tt.interrupted {
					j.Data["join_started"] = "true"
				}
			})
			if !slices.Equal(f.calls, tt.want) {
				t.Errorf("calls\n got %q\nwant %q", f.calls, tt.want)
			}
			if j.Data["join_started"] != "true" {
				t.Errorf("join_started = %q, want it recorded", j.Data["join_started"])
			}
			ms, err := cli.Members(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := providers.FindMember(ms, "", newPeer); ok {
				t.Errorf("the learner %s survived: %+v", newPeer, ms)
			}
		})
	}
}

// lbProvider is a vipProvider with a load balancer that records drains.
type lbProvider struct {
	*vipProvider
	lb *drainLB
}

func (p *lbProvider) LoadBalancer() lb.LoadBalancer { return p.lb }

type drainLB struct {
	lb.LoadBalancer // unused methods panic
	st              lb.Status
	drained         []string
}

func (l *drainLB) Get(context.Context) (lb.Status, error) { return l.st, nil }
func (l *drainLB) DrainTarget(_ context.Context, name string) error {
	l.drained = append(l.drained, name)
	return nil
}

// TestDrainOnlyTarget: the load balancer's only target (a sole master
// upgraded with --allow-downtime) is not drained: its clients, and the
// master's own tools that reach the API through the endpoint, would get
// nothing; with another target it is.
func TestDrainOnlyTarget(t *testing.T) {
	t.Parallel()
	one := []providers.Replica{{Name: "a", Address: "198.18.1.1", State: providers.StateRunning}}
	for _, tt := range []struct {
		name    string
		targets []lb.TargetHealth
		drained []string
	}{
		{"the only target", []lb.TargetHealth{{Name: "a", Healthy: true}}, nil},
		{"another target", []lb.TargetHealth{{Name: "a", Healthy: true}, {Name: "b", Healthy: true}}, []string{"a"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := &drainLB{st: lb.Status{IP: "198.18.1.100", Targets: tt.targets}}
			d := &Deps{Cluster: "c", StateDir: t.TempDir(), Provider: &lbProvider{vipProvider: &vipProvider{replicas: one}, lb: l}, Master: &joinFlavor{}}
			wf := &Workflow{Name: "drain", Params: map[string]string{}, Steps: []Step{{Name: "drain", Run: func(ctx context.Context, r *Run) error {
				exists, err := drainMovingLeader(ctx, d, r, "a", 0, nil)
				if !exists {
					t.Error("drainMovingLeader says there is no load balancer")
				}
				return err
			}}}}
			sink := &recorder{}
			runWorkflow(context.Background(), t, d, wf, sink, nil)
			if !slices.Equal(l.drained, tt.drained) {
				t.Errorf("drained %q, want %q", l.drained, tt.drained)
			}
			said := false
			for _, e := range sink.events {
				said = said || strings.Contains(e.Message, "only target: not drained")
			}
			if said != (tt.drained == nil) {
				t.Errorf("said it is the only target: %v", said)
			}
		})
	}
}

// runWorkflow runs wf afresh on d's journal store with sink, after
// prepare (when set) has edited the journal (an earlier, interrupted
// run's data), failing t on an error; it returns the journal.
func runWorkflow(ctx context.Context, t *testing.T, d *Deps, wf *Workflow, sink Sink, prepare func(*Journal)) *Journal {
	t.Helper()
	rn := &Runner{Store: NewJournalStore(d.StateDir, d.Cluster), Sink: sink}
	j, _, err := rn.Prepare(wf, nil)
	if err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(j)
	}
	if err := rn.Execute(ctx, wf, j); err != nil {
		t.Fatal(err)
	}
	return j
}
