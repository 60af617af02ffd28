package lbproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/loopbacktest"
)

func TestLBRoutesOnlyToHealthyTargets(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	a, b, c := newBackend(t, pki, "a", true), newBackend(t, pki, "b", true), newBackend(t, pki, "c", false)
	cfg, path := testConfig(t, pki, nil, a, b, c)
	startLB(t, cfg, path)
	cl := client(pki)

	steps := []struct {
		name     string
		flip     func()
		healthy  []string
		wantOnly []string // every healthy target gets traffic, nothing else does
	}{
		{"initial", func() {}, []string{"a", "b"}, []string{"a", "b"}},
		{"b turns unready", func() { b.ready.Store(false) }, []string{"a"}, []string{"a"}},
		{"c turns ready", func() { c.ready.Store(true) }, []string{"a", "c"}, []string{"a", "c"}},
		{"all ready", func() { b.ready.Store(true) }, []string{"a", "b", "c"}, []string{"a", "b", "c"}},
	}
	for _, s := range steps { // sequential: each step starts from the last
		s.flip()
		// 2 failures at 50 ms intervals plus a check's latency: about
		// 150 ms; waitStatus's 10 s is the hang guard (how fast is the
		// configuration's thresholds × interval, not this test's claim).
		st := waitStatus(t, cfg.StatusFile, s.name, func(st Status) bool { return healthy(st, s.healthy...) })
		counts := whoCounts(t, cl, cfg.Listen, 6*len(s.wantOnly))
		for _, n := range s.wantOnly {
			if counts[n] != 6 {
				t.Errorf("%s: counts %v, want 6 for each of %v (round robin)", s.name, counts, s.wantOnly)
				break
			}
		}
		if len(counts) != len(s.wantOnly) {
			t.Errorf("%s: counts %v, want only %v", s.name, counts, s.wantOnly)
		}
		for _, tg := range st.Targets {
			if !tg.Healthy && !strings.Contains(tg.LastError, "HTTP 503") {
				t.Errorf("%s: unhealthy %s last_error %q, want the 503", s.name, tg.Name, tg.LastError)
			}
			if tg.LastChecked.IsZero() {
				t.Errorf("%s: %s last_checked is zero", s.name, tg.Name)
			}
		}
	}
}

func TestLBDrainingKeepsExistingConnections(t *testing.T) {
	t.Parallel()
	// A long-lived connection to whichever target it lands on.
	l := startTwoTargets(t, nil)
	pki, cfg, path, pc, first := l.pki, l.cfg, l.path, l.pc, l.first
	other := map[string]string{"a": "b", "b": "a"}[first]

	for i := range cfg.Targets {
		cfg.Targets[i].Draining = cfg.Targets[i].Name == first
	}
	if err := WriteConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, cfg.StatusFile, first+" draining", func(s Status) bool {
		tg, _ := s.Target(first)
		return tg.Draining
	})
	if tg, _ := st.Target(first); !tg.Healthy || tg.ActiveConnections != 1 {
		t.Errorf("draining target status %+v, want healthy with 1 active connection", tg)
	}

	if counts := whoCounts(t, client(pki), cfg.Listen, 6); counts[other] != 6 {
		t.Errorf("new connections while %s drains: %v, want all 6 on %s", first, counts, other)
	}
	for range 3 {
		got, err := pc.who()
		if err != nil || got != first {
			t.Fatalf("existing connection after drain: %q %v, want %q", got, err, first)
		}
	}

	// Un-drain: new connections reach it again.
	cfg.Targets[0].Draining, cfg.Targets[1].Draining = false, false
	if err := WriteConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, cfg.StatusFile, "undrained", func(s Status) bool {
		tg, _ := s.Target(first)
		return !tg.Draining
	})
	if counts := whoCounts(t, client(pki), cfg.Listen, 4); counts["a"] != 2 || counts["b"] != 2 {
		t.Errorf("after undrain: %v, want 2 each", counts)
	}
}

func TestLBReload(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	a, b := newBackend(t, pki, "a", true), newBackend(t, pki, "b", true)
	cfg, path := testConfig(t, pki, nil, a)
	startLB(t, cfg, path)
	cl := client(pki)
	waitStatus(t, cfg.StatusFile, "a healthy", func(s Status) bool { return healthy(s, "a") })

	steps := []struct {
		name    string
		targets []Target
		listen  string // "" keeps cfg.Listen
		want    []string
	}{
		{"add b", []Target{a.target(), b.target()}, "", []string{"a", "b"}},
		{"remove a", []Target{b.target()}, "", []string{"b"}},
		{"listen change ignored", []Target{a.target(), b.target()}, loopbacktest.Addr(t), []string{"a", "b"}},
	}
	for _, s := range steps {
		next := cfg
		next.Targets = s.targets
		if s.listen != "" {
			next.Listen = s.listen
		}
		if err := WriteConfig(path, next); err != nil {
			t.Fatal(err)
		}
		st := waitStatus(t, cfg.StatusFile, s.name, func(st Status) bool {
			return len(st.Targets) == len(s.want) && healthy(st, s.want...)
		})
		if st.Listen != cfg.Listen {
			t.Errorf("%s: status listen %s, want %s kept", s.name, st.Listen, cfg.Listen)
		}
		counts := whoCounts(t, cl, cfg.Listen, 2*len(s.want))
		for _, n := range s.want {
			if counts[n] != 2 {
				t.Errorf("%s: counts %v, want 2 each for %v", s.name, counts, s.want)
			}
		}
	}
}

func TestLBNoHealthyTargetClosesConnection(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	a := newBackend(t, pki, "a", false)
	cfg, path := testConfig(t, pki, nil, a)
	startLB(t, cfg, path)
	waitStatus(t, cfg.StatusFile, "a checked and unhealthy", func(s Status) bool {
		tg, _ := s.Target("a")
		return !tg.LastChecked.IsZero() && !tg.Healthy
	})
	conn, err := net.Dial("tcp", cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The read deadline is the hang guard: a proxied connection would
	// hit it (a timeout error), a closed one reads EOF or a reset.
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := conn.Read(make([]byte, 1))
	if !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("read = %d, %v; want the connection closed, not proxied", n, err)
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

func TestLBStatusAndShutdown(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	a, b := newBackend(t, pki, "a", true), newBackend(t, pki, "b", false)
	cfg, path := testConfig(t, pki, func(c *Config) { c.Targets[1].Draining = true }, a, b)
	r := startLB(t, cfg, path)
	st := waitStatus(t, cfg.StatusFile, "checked", func(s Status) bool {
		ta, _ := s.Target("a")
		tb, _ := s.Target("b")
		return ta.Healthy && !tb.LastChecked.IsZero()
	})
	if st.PID != os.Getpid() || st.Listen != cfg.Listen || !st.Serving || st.Updated.IsZero() {
		t.Errorf("status %+v", st)
	}
	want := []TargetStatus{
		{Name: "a", Address: a.target().Address, Healthy: true},
		{Name: "b", Address: b.target().Address, Draining: true, LastError: "HTTP 503: etcd not ready\n"},
	}
	for i, w := range want {
		g := st.Targets[i]
		g.LastChecked = time.Time{}
		if g != w {
			t.Errorf("target %d = %+v, want %+v", i, g, w)
		}
	}
	if _, err := os.Stat(cfg.PIDFile); err != nil {
		t.Errorf("pid file: %v", err)
	}
	// A proxied connection that is open at shutdown is closed.
	pc := dialPersistent(t, pki, cfg.Listen)
	if _, err := pc.who(); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if _, err := pc.who(); err == nil {
		t.Error("proxied connection still works after Run returned")
	}
	final, err := ReadStatus(cfg.StatusFile)
	if err != nil || final.Serving {
		t.Errorf("final status %+v, %v: want serving false", final, err)
	}
	if _, err := os.Stat(cfg.PIDFile); !os.IsNotExist(err) {
		t.Errorf("pid file after stop: %v, want removed", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		t.Errorf("listen address still bound after stop: %v", err)
	} else {
		ln.Close()
	}
}

func TestRunBindError(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg, path := testConfig(t, pki, nil)
	cfg.Listen = busy.Addr().String()
	err = Run(context.Background(), cfg, path, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), cfg.Listen) || !strings.Contains(err.Error(), "something else is bound to it") {
		t.Fatalf("Run on a busy address = %v, want an error naming %s with a hint", err, cfg.Listen)
	}
}

// TestHandleConnTriesNextTarget: a healthy-marked target that refuses
// connections is skipped for the next one.
func TestHandleConnTriesNextTarget(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	alive := newBackend(t, pki, "alive", true)
	deadAddr := loopbacktest.Addr(t) // nothing listens there
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := &lb{log: slog.New(slog.DiscardHandler), stopCtx: ctx,
		cfg: Config{Health: HealthConfig{Timeout: Duration{time.Second}}}}
	l.backends = []*backend{
		{Target: Target{Name: "dead", Address: deadAddr}, healthy: true},
		{Target: alive.target(), healthy: true},
	}

	front := loopbacktest.Serve(t, l.HandleConn)
	defer l.conns.Close()
	for i := range 4 { // round robin starts at each target in turn
		pc := dialPersistent(t, pki, front.Addr().String())
		got, err := pc.who()
		if err != nil || got != "alive" {
			t.Fatalf("request %d: %q %v, want alive", i, got, err)
		}
		pc.conn.Close()
	}
}

func TestBuildBackendsKeepsHealthState(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	l := &lb{log: slog.New(slog.DiscardHandler), pool: pki.Pool}
	a := &backend{Target: Target{Name: "a", Address: "127.0.0.1:1"}, healthy: true, okStreak: 5}
	b := &backend{Target: Target{Name: "b", Address: "127.0.0.1:2"}, healthy: true}
	cfg := Config{Targets: []Target{
		{Name: "a", Address: "127.0.0.1:1", Draining: true}, // unchanged but draining
		{Name: "b", Address: "127.0.0.1:3"},                 // moved: a new target
		{Name: "c", Address: "127.0.0.1:4"},                 // new
	}, Health: HealthConfig{Timeout: Duration{time.Second}}}
	got := l.buildBackends(cfg, []*backend{a, b})
	cases := []struct {
		i                 int
		same              *backend
		healthy, draining bool
	}{
		{0, a, true, true},
		{1, nil, false, false},
		{2, nil, false, false},
	}
	for _, tc := range cases {
		g := got[tc.i]
		if tc.same != nil && g != tc.same {
			t.Errorf("target %d: a new backend, want the old one kept", tc.i)
		}
		if tc.same == nil && (g == a || g == b) {
			t.Errorf("target %d: reused an old backend for a changed target", tc.i)
		}
		if g.healthy != tc.healthy || g.Draining != tc.draining || g.client == nil {
			t.Errorf("target %d: %+v", tc.i, g)
		}
	}
}

// TestLBHungTargetDoesNotDelayOthers: a target whose check hangs until the
// timeout does not slow down the checks of the others: the other target is
// marked unhealthy while the hung check is still running.
func TestLBHungTargetDoesNotDelayOthers(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	a, hung := newBackend(t, pki, "a", true), newBackend(t, pki, "hung", true)
	cfg, path := testConfig(t, pki, func(c *Config) {
		// Far above the other target's 2 checks at 50 ms: the hung
		// check cannot end first, however slow the machine (waitStatus
		// gives up after 10 s).
		c.Health.Timeout = Duration{30 * time.Second}
	}, a, hung)
	startLB(t, cfg, path)
	waitStatus(t, cfg.StatusFile, "both healthy", func(s Status) bool { return healthy(s, "a", "hung") })
	hung.hang.Store(true)
	// A check of the hung target hangs once its request arrived: a
	// target's checks run one at a time, so every earlier one has ended
	// (a check begun before the hang could end late on a busy machine).
	waitFor(t, "a check of the hung target hanging", func() (bool, string) {
		return hung.hanging.Load() > 0, "no /readyz request since the hang"
	})
	since := time.Now()
	// The hung target's last check as a status written after that shows.
	var hungChecked time.Time
	waitStatus(t, cfg.StatusFile, "a checked again", func(s Status) bool {
		tg, _ := s.Target("a")
		h, _ := s.Target("hung")
		hungChecked = h.LastChecked
		return tg.LastChecked.After(since)
	})
	a.ready.Store(false)
	start := time.Now()
	st := waitStatus(t, cfg.StatusFile, "a unhealthy", func(s Status) bool {
		tg, _ := s.Target("a")
		return !tg.Healthy
	})
	// The order, not a speed: a was marked before the hung check ended.
	if h, _ := st.Target("hung"); !h.LastChecked.Equal(hungChecked) {
		t.Errorf("a marked unhealthy after the hung target's check ended (%v, hung since %v): that check held it up", h.LastChecked, hungChecked)
	}
	t.Logf("a marked unhealthy %v after it failed, the hung target's check still running", time.Since(start).Round(time.Millisecond))
}

func TestPickNoDialRetry(t *testing.T) {
	t.Parallel()
	for _, noRetry := range []bool{false, true} {
		l := &lb{cfg: Config{NoDialRetry: noRetry, Health: HealthConfig{Timeout: Duration{time.Second}}}}
		l.backends = []*backend{
			{Target: Target{Name: "a"}, healthy: true},
			{Target: Target{Name: "b"}, healthy: true},
			{Target: Target{Name: "c"}, healthy: false},
		}
		var firsts []string
		for range 4 {
			got, _ := l.pick()
			want := 2
			if noRetry {
				want = 1 // a pass-through LB: the chosen target or nothing
			}
			if len(got) != want {
				t.Fatalf("NoDialRetry=%v: pick() gave %d targets, want %d", noRetry, len(got), want)
			}
			firsts = append(firsts, got[0].Name)
		}
		if strings.Join(firsts, ",") != "a,b,a,b" {
			t.Errorf("NoDialRetry=%v: first targets %v, want round robin a,b,a,b", noRetry, firsts)
		}
	}
}

// A reload that removes a target closes its open connections only with
// TerminateRemoved (an NLB's connection termination at the end of the
// deregistration delay); otherwise they run on.
func TestLBTerminateRemoved(t *testing.T) {
	t.Parallel()
	for _, terminate := range []bool{false, true} {
		t.Run(fmt.Sprintf("terminate=%v", terminate), func(t *testing.T) {
			t.Parallel()
			l := startTwoTargets(t, func(c *Config) { c.TerminateRemoved = terminate })
			a, b, cfg, path, pc, first := l.a, l.b, l.cfg, l.path, l.pc, l.first
			keep := map[string]*testBackend{"a": b, "b": a}[first]
			next := cfg
			next.Targets = []Target{keep.target()}
			if err := WriteConfig(path, next); err != nil {
				t.Fatal(err)
			}
			waitStatus(t, cfg.StatusFile, first+" removed", func(s Status) bool { _, ok := s.Target(first); return !ok })
			got, err := pc.who()
			switch {
			case terminate && err == nil:
				t.Errorf("the removed target's connection still answers (%q)", got)
			case !terminate && (err != nil || got != first):
				t.Errorf("the removed target's connection: %q, %v; want it to run on to %s", got, err, first)
			}
		})
	}
}
