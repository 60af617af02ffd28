package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/workflows"
)

// inPlace is a flavor that upgrades its masters "in place" the way the
// local provider can: UpgradeMaster saves the replica's template and
// recreates it at the new version on the same data disk, RollbackMaster
// recreates it from what was saved. It records the calls, so that the
// in-place path of rolling-upgrade (kubeadm's) runs on real masters.
type inPlace struct {
	flavors.Flavor
	inst providers.Instances
	args []string
	st   *inPlaceState
}

type inPlaceState struct {
	mu    sync.Mutex
	saved map[string]providers.Template
	calls []string
}

var _ flavors.FlagUpgrader = inPlace{}

// IssueReplicaCertificates is the wrapped flavor's (hamaster's own
// masters: their certificates stay hamaster's to issue).
func (f inPlace) IssueReplicaCertificates(ca *certs.CA, name, address string, sans certs.APIServerSANs) (map[string][]byte, error) {
	issuer := flavors.CapabilitiesOf(f.Flavor).ReplicaCertIssuer
	if issuer == nil {
		return nil, fmt.Errorf("the %s flavor issues no replica certificates", f.Flavor.Name())
	}
	return issuer.IssueReplicaCertificates(ca, name, address, sans)
}

func (f inPlace) record(c string) {
	f.st.mu.Lock()
	f.st.calls = append(f.st.calls, c)
	f.st.mu.Unlock()
}

func (f inPlace) WithAPIServerArgs(args []string) flavors.Upgrader {
	f.args = args
	return f
}

func (f inPlace) UpgradeMaster(ctx context.Context, r providers.Replica, v string, first bool, _ time.Duration) error {
	f.record(fmt.Sprintf("upgrade %s first=%v", r.Name, first))
	t, err := f.save(ctx, r.Name)
	if err != nil {
		return err
	}
	t.Version = v
	if f.args != nil {
		t.ExtraArgs = f.args
	}
	_, err = f.inst.Recreate(ctx, r.Name, t)
	return err
}

// save keeps replica name's template, the first time, for
// RollbackMaster, and returns a copy of it as it is now.
func (f inPlace) save(ctx context.Context, name string) (providers.Template, error) {
	rep, err := f.inst.Get(ctx, name)
	if err != nil {
		return providers.Template{}, err
	}
	f.st.mu.Lock()
	if _, ok := f.st.saved[name]; !ok {
		f.st.saved[name] = rep.Template.Clone()
	}
	f.st.mu.Unlock()
	return rep.Template.Clone(), nil
}

func (f inPlace) RollbackMaster(ctx context.Context, r providers.Replica, first bool) error {
	f.record(fmt.Sprintf("rollback %s first=%v", r.Name, first))
	f.st.mu.Lock()
	t, ok := f.st.saved[r.Name]
	f.st.mu.Unlock()
	if !ok {
		return nil
	}
	if _, err := f.inst.Recreate(ctx, r.Name, t); err != nil {
		return err
	}
	return f.FinishUpgrade(ctx, r)
}

func (f inPlace) FinishUpgrade(_ context.Context, r providers.Replica) error {
	f.st.mu.Lock()
	delete(f.st.saved, r.Name)
	f.st.mu.Unlock()
	return nil
}

func (e *env) upgradeInPlace(ctx context.Context, f inPlace, p workflows.UpgradeParams, after func(string) error) error {
	d := e.deps(after)
	d.Master = f
	if p.HealthTimeout == 0 {
		p.HealthTimeout = time.Minute
	}
	p.AllowDowntime = true
	rs, err := e.c.Provider.Instances().List(ctx)
	if err != nil {
		return err
	}
	return workflows.Execute(ctx, d, workflows.RollingUpgrade(d, p, len(rs)), workflows.Options{})
}

// A flavor that upgrades in place (flavors.Upgrader) is upgraded one
// master at a time with its own tool, the first with first=true; a
// master whose upgrade fails is rolled back by the flavor (first: the
// cluster-wide configuration too) and the run stops; crashes after
// every step resume.
func TestRollingUpgradeInPlace(t *testing.T) {
	t.Parallel()
	e, ctx := startEnv(t, "inplace", 6*time.Minute)
	e.grow(ctx, 2)
	own, err := registry.Open("", e.c.Provider, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := inPlace{Flavor: own, inst: e.c.Provider.Instances(), st: &inPlaceState{saved: map[string]providers.Template{}}}

	// A refused flag: the first master fails its health gate and is
	// rolled back by the flavor, first=true; nobody else is touched.
	start := time.Now()
	err = e.upgradeInPlace(ctx, f, workflows.UpgradeParams{Version: "v1.31.0", ExtraArgs: []string{"--no-such-flag=1"}, ExtraArgsSet: true, DrainGrace: 200 * time.Millisecond}, nil)
	if !errors.Is(err, workflows.ErrConcluded) || errkind.ExitCode(err) != 1 || !strings.Contains(err.Error(), "rolled back in place to v1.30.2") {
		t.Fatalf("refused flag: err = %v; want a concluded in-place rollback", err)
	}
	t.Logf("refused flag rolled back in %v: %v", time.Since(start).Round(time.Millisecond), err)
	if got := strings.Join(f.st.calls, "; "); !strings.HasSuffix(got, "first=true; rollback "+strings.Fields(f.st.calls[0])[1]+" first=true") || len(f.st.calls) != 2 {
		t.Errorf("calls = %s; want one upgrade and its rollback, first=true", got)
	}
	e.assertVersions(ctx, "v1.30.2", 3)

	// --extra-args a flavor sets by name must be --name=value: refused
	// before anything changes.
	f.st.calls = nil
	err = e.upgradeInPlace(ctx, f, workflows.UpgradeParams{Version: "v1.31.0", ExtraArgs: []string{"--no-such-flag"}, ExtraArgsSet: true}, nil)
	if !errors.Is(err, errkind.InvalidArgument) || len(f.st.calls) != 0 {
		t.Errorf("--extra-args --no-such-flag: err = %v, calls %v; want InvalidArgument and no call", err, f.st.calls)
	}

	// The upgrade, crashed after every step once.
	f.st.calls = nil
	crashes := crashAfterEachStepOnce(t, 40, func(after func(string) error) error {
		return e.upgradeInPlace(ctx, f, workflows.UpgradeParams{Version: "v1.31.0", DrainGrace: 100 * time.Millisecond}, after)
	})
	if crashes < 15 {
		t.Errorf("only %d crashes; the workflow has more steps", crashes)
	}
	e.assertVersions(ctx, "v1.31.0", 3)
	firsts, masters := 0, map[string]bool{}
	for _, c := range f.st.calls {
		if strings.HasPrefix(c, "rollback") {
			t.Errorf("a rollback during a good upgrade: %v", f.st.calls)
		}
		if strings.HasSuffix(c, "first=true") {
			firsts++
		}
		masters[strings.Fields(c)[1]] = true
	}
	if firsts == 0 || len(masters) != 3 || strings.HasSuffix(f.st.calls[len(f.st.calls)-1], "first=true") {
		t.Errorf("calls = %v; want every master upgraded, the first of them with first=true", f.st.calls)
	}
	if len(f.st.saved) != 0 {
		t.Errorf("FinishUpgrade left saved state for %v", f.st.saved)
	}
	t.Logf("in-place upgrade crashed after each of %d steps and finished; calls %v", crashes, f.st.calls)
}
