package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers/local"
	"github.com/hamaster/hamaster/workflows"
)

// recorder keeps progress events (for the order of upgrades).
type recorder struct {
	events []workflows.Event
}

func (r *recorder) Event(e workflows.Event) { r.events = append(r.events, e) }

func (e *env) upgrade(ctx context.Context, p workflows.UpgradeParams, sink workflows.Sink, after func(string) error) error {
	d := e.deps(after)
	if sink != nil {
		d.Sink = sink
	}
	if p.HealthTimeout == 0 {
		p.HealthTimeout = time.Minute
	}
	if p.Strategy == "" {
		p.Strategy = workflows.StrategyRecreate
	}
	rs, err := e.c.Provider.Instances().List(ctx)
	if err != nil {
		return err
	}
	return workflows.Execute(ctx, d, workflows.RollingUpgrade(d, p, len(rs)), workflows.Options{})
}

// grow adds n replicas named <cluster>-master-b0N.
func (e *env) grow(ctx context.Context, n int) []string {
	e.t.Helper()
	names := []string{local.MasterName(e.name)}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("%s-master-b%02d", e.name, i)
		if err := e.add(ctx, name, nil); err != nil {
			e.t.Fatalf("add %s: %v", name, err)
		}
		names = append(names, name)
	}
	return names
}

func (e *env) leader(ctx context.Context) string {
	e.t.Helper()
	cli := e.etcd(ctx)
	defer cli.Close()
	ms, err := cli.Members(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, m := range ms {
		if m.Leader {
			return m.Name
		}
	}
	e.t.Fatal("no leader")
	return ""
}

// assertVersions checks that want replicas run version and are healthy.
// Health is what each replica's /readyz says at one instant, which a
// loaded machine can fail for a moment (an etcd linearizable read timing
// out); so the check waits for every replica to answer healthy, under a
// hang guard of a minute (seconds are expected). A replica at another
// version fails at once.
func (e *env) assertVersions(ctx context.Context, version string, want int) {
	e.t.Helper()
	var rep workflows.Report
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := wait.Until(wctx, 250*time.Millisecond, "every replica healthy at "+version, func() (bool, error) {
		var err error
		if rep, err = workflows.Status(wctx, e.deps(nil)); err != nil {
			return false, nil
		}
		for _, r := range rep.Replicas {
			if r.Version != version && r.Version != "" {
				return true, nil // fails below, without waiting
			}
			if !r.Healthy {
				return false, nil
			}
		}
		return true, nil
	})
	if rep.Replicas == nil && err != nil {
		e.t.Fatalf("status: %v", err)
	}
	if len(rep.Replicas) != want {
		e.t.Errorf("%d replicas, want %d", len(rep.Replicas), want)
	}
	for _, r := range rep.Replicas {
		if r.Version != version || !r.Healthy {
			e.t.Errorf("replica %s: version %s healthy %v (%s); want %s (hang guard: %v)", r.Name, r.Version, r.Healthy, r.Error, version, err)
		}
	}
	if rep.LB != nil {
		for _, tg := range rep.LB.Targets {
			if tg.Draining {
				e.t.Errorf("LB target %+v left drained", tg)
				continue
			}
			if tg.Healthy {
				continue
			}
			// The LB's view lags: a health check that failed while the
			// machine was loaded (an etcd read timing out at a leader
			// move) is passed by the next ones, within seconds.
			wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			err := lb.WaitHealthy(wctx, e.c.Provider.LoadBalancer(), tg.Name)
			cancel()
			if err != nil {
				e.t.Errorf("LB target %+v left unhealthy: %v", tg, err)
			}
		}
	}
}

// upgradedOrder lists replicas in the order their recreate step ran.
func upgradedOrder(events []workflows.Event) []string {
	var out []string
	for _, ev := range events {
		if ev.State == "info" && strings.HasPrefix(ev.Message, "upgrading ") {
			out = append(out, strings.TrimPrefix(ev.Message, "upgrading "))
		}
	}
	return out
}

func TestRollingUpgradeRecreate(t *testing.T) {
	t.Parallel()
	eachClusterSize(t, "upg", []int{3, 5}, func(ctx context.Context, t *testing.T, e *env, n int) {
		leader := e.leader(ctx)
		pr := startProber(t, e)
		rec := &recorder{}
		err := e.upgrade(ctx, workflows.UpgradeParams{Version: "v1.31.0", DrainGrace: 500 * time.Millisecond}, rec, nil)
		pr.Finish()
		if err != nil {
			t.Fatalf("rolling-upgrade: %v", err)
		}
		e.assertVersions(ctx, "v1.31.0", n)
		order := upgradedOrder(rec.events)
		if len(order) != n || order[n-1] != leader {
			t.Errorf("upgrade order %v; want %d replicas with the leader %s last", order, n, leader)
		}
		t.Logf("%d replicas upgraded in order %v (leader %s); readyz through the LB: %d ok, %d failed %v", n, order, leader, pr.OK.Load(), pr.Failed.Load(), pr.Failures())
		if pr.Failed.Load() != 0 {
			t.Errorf("%d client failures through the LB during the upgrade", pr.Failed.Load())
		}
		// A re-run finds nothing to do.
		rec = &recorder{}
		if err := e.upgrade(ctx, workflows.UpgradeParams{Version: "v1.31.0"}, rec, nil); err != nil || len(upgradedOrder(rec.events)) != 0 {
			t.Errorf("second run: %v, upgraded %v", err, upgradedOrder(rec.events))
		}
	})
}

func TestRollingUpgradeBadFlagRollsBack(t *testing.T) {
	t.Parallel()
	e, ctx := startEnv(t, "badflag", 4*time.Minute)
	e.grow(ctx, 2)
	pr := startProber(t, e)
	err := e.upgrade(ctx, workflows.UpgradeParams{Version: "v1.31.0", ExtraArgs: []string{"--no-such-flag"}, ExtraArgsSet: true, HealthTimeout: 3 * time.Second, DrainGrace: 300 * time.Millisecond}, nil, nil)
	pr.Finish()
	if !errors.Is(err, workflows.ErrConcluded) || errkind.ExitCode(err) != 1 {
		t.Fatalf("err = %v; want a concluded rollback (exit 1)", err)
	}
	for _, want := range []string{"unknown flag", "restored", "v1.30.2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
	e.assertVersions(ctx, "v1.30.2", 3)
	if pr.Failed.Load() != 0 {
		t.Errorf("%d client failures during the failed upgrade: %v", pr.Failed.Load(), pr.Failures())
	}
	// The rollback closed the run: a corrected upgrade starts fresh.
	if err := e.upgrade(ctx, workflows.UpgradeParams{Version: "v1.31.0", ExtraArgs: []string{"--v=2"}, ExtraArgsSet: true}, nil, nil); err != nil {
		t.Fatalf("corrected upgrade: %v", err)
	}
	e.assertVersions(ctx, "v1.31.0", 3)
}

// TestRollingUpgradeFailuresRollBack: on one 3-replica cluster, an
// unstartable version with each strategy and a bad flag with surge all
// end in exit 1, every replica healthy at the old version and no learner
// or extra replica left. The gate fails fast: the error is the replica's
// own report of its failure (its process exited at start, its apiserver
// refused to start), never a health timeout run out. How fast is a speed
// figure, logged here and measured by make bench's
// BenchmarkBadFlagRollback (rollback-s).
func TestRollingUpgradeFailuresRollBack(t *testing.T) {
	t.Parallel()
	e, ctx := startEnv(t, "upgfail", 4*time.Minute)
	e.grow(ctx, 2)
	cases := []struct {
		name string
		p    workflows.UpgradeParams
		want string
		// failed is how the replica's own report of its failure reads.
		failed string
	}{
		{"recreate unstartable version", workflows.UpgradeParams{Version: "v2.0.0"}, "no control-plane binary", "exited at start"},
		{"surge unstartable version", workflows.UpgradeParams{Version: "v2.0.0", Strategy: workflows.StrategySurge}, "no control-plane binary", "exited at start"},
		{"surge bad flag", workflows.UpgradeParams{Version: "v1.31.0", Strategy: workflows.StrategySurge, ExtraArgs: []string{"--no-such-flag"}, ExtraArgsSet: true}, "unknown flag", "refused to start"},
	}
	for _, c := range cases {
		c.p.DrainGrace = 200 * time.Millisecond
		c.p.HealthTimeout = time.Minute // fail-fast stops before it, on the replica's report
		start := time.Now()
		err := e.upgrade(ctx, c.p, nil, nil)
		took := time.Since(start)
		if !errors.Is(err, workflows.ErrConcluded) || errkind.ExitCode(err) != 1 || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: err = %v; want a concluded rollback (exit 1) naming %q", c.name, err, c.want)
		}
		// Failed fast: on the replica's report, not a wait run out (the
		// health gate's timeout reads "check failed: ...").
		if !strings.Contains(err.Error(), c.failed) || strings.Contains(err.Error(), "check failed") || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: err = %v; want the replica's own report (%q), not a health timeout", c.name, err, c.failed)
		}
		t.Logf("%s: rolled back in %s (a speed figure: BenchmarkBadFlagRollback): %v", c.name, took.Round(time.Millisecond), err)
		e.assertVersions(ctx, "v1.30.2", 3)
		cli := e.etcd(ctx)
		ms, err := cli.Members(ctx)
		cli.Close()
		if err != nil || len(ms) != 3 {
			t.Fatalf("%s: members %v, %v; want 3", c.name, ms, err)
		}
		for _, m := range ms {
			if m.Learner {
				t.Errorf("%s: learner %s left", c.name, m.IDHex())
			}
		}
	}
}

// TestRollingUpgradeCrashAfterEveryStep crashes the same upgrade after
// each step in turn; every re-run resumes one step further.
func TestRollingUpgradeCrashAfterEveryStep(t *testing.T) {
	t.Parallel()
	e, ctx := startEnv(t, "upgcrash", 6*time.Minute)
	e.grow(ctx, 2)
	p := workflows.UpgradeParams{Version: "v1.31.0", DrainGrace: 100 * time.Millisecond}
	steps := crashAfterEachStepOnce(t, 40, func(after func(string) error) error {
		return e.upgrade(ctx, p, workflows.Discard{}, after)
	})
	if steps < 17 {
		t.Errorf("only %d crashes; the workflow has more steps", steps)
	}
	e.assertVersions(ctx, "v1.31.0", 3)
	t.Logf("rolling-upgrade crashed after each of %d steps and finished", steps)
}

func TestRollingUpgradeSurge(t *testing.T) {
	t.Parallel()
	eachClusterSize(t, "surge", []int{1, 3}, func(ctx context.Context, t *testing.T, e *env, n int) {
		if err := e.upgrade(ctx, workflows.UpgradeParams{Version: "v1.31.0", Strategy: workflows.StrategySurge, DrainGrace: 200 * time.Millisecond}, nil, nil); err != nil {
			t.Fatalf("surge: %v", err)
		}
		e.assertVersions(ctx, "v1.31.0", n)
	})
}

// eachClusterSize runs test once for each size in ns, in parallel
// subtests, each on a cluster of its own (named prefix and size) grown
// to that many replicas, within 6 minutes.
func eachClusterSize(t *testing.T, prefix string, ns []int, test func(ctx context.Context, t *testing.T, e *env, n int)) {
	for _, n := range ns {
		t.Run(fmt.Sprintf("%d replicas", n), func(t *testing.T) {
			t.Parallel()
			e, ctx := startEnv(t, fmt.Sprintf("%s%d", prefix, n), 6*time.Minute)
			e.grow(ctx, n-1)
			test(ctx, t, e, n)
		})
	}
}

func TestRollingUpgradeRecreateSingleReplicaRefused(t *testing.T) {
	t.Parallel()
	e, ctx := startEnv(t, "single", 3*time.Minute)
	err := e.upgrade(ctx, workflows.UpgradeParams{Version: "v1.31.0"}, nil, nil)
	if !errors.Is(err, errkind.FailedPrecondition) || !strings.Contains(err.Error(), "--strategy surge") {
		t.Fatalf("err = %v; want refusal suggesting surge", err)
	}
	e.assertVersions(ctx, "v1.30.2", 1)
	if err := e.upgrade(ctx, workflows.UpgradeParams{Version: "v1.31.0", AllowDowntime: true}, nil, nil); err != nil {
		t.Fatalf("--allow-downtime: %v", err)
	}
	e.assertVersions(ctx, "v1.31.0", 1)
}

// crashAfterEachStepOnce runs run until it succeeds, each time with an
// after-step hook that fails ("a crash") after every step not crashed
// after before, so each step is crashed after once and resumed; at most
// max runs. It returns the number of crashes.
func crashAfterEachStepOnce(t *testing.T, max int, run func(after func(string) error) error) int {
	t.Helper()
	crash := errors.New("simulated crash")
	crashed := map[string]bool{}
	crashes := 0
	for i := 0; i < max; i++ {
		err := run(func(step string) error {
			if !crashed[step] {
				crashed[step] = true
				return crash
			}
			return nil
		})
		if err == nil {
			return crashes
		}
		if !errors.Is(err, crash) {
			t.Fatalf("run %d: %v", i, err)
		}
		crashes++
	}
	t.Fatalf("not finished after %d runs (%d crashes)", max, crashes)
	return crashes
}
