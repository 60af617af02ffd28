package workflows_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/workflows"
)

// renewing is inPlace that also renews certificates with "its own
// tool" (flavors.CertRenewer), as kubeadm's certs renew does: a renewal
// saves the template (RollbackMaster restores it) and restarts the
// master on it; one whose apiserver then cannot start (bad) fails its
// health gate.
type renewing struct {
	inPlace
	rs *renewState
}

type renewState struct {
	mu       sync.Mutex
	expiring map[string]bool
	bad      string
}

var _ flavors.CertRenewer = renewing{}

func (f renewing) ExpiringCerts(_ context.Context, r providers.Replica, within time.Duration) ([]string, error) {
	f.rs.mu.Lock()
	defer f.rs.mu.Unlock()
	if f.rs.expiring[r.Name] && within > 0 {
		return []string{"apiserver", "admin.conf"}, nil
	}
	return nil, nil
}

func (f renewing) RenewCerts(ctx context.Context, r providers.Replica) error {
	f.record("renew " + r.Name)
	t, err := f.save(ctx, r.Name)
	if err != nil {
		return err
	}
	f.rs.mu.Lock()
	if f.rs.bad == r.Name {
		t.ExtraArgs = []string{"--no-such-flag=1"}
	} else {
		f.rs.expiring[r.Name] = false
	}
	f.rs.mu.Unlock()
	_, err = f.inst.Recreate(ctx, r.Name, t)
	return err
}

// rotate-certs on a flavor that renews its own certificates: only the
// masters with an expiring certificate are renewed, one at a time; one
// whose renewal leaves it unhealthy is rolled back by the flavor and the
// run stops before the next; crashes after every step resume, and no
// saved state is left.
func TestRotateCertsWithTheFlavorsTool(t *testing.T) {
	t.Parallel()
	e, ctx := startEnv(t, "renew", 6*time.Minute)
	e.grow(ctx, 1)
	rs, err := e.c.Provider.Instances().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range rs {
		names = append(names, r.Name)
	}
	// The CLI's order: the etcd leader's replica last, the others as given.
	leader := e.leader(ctx)
	for _, in := range [][]string{names, {names[1], names[0]}} {
		got := workflows.LeaderLast(ctx, e.deps(nil), in)
		want := append(slices.DeleteFunc(slices.Clone(in), func(n string) bool { return n == leader }), leader)
		if !slices.Equal(got, want) {
			t.Errorf("LeaderLast(%v) = %v; want %v (leader %s)", in, got, want, leader)
		}
	}
	own, err := registry.Open("", e.c.Provider, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := renewing{
		inPlace: inPlace{Flavor: own, inst: e.c.Provider.Instances(), st: &inPlaceState{saved: map[string]providers.Template{}}},
		rs:      &renewState{expiring: map[string]bool{names[0]: true, names[1]: true}, bad: names[0]},
	}
	rotate := func(after func(string) error) error {
		d := e.deps(after)
		d.Master = f
		return workflows.Execute(ctx, d, workflows.RotateCerts(d, workflows.RotateParams{DrainGrace: 100 * time.Millisecond, HealthTimeout: 20 * time.Second}, names), workflows.Options{})
	}

	// The first master's renewal leaves it unable to start: rolled back,
	// the run concluded, the second master (expiring too) not touched.
	err = rotate(nil)
	if !errors.Is(err, workflows.ErrConcluded) || !strings.Contains(err.Error(), "renewing the certificates of "+names[0]+" failed") {
		t.Fatalf("a renewal that fails: err = %v; want it concluded with %s rolled back", err, names[0])
	}
	if want := []string{"renew " + names[0], "rollback " + names[0] + " first=false"}; !slices.Equal(f.st.calls, want) {
		t.Errorf("calls = %v; want %v", f.st.calls, want)
	}
	e.assertVersions(ctx, "v1.30.2", 2)

	// Renewed, crashed after every step once: both renewed, nothing
	// rolled back.
	f.rs.bad, f.st.calls = "", nil
	crashes := crashAfterEachStepOnce(t, 20, rotate)
	if crashes != 3 { // snapshot and two rotate/ steps
		t.Errorf("%d crashes; want one after each of the 3 steps", crashes)
	}
	for _, c := range f.st.calls {
		if strings.HasPrefix(c, "rollback") {
			t.Errorf("calls = %v; want no rollback", f.st.calls)
		}
	}
	if !slices.Contains(f.st.calls, "renew "+names[0]) || !slices.Contains(f.st.calls, "renew "+names[1]) {
		t.Errorf("calls = %v; want %s and %s renewed", f.st.calls, names[0], names[1])
	}
	if len(f.st.saved) != 0 {
		t.Errorf("saved state left for %v", f.st.saved)
	}
	e.assertVersions(ctx, "v1.30.2", 2)

	// Nothing expiring any more: nothing renewed.
	f.st.calls = nil
	if err := rotate(nil); err != nil || len(f.st.calls) != 0 {
		t.Errorf("nothing expiring: err %v, calls %v; want no call", err, f.st.calls)
	}
}
