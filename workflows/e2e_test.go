package workflows_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/providers/local"
	"github.com/hamaster/hamaster/testbed/local/localtest"
	"github.com/hamaster/hamaster/workflows"
	"github.com/hamaster/hamaster/workflows/workflowstest"
)

// env is one local cluster plus what the workflows need.
type env struct {
	t    *testing.T
	c    *localtest.Cluster
	name string
	wf   *workflowstest.Runner
}

func newEnv(t *testing.T, name string) *env {
	c := localtest.Up(t, name, localtest.Options{})
	return newEnvOn(t, c, name)
}

func newEnvOn(t *testing.T, c *localtest.Cluster, name string) *env {
	return &env{t: t, c: c, name: name, wf: workflowstest.NewRunner(c.Provider, name, c.Settings.StateDir)}
}

// startEnv is newEnv with the test's bound: a context that ends after d,
// or when the test ends.
func startEnv(t *testing.T, name string, d time.Duration) (*env, context.Context) {
	return newEnv(t, name).within(d)
}

// within returns e with the test's bound: a context that ends after d, or
// when the test ends.
func (e *env) within(d time.Duration) (*env, context.Context) {
	ctx, cancel := context.WithTimeout(e.t.Context(), d)
	e.t.Cleanup(cancel)
	return e, ctx
}

// etcd is a client of the cluster's etcd; the caller closes it.
func (e *env) etcd(ctx context.Context) *etcdmember.Client {
	e.t.Helper()
	cli, err := e.c.Provider.Etcd(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return cli
}

func (e *env) deps(after func(string) error) *workflows.Deps { return e.wf.Deps(after) }

func (e *env) add(ctx context.Context, name string, after func(string) error) error {
	return e.wf.Add(ctx, workflows.AddParams{Name: name, Timeout: time.Minute}, after)
}

func (e *env) remove(ctx context.Context, name string, after func(string) error) error {
	return e.wf.Remove(ctx, workflows.RemoveParams{Name: name, Timeout: time.Minute}, after)
}

// assertConverged checks that replicas, etcd members, LB targets, node
// processes, data dirs, address reservations and issued certificates all
// name exactly want, and the endpoint answers.
func (e *env) assertConverged(ctx context.Context, want ...string) {
	e.t.Helper()
	sort.Strings(want)
	d := e.deps(nil)
	rep := workflowstest.Settled(ctx, e.t, d)
	workflowstest.AssertReplicasAndMembers(e.t, rep, want)
	switch {
	case len(want) == 1 && rep.LB != nil:
		e.t.Errorf("one replica but a load balancer exists: %+v", rep.LB)
	case len(want) == 1 && rep.StaticIPHolder != want[0]:
		e.t.Errorf("static IP attached to %q, want %s", rep.StaticIPHolder, want[0])
	case len(want) > 1:
		workflowstest.AssertLBTargets(e.t, rep, want)
	}
	dir := filepath.Join(e.c.Settings.StateDir, e.name)
	if got := dirNames(e.t, filepath.Join(dir, "replicas")); !slices.Equal(got, want) {
		e.t.Errorf("replica dirs (disks) %v, want %v", got, want)
	}
	var issued []string
	for _, n := range want {
		if n != local.MasterName(e.name) {
			issued = append(issued, n)
		}
	}
	if got := dirNames(e.t, filepath.Join(dir, "pki", "replicas")); !slices.Equal(got, issued) {
		e.t.Errorf("issued certificate dirs %v, want %v", got, issued)
	}
	if got := nodeProcesses(e.t, dir); got != len(want) {
		e.t.Errorf("%d hamaster-node replica processes of this cluster, want %d", got, len(want))
	}
	if j, _ := workflows.NewJournalStore(e.c.Settings.StateDir, e.name).Load(); j != nil && !j.Finished {
		e.t.Errorf("journal unfinished: %s at %+v", j.Workflow, j.Steps)
	}
}

func dirNames(t *testing.T, dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// nodeProcesses counts live replica processes whose command line points
// into dir.
func nodeProcesses(t *testing.T, dir string) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && strings.Contains(string(stat), ") Z ") {
			continue
		}
		if strings.Contains(string(b), "hamaster-node") && strings.Contains(string(b), "replica") && strings.Contains(string(b), dir+"/") {
			n++
		}
	}
	return n
}

// prober reads /readyz through the static IP in a loop and counts.
// startProber probes /readyz through the static IP, trusting the
// cluster CA.
func startProber(t *testing.T, e *env) *workflowstest.Prober {
	pki := filepath.Join(e.c.Settings.StateDir, e.name, "pki")
	ca, err := certs.LoadCA(filepath.Join(pki, "ca.crt"), filepath.Join(pki, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, DisableKeepAlives: true}}
	return workflowstest.StartProber(client, fmt.Sprintf("https://%s:6443/readyz", e.c.Provider.Info().StaticIP))
}

func TestGrowAndShrink1to5to1(t *testing.T) {
	t.Parallel()
	e, ctx := startEnv(t, "grow", 5*time.Minute)
	master := local.MasterName("grow")
	names := []string{"grow-master-a01", "grow-master-a02", "grow-master-a03", "grow-master-a04"}
	pr := startProber(t, e)
	type phase struct {
		what   string
		failed int64
	}
	var phases []phase
	mark := func(what string) {
		phases = append(phases, phase{what, pr.Failed.Load()})
	}
	for i, n := range names {
		if err := e.add(ctx, n, nil); err != nil {
			t.Fatalf("add %s: %v", n, err)
		}
		mark("add " + n)
		if i == 1 {
			e.assertConverged(ctx, append([]string{master}, names[:2]...)...)
		}
	}
	e.assertConverged(ctx, append([]string{master}, names...)...)
	for i := len(names) - 1; i >= 0; i-- {
		if err := e.remove(ctx, names[i], nil); err != nil {
			t.Fatalf("remove %s: %v", names[i], err)
		}
		mark("remove " + names[i])
		if i == 2 {
			e.assertConverged(ctx, append([]string{master}, names[:2]...)...)
		}
	}
	pr.Finish()
	e.assertConverged(ctx, master)
	prev := int64(0)
	for _, p := range phases {
		t.Logf("readyz through the static IP: %d failed during %s", p.failed-prev, p.what)
		prev = p.failed
	}
	t.Logf("readyz through the static IP over 1→5→1: %d ok, %d failed", pr.OK.Load(), pr.Failed.Load())
	for _, f := range pr.Failures() {
		t.Logf("  failure: %s", f)
	}
	// Failures are allowed only at the promotion and demotion instants
	// (the first add and the last remove move the static IP).
	for i, p := range phases {
		before := int64(0)
		if i > 0 {
			before = phases[i-1].failed
		}
		if p.failed-before > 0 && i != 0 && i != len(phases)-1 {
			t.Errorf("%d failed requests during %s (only promotion/demotion may fail)", p.failed-before, p.what)
		}
	}
}

func TestConcurrentAddsOneWins(t *testing.T) {
	t.Parallel()
	e, ctx := startEnv(t, "race", 3*time.Minute)
	// The two operators use separate state dirs' journals would be the
	// realistic case; here they share one and race on the etcd lock.
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = e.add(ctx, fmt.Sprintf("race-master-%03x", i), nil)
		}()
	}
	close(start)
	wg.Wait()
	won, refused := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, errkind.FailedPrecondition):
			refused++
			t.Logf("refused: %v", err)
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	if won != 1 || refused != 1 {
		t.Fatalf("won=%d refused=%d, want 1 and 1 (%v)", won, refused, errs)
	}

	// Unmanaged DNS: the static driver prints the record to set, and the
	// endpoint becomes the DNS name.
	d := e.deps(nil)
	wf := workflows.AddReplica(d, workflows.AddParams{Name: "race-master-dns", DNSKind: "static", DNSName: "api.race.example.com", Timeout: time.Minute})
	if err := workflows.Execute(ctx, d, wf, workflows.Options{}); err != nil {
		t.Fatalf("add with --dns-name: %v", err)
	}
	ip := e.c.Provider.Info().StaticIP
	out := e.wf.Output()
	if !strings.Contains(out, "set api.race.example.com. A "+ip) {
		t.Errorf("static DNS driver did not print the record for %s:\n%s", ip, out)
	}
	rep, err := workflows.Status(ctx, d)
	if err != nil || rep.EndpointKind != "dns" || rep.Endpoint != "api.race.example.com" {
		t.Errorf("status endpoint = %q (%s), %v; want the DNS name", rep.Endpoint, rep.EndpointKind, err)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	e, ctx := startEnv(t, "badin", 2*time.Minute)
	master := local.MasterName("badin")
	cases := []struct {
		name string
		run  func() error
		kind error
		msg  string
	}{
		{"unknown replica", func() error { return e.remove(ctx, "badin-master-zzz", nil) }, errkind.InvalidArgument, "no replica, etcd member or reservation"},
		{"last replica", func() error { return e.remove(ctx, master, nil) }, errkind.FailedPrecondition, "last replica"},
	}
	for _, c := range cases {
		err := c.run()
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: err = %v, want %v containing %q", c.name, err, c.kind, c.msg)
		}
		e.assertConverged(ctx, master)
	}
}
