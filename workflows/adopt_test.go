package workflows

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
)

// adoptingProvider counts its adoptions.
type adoptingProvider struct {
	*vipProvider
	adopted int
	err     error
}

func (*adoptingProvider) Name() string { return "adopting" }
func (p *adoptingProvider) Adopt(context.Context) error {
	p.adopted++
	return p.err
}

// lockless is a flavor whose etcd cannot be reached: Execute stops at the
// cluster lock, after the adopt step.
type lockless struct {
	flavors.Flavor // unused methods panic
	dials          int
}

func (*lockless) Name() string { return "lockless" }
func (f *lockless) EtcdCluster(context.Context, string, ...string) (*etcdmember.Client, error) {
	f.dials++
	return nil, errors.New("no etcd here")
}

// The adopt step runs once a change is confirmed and before the lock is
// taken; never on a dry run; a failed adoption stops the run before the
// lock.
func TestExecuteAdoptsBeforeTheLock(t *testing.T) {
	t.Parallel()
	run := func(p *adoptingProvider, f *lockless, dry bool) error {
		d := &Deps{Provider: p, Master: f, Cluster: "c", StateDir: t.TempDir(), Out: io.Discard, Holder: "test"}
		wf := &Workflow{Name: "test", Params: map[string]string{}}
		return Execute(t.Context(), d, wf, Options{DryRun: dry})
	}
	p, f := &adoptingProvider{vipProvider: &vipProvider{}}, &lockless{}
	if err := run(p, f, true); err != nil || p.adopted != 0 || f.dials != 0 {
		t.Fatalf("dry run: %v, %d adoptions, %d etcd dials; want none", err, p.adopted, f.dials)
	}
	if err := run(p, f, false); err == nil || !strings.Contains(err.Error(), "take cluster lock") || p.adopted != 1 || f.dials != 1 {
		t.Fatalf("run: %v, %d adoptions, %d etcd dials; want one adoption, then the lock refused", err, p.adopted, f.dials)
	}
	p, f = &adoptingProvider{vipProvider: &vipProvider{}, err: errors.New("tagging refused")}, &lockless{}
	if err := run(p, f, false); err == nil || !strings.Contains(err.Error(), StepAdopt+": ") || !strings.Contains(err.Error(), "tagging refused") || f.dials != 0 {
		t.Fatalf("failed adoption: %v, %d etcd dials; want the adopt step's error and no lock", err, f.dials)
	}
}

// Deps without a flavor are refused before anything runs, not a panic.
func TestExecuteRefusesDepsWithoutAFlavor(t *testing.T) {
	t.Parallel()
	p := &adoptingProvider{vipProvider: &vipProvider{}}
	d := &Deps{Provider: p, Cluster: "c", StateDir: t.TempDir(), Out: io.Discard}
	if err := Execute(t.Context(), d, &Workflow{Name: "test", Params: map[string]string{}}, Options{}); !errors.Is(err, ErrNoFlavor) || p.adopted != 0 {
		t.Fatalf("Execute without a flavor: %v (%d adoptions); want ErrNoFlavor and nothing done", err, p.adopted)
	}
	if _, err := Status(t.Context(), d); !errors.Is(err, ErrNoFlavor) {
		t.Fatalf("Status without a flavor: %v; want ErrNoFlavor", err)
	}
	if got := d.Flavor().Name(); got != "none" {
		t.Fatalf("Flavor() without one = %q; want the refusing stand-in", got)
	}
}
