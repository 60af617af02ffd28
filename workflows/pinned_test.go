package workflows

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/etcdmember/etcdtest"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/providers"
)

// etcdFlavor is a flavor whose masters m-1..m-3 are the members of a
// real (embedded) etcd cluster, named after their replicas.
type etcdFlavor struct {
	flavors.Flavor // unused methods panic
	ec             *etcdtest.Cluster
}

func (*etcdFlavor) Name() string           { return "etcd-only" }
func (*etcdFlavor) EtcdClusters() []string { return []string{flavors.EtcdMain} }
func (*etcdFlavor) EtcdMember(_, replica, _ string) (string, string) {
	return replica, ""
}
func (f *etcdFlavor) EtcdCluster(ctx context.Context, _ string, _ ...string) (*etcdmember.Client, error) {
	return etcdmember.New(ctx, f.ec.ClientConfig())
}

// pinFlavor is an etcdFlavor with the PinFinder capability: it answers
// pins (or err) and records what it was asked to exclude.
type pinFlavor struct {
	*etcdFlavor
	pins  []flavors.Pin
	err   error
	asked [][]string
}

func (f *pinFlavor) Pinned(_ context.Context, exclude ...string) ([]flavors.Pin, error) {
	f.asked = append(f.asked, exclude)
	return f.pins, f.err
}

// TestRemoveRefusesPinnedMaster: remove-replica's preflight refuses,
// before anything changes (exit 3), to remove a master that a consumer
// the flavor's tool rendered from the endpoint still names, listing
// them and the command that repoints them; --force removes it anyway
// with a warning naming them; pins on the victim's own files or on
// another master do not block; a flavor without the capability is not
// asked; a run resumed after its first change is not refused half-way.
func TestRemoveRefusesPinnedMaster(t *testing.T) {
	t.Parallel()
	ec := etcdtest.Start(t, 3, etcdtest.Options{})
	base := &etcdFlavor{ec: ec}
	replicas := []providers.Replica{
		{Name: "m-1", Address: "10.0.0.11", State: providers.StateRunning},
		{Name: "m-2", Address: "10.0.0.12", State: providers.StateRunning},
		{Name: "m-3", Address: "10.0.0.13", State: providers.StateRunning},
	}
	const fix = "hamaster endpoint set --yes 10.0.0.100:8443"
	proxy := flavors.Pin{Consumer: "kube-system/kube-proxy ConfigMap kubeconfig.conf", Server: "https://10.0.0.11:6443", Master: "m-1", Fix: fix}
	admin2 := flavors.Pin{Consumer: "/etc/kubernetes/admin.conf", On: "m-2", Server: "https://10.0.0.11:6443", Master: "m-1", Fix: fix}
	own := flavors.Pin{Consumer: "/etc/kubernetes/admin.conf", On: "m-1", Server: "https://10.0.0.11:6443", Master: "m-1", Fix: fix}
	other := flavors.Pin{Consumer: "/etc/kubernetes/admin.conf", On: "m-1", Server: "https://10.0.0.12:6443", Master: "m-2", Fix: fix}
	tests := []struct {
		name     string
		flavor   func() flavors.Flavor
		force    bool
		wantErr  []string // substrings; nil: no refusal
		wantInfo string   // a substring of an info event
		asked    bool
	}{
		{name: "named by kube-proxy and another master's admin.conf", flavor: func() flavors.Flavor {
			return &pinFlavor{etcdFlavor: base, pins: []flavors.Pin{proxy, admin2, own, other}}
		},
			wantErr: []string{"m-1's own address is still named", proxy.String(), admin2.String(), "repoint them first: " + fix, "--force"}, asked: true},
		{name: "--force", flavor: func() flavors.Flavor { return &pinFlavor{etcdFlavor: base, pins: []flavors.Pin{proxy, admin2}} }, force: true,
			wantInfo: "--force: removing m-1 although its own address is still named", asked: true},
		{name: "only its own files, and pins of another master", flavor: func() flavors.Flavor { return &pinFlavor{etcdFlavor: base, pins: []flavors.Pin{own, other}} }, asked: true},
		{name: "pins unreadable", flavor: func() flavors.Flavor { return &pinFlavor{etcdFlavor: base, err: errors.New("master m-2: ssh: down")} },
			wantErr: []string{"cannot tell whether anything still names m-1", "ssh: down", "--force"}, asked: true},
		{name: "pins unreadable, --force", flavor: func() flavors.Flavor { return &pinFlavor{etcdFlavor: base, err: errors.New("ssh: down")} }, force: true,
			wantInfo: "without knowing", asked: true},
		{name: "a flavor without the capability (local, cloud)", flavor: func() flavors.Flavor { return base }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			f := tt.flavor()
			d := &Deps{Cluster: "c", StateDir: t.TempDir(), Provider: &vipProvider{replicas: replicas}, Master: f}
			wf := RemoveReplica(d, RemoveParams{Name: "m-1", Force: tt.force})
			wf.Steps = pickSteps(wf.Steps, StepPreflight)
			rec := &recorder{}
			rn := &Runner{Store: NewJournalStore(d.StateDir, d.Cluster), Sink: rec}
			j, _, err := rn.Prepare(wf, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = rn.Execute(ctx, wf, j)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			} else {
				if !errors.Is(err, errkind.FailedPrecondition) || errkind.ExitCode(err) != 3 {
					t.Fatalf("err %v (exit %d); want a FailedPrecondition, exit 3", err, errkind.ExitCode(err))
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("the refusal lacks %q: %v", s, err)
					}
				}
				if strings.Contains(err.Error(), own.String()) || strings.Contains(err.Error(), other.String()) {
					t.Errorf("the refusal names a pin that does not block: %v", err)
				}
				// Refused before any change: no journal left.
				if j, err := rn.Store.Load(); err != nil || j != nil {
					t.Errorf("journal after the refusal: %+v, %v", j, err)
				}
			}
			if tt.wantInfo != "" && !slices.ContainsFunc(rec.events, func(e Event) bool { return e.State == "info" && strings.Contains(e.Message, tt.wantInfo) }) {
				t.Errorf("no info event with %q: %+v", tt.wantInfo, rec.events)
			}
			if pf, ok := f.(*pinFlavor); ok {
				if want := [][]string{{"m-1"}}; tt.asked && !slices.EqualFunc(pf.asked, want, slices.Equal) {
					t.Errorf("Pinned asked with exclude %v; want %v", pf.asked, want)
				}
			}
		})
	}

	// A run stopped after its first change resumes without the check: a
	// half-done removal is finished, not refused.
	t.Run("resumed after a change", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pf := &pinFlavor{etcdFlavor: base}
		d := &Deps{Cluster: "c", StateDir: t.TempDir(), Provider: &vipProvider{replicas: replicas}, Master: pf}
		crash := true
		build := func() *Workflow {
			wf := RemoveReplica(d, RemoveParams{Name: "m-1"})
			wf.Steps = append(pickSteps(wf.Steps, StepPreflight), Step{Name: "change", Run: func(context.Context, *Run) error {
				if crash {
					return errors.New("crash")
				}
				return nil
			}})
			return wf
		}
		rn := &Runner{Store: NewJournalStore(d.StateDir, d.Cluster), Sink: &recorder{}}
		wf := build()
		j, _, err := rn.Prepare(wf, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := rn.Execute(ctx, wf, j); err == nil || !strings.Contains(err.Error(), "crash") {
			t.Fatalf("first run: %v", err)
		}
		pf.pins, crash = []flavors.Pin{proxy}, false // named since
		wf = build()
		j, resumed, err := rn.Prepare(wf, nil)
		if err != nil || !resumed {
			t.Fatalf("Prepare: resumed %v, %v", resumed, err)
		}
		if err := rn.Execute(ctx, wf, j); err != nil {
			t.Fatalf("the resumed run was refused: %v", err)
		}
		if len(pf.asked) != 1 {
			t.Errorf("Pinned asked %d times; want once (by the first run, before its change)", len(pf.asked))
		}
	})
}

// TestCanRemoveSettled: remove-replica's preflight judges the voters
// again when one did not answer its status (a busy host), and allows
// the removal once it does; a voter that stays down is refused after
// the settle window, with the refusal's numbers.
func TestCanRemoveSettled(t *testing.T) {
	t.Parallel()
	voter := func(id uint64, healthy bool) etcdmember.Member {
		return etcdmember.Member{ID: id, Name: "m", PeerURLs: []string{"https://m:2380"}, ClientURLs: []string{"https://m:2379"}, Healthy: healthy}
	}
	slow := []etcdmember.Member{voter(1, true), voter(2, false), voter(3, false)}
	whole := []etcdmember.Member{voter(1, true), voter(2, true), voter(3, true)}
	tests := []struct {
		name    string
		first   []etcdmember.Member
		reads   [][]etcdmember.Member // what each read returns, the last one repeated
		want    string                // "" allowed, else a part of the refusal
		minRead int
	}{
		{"healthy at once: no read", whole, nil, "", 0},
		{"two voters slow, then answering", slow, [][]etcdmember.Member{slow, whole}, "", 2},
		{"two voters down for good", slow, [][]etcdmember.Member{slow}, "3 voters of which 1 healthy", 2},
		{"the last voter: refused without waiting", []etcdmember.Member{voter(1, true)}, nil, "last voter", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reads := 0
			read := func(context.Context) ([]etcdmember.Member, error) {
				reads++
				return tt.reads[min(reads, len(tt.reads))-1], nil
			}
			var said []string
			// A settle window of 3 s: the reads every 20 ms need only a
			// few of them (a busy race tier can take longer than 300 ms).
			err := canRemoveSettled(context.Background(), tt.first, 1, read, 3*time.Second, 20*time.Millisecond, func(f string, a ...any) {
				said = append(said, f)
			})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want a refusal naming %q", err, tt.want)
			}
			if reads < tt.minRead || (tt.minRead == 0 && reads != 0) {
				t.Errorf("%d reads, want at least %d (none when 0)", reads, tt.minRead)
			}
			if (tt.minRead > 0) != (len(said) > 0) {
				t.Errorf("waiting said %q", said)
			}
		})
	}
}

// pickSteps returns the steps of steps named names, in names' order.
func pickSteps(steps []Step, names ...string) []Step {
	out := make([]Step, 0, len(names))
	for _, n := range names {
		for _, s := range steps {
			if s.Name == n {
				out = append(out, s)
			}
		}
	}
	return out
}
