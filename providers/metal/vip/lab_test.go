//go:build metallab

package vip_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/providers/metal/vip"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

const (
	keepalivedBin = "/usr/sbin/keepalived"
	haproxyBin    = "/usr/sbin/haproxy"
	// failoverHangGuard bounds the wait for the VIP to move after a
	// fault: a hang guard, 10 x issue 24's goal of 3 s. The goal itself
	// is a speed figure, logged here and measured by make bench VIP=1's
	// BenchmarkVIPFailover, beside kubeadm's documented configuration.
	failoverHangGuard = 30 * time.Second
	// labHangGuard bounds a whole lab test: every SSH session on the lab
	// starts a second late (a slow login), and a test runs hundreds.
	labHangGuard = 10 * time.Minute
)

// apiserver is a stand-in kube-apiserver on one lab host: HTTPS on
// 0.0.0.0:6443 in the host's network namespace, /readyz 200 or 500 as
// the test says, every other path 200 with the host's name.
type apiserver struct {
	name  string
	ready atomic.Bool
	srv   *http.Server
	done  chan struct{}
}

func startAPIServer(t *testing.T, h *metallab.Host, cert tls.Certificate) *apiserver {
	t.Helper()
	l, err := metallabtest.ListenIn(h.NS, ":6443")
	if err != nil {
		t.Fatalf("apiserver on %s: %v", h.Name, err)
	}
	a := &apiserver{name: h.Name, done: make(chan struct{})}
	a.ready.Store(true)
	a.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/readyz" && !a.ready.Load() {
				http.Error(w, "[-]etcd failed", http.StatusInternalServerError)
				return
			}
			io.WriteString(w, a.name)
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		ErrorLog:  nil,
	}
	go func() {
		defer close(a.done)
		_ = a.srv.ServeTLS(l, "", "")
	}()
	t.Cleanup(a.stop)
	return a
}

// stop shuts the server down gracefully (idle keep-alive connections
// closed, requests in flight finished), as a kube-apiserver does.
func (a *apiserver) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
	<-a.done
}

// watcher polls which uncut hosts hold the VIP, each host every 25 ms
// in a goroutine of its own (so that slow "ip" runs on a busy machine do
// not stretch the period), for the whole test, and records every moment
// two held it at once (by each host's latest poll).
type watcher struct {
	lab     *metallab.Lab
	mu      sync.Mutex
	cut     map[string]bool
	held    map[string]bool
	holders []string
	polls   int
	splits  []string
	err     error
}

func (w *watcher) run(ctx context.Context) {
	var wg sync.WaitGroup
	w.mu.Lock()
	w.held = map[string]bool{}
	w.mu.Unlock()
	for _, h := range w.lab.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.poll(ctx, h)
		}()
	}
	wg.Wait()
}

func (w *watcher) poll(ctx context.Context, h *metallab.Host) {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		out, err := exec.CommandContext(ctx, "ip", "-n", h.NS, "-4", "-o", "addr", "show", "dev", "eth0").Output()
		if err != nil {
			if ctx.Err() == nil {
				w.mu.Lock()
				w.err = fmt.Errorf("ip addr in %s: %w", h.NS, err)
				w.mu.Unlock()
			}
			return
		}
		w.mu.Lock()
		w.held[h.Name] = strings.Contains(string(out), " "+w.lab.VIP.String()+"/")
		var hs []string
		for _, x := range w.lab.Hosts {
			if w.held[x.Name] && !w.cut[x.Name] {
				hs = append(hs, x.Name)
			}
		}
		w.holders, w.polls = hs, w.polls+1
		if len(hs) > 1 {
			w.splits = append(w.splits, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), hs))
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (w *watcher) setCut(name string, cut bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cut[name] = cut
	w.holders = slices.DeleteFunc(w.holders, func(h string) bool { return h == name })
}

// await waits up to bound for the VIP to be held by one host only, other
// than not (any when not is ""), and returns it and the time since start.
func (w *watcher) await(ctx context.Context, t *testing.T, what, not string, start time.Time, bound time.Duration) (string, time.Duration) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var got string
	err := wait.Until(wctx, 5*time.Millisecond, what, func() (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.err != nil {
			return false, w.err
		}
		if len(w.holders) == 1 && w.holders[0] != not {
			got = w.holders[0]
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		t.Fatalf("hang guard: %v: not one holder after %v (holders now %v)", err, bound, w.holders)
	}
	d := time.Since(start)
	t.Logf("%s: %s after %v", what, got, d.Round(time.Millisecond))
	return got, d
}

// stays checks that the VIP stays on holder for d (nopreempt: a master
// that recovers does not take the VIP back).
func (w *watcher) stays(ctx context.Context, t *testing.T, what, holder string, d time.Duration) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := wait.Until(wctx, 10*time.Millisecond, what, func() (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.holders) != 1 || w.holders[0] != holder {
			return false, fmt.Errorf("%s: the VIP left %s: holders %v", what, holder, w.holders)
		}
		return false, nil
	})
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	t.Logf("%s: %s kept the VIP for %v", what, holder, d)
}

type labHost struct {
	*metallab.Host
	c   *remote.Client
	h   vip.Host
	api *apiserver
}

func run(ctx context.Context, t *testing.T, c *remote.Client, cmd string) string {
	t.Helper()
	out, _, err := c.Run(ctx, cmd)
	if err != nil {
		t.Fatalf("%s: %s: %v", c.Addr(), cmd, err)
	}
	return string(out)
}

// startDaemon runs a static pod's command as a host process, as the test
// bed's kubelet will: detached, its output in log.
func startDaemon(ctx context.Context, t *testing.T, c *remote.Client, log string, cmd []string) {
	t.Helper()
	run(ctx, t, c, "setsid -f "+strings.Join(cmd, " ")+" </dev/null >"+log+" 2>&1")
}

func setLink(ctx context.Context, t *testing.T, lab *metallab.Lab, i int, state string) {
	t.Helper()
	if out, err := exec.CommandContext(ctx, "ip", "-n", lab.Switch(), "link", "set", fmt.Sprintf("h%d", i+1), state).CombinedOutput(); err != nil {
		t.Fatalf("link h%d %s: %v: %s", i+1, state, err, out)
	}
}

// The product's VIP on three lab hosts with Debian's keepalived and
// HAProxy (the static pods' commands run as host processes) and a
// stand-in apiserver per host: the holder's apiserver failing /readyz and
// the holder cut off each move the VIP to one other host (how fast, issue
// 24's 3 s goal, is logged here and measured by make bench VIP=1's
// BenchmarkVIPFailover); a planned handoff, drain and apiserver stop lose
// no request, on new connections or kept-alive ones; never two holders.
func TestVIPLab(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), labHangGuard)
	defer cancel()
	lab := metallabtest.Start(ctx, t, 3, keepalivedBin, haproxyBin, "curl")
	log := slog.New(slog.NewTextHandler(tlog{t}, nil))
	cert := metallabtest.SelfSigned(t)
	var hosts []*labHost
	var masters []vip.Master
	for _, h := range lab.Hosts {
		c, err := lab.Dial(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		hosts = append(hosts, &labHost{Host: h, c: c, h: vip.Host{Name: h.Name, Exec: c, Log: log}, api: startAPIServer(t, h, cert)})
		masters = append(masters, vip.Master{Name: h.Name, Address: h.Addr.String()})
	}
	cfgOf := func(i int) vip.Config {
		return vip.Config{VIP: lab.VIP.String(), Priority: vip.DefaultPriority(i, len(hosts)), Host: hosts[i].Name, Masters: masters}
	}
	// Remove on every host at the end, then nothing may be left.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, h := range hosts {
			if err := vip.Remove(ctx, h.h, lab.VIP.String()); err != nil {
				t.Errorf("Remove: %v", err)
				continue
			}
			if err := vip.Remove(ctx, h.h, lab.VIP.String()); err != nil {
				t.Errorf("Remove again: %v", err)
			}
			// The hosts share the machine's pids: the host's own processes
			// are those in its network namespace.
			out, _, _ := h.c.Run(ctx, "ls -d "+vip.ConfigDir+" "+vip.RunDir+" "+vip.KeepalivedManifestPath+" "+vip.HAProxyManifestPath+" 2>/dev/null; ip -o addr show | grep -F ' "+lab.VIP.String()+"/'")
			for _, comm := range []string{"keepalived", "haproxy"} {
				if ps := nsProcs(ctx, t, h.Host, comm); len(ps) > 0 {
					out = fmt.Appendf(out, "%s running: %v\n", comm, ps)
				}
			}
			if s := strings.TrimSpace(string(out)); s != "" {
				t.Errorf("%s: left after Remove: %s", h.Name, s)
			}
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, h := range hosts {
				out, _, _ := h.c.Run(context.Background(), "tail -n 40 "+vip.RunDir+"/keepalived.log "+vip.RunDir+"/haproxy.log")
				t.Logf("%s:\n%s", h.Name, out)
			}
		}
	})

	// Apply twice: the interface found on the host, files written, then
	// nothing to change.
	var files vip.Files
	for i, h := range hosts {
		res, err := vip.Apply(ctx, h.h, cfgOf(i))
		if err != nil {
			t.Fatal(err)
		}
		if res.Interface != "eth0" || len(res.Written) != len(vip.Files{}.All()) || len(res.Reloaded) != 0 {
			t.Fatalf("Apply on %s: %+v", h.Name, res)
		}
		if res, err = vip.Apply(ctx, h.h, cfgOf(i)); err != nil || len(res.Written)+len(res.Reloaded) != 0 {
			t.Fatalf("Apply again on %s changed %+v (%v)", h.Name, res, err)
		}
		c := cfgOf(i)
		c.Interface = "eth0"
		if files, err = vip.Render(c); err != nil {
			t.Fatal(err)
		}
		startDaemon(ctx, t, h.c, vip.RunDir+"/haproxy.log", files.HAProxyCommand)
	}
	w := &watcher{lab: lab, cut: map[string]bool{}}
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	watchStart := time.Now()
	go func() { defer close(watchDone); w.run(wctx) }()
	defer func() {
		stopWatch()
		<-watchDone
		t.Logf("holder polls (each host every 25 ms): %d in %v, two holders seen: %d %v", w.polls, time.Since(watchStart).Round(time.Second), len(w.splits), w.splits)
		if len(w.splits) > 0 {
			t.Errorf("split brain: two holders at once %d times: %v", len(w.splits), w.splits)
		}
	}()
	// keepalived on host-1 first: it is elected alone (all start BACKUP,
	// nopreempt); the others then join as backups.
	start := time.Now()
	startDaemon(ctx, t, hosts[0].c, vip.RunDir+"/keepalived.log", files.KeepalivedCommand)
	w.await(ctx, t, "first election", "", start, 15*time.Second)
	for _, h := range hosts[1:] {
		startDaemon(ctx, t, h.c, vip.RunDir+"/keepalived.log", files.KeepalivedCommand)
	}
	for _, h := range hosts {
		waitStatus(ctx, t, h.h, "every backend up", func(m map[string]string) bool {
			return m["host-1"] == "UP" && m["host-2"] == "UP" && m["host-3"] == "UP"
		})
	}
	w.stays(ctx, t, "backups join", "host-1", 2*time.Second)

	// A config change reloads the daemons without moving the VIP: the
	// holder's priority changes (keepalived SIGHUP), HAProxy gets a
	// drained server (SIGUSR2).
	c0 := cfgOf(0)
	c0.Priority--
	c0.Drained = []string{"host-3"}
	res, err := vip.Apply(ctx, hosts[0].h, c0)
	if err != nil || !slices.Equal(res.Reloaded, []string{"keepalived", "haproxy"}) {
		t.Fatalf("Apply a change: %+v, %v", res, err)
	}
	waitStatus(ctx, t, hosts[0].h, "host-3 drained by the config", func(m map[string]string) bool { return m["host-3"] == "DRAIN" })
	w.stays(ctx, t, "reload", "host-1", 2*time.Second)
	if _, err := vip.Apply(ctx, hosts[0].h, cfgOf(0)); err != nil {
		t.Fatal(err)
	}

	// (b) the holder's apiserver fails /readyz.
	hosts[0].api.ready.Store(false)
	start = time.Now()
	holder, readyzMove := w.await(ctx, t, "(b) host-1's /readyz 500", "host-1", start, failoverHangGuard)
	hosts[0].api.ready.Store(true)
	w.stays(ctx, t, "host-1 ready again (nopreempt)", holder, 4*time.Second)

	// (a) the holder's node dies: cut from the bridge.
	hi := slices.IndexFunc(hosts, func(h *labHost) bool { return h.Name == holder })
	setLink(ctx, t, lab, hi, "down")
	w.setCut(holder, true)
	start = time.Now()
	next, nodeMove := w.await(ctx, t, "(a) "+holder+" cut off", holder, start, failoverHangGuard)
	// The dead node comes back as a rebooted one does: keepalived stopped
	// while cut off, started again once linked (BACKUP, no preemption).
	// SSH cannot reach it: its keepalived is found by namespace.
	if err := wait.Until(ctx, 50*time.Millisecond, "keepalived on the cut host to stop", func() (bool, error) {
		ps := nsProcs(ctx, t, hosts[hi].Host, "keepalived")
		for _, p := range ps {
			_ = unix.Kill(p, unix.SIGTERM)
		}
		return len(ps) == 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	setLink(ctx, t, lab, hi, "up")
	w.setCut(holder, false)
	startDaemon(ctx, t, hosts[hi].c, vip.RunDir+"/keepalived.log", files.KeepalivedCommand)
	w.stays(ctx, t, holder+" back", next, 3*time.Second)

	// (c) planned: hand the VIP off from its holder, drain that master in
	// HAProxy everywhere, stop its apiserver — under load.
	old := slices.IndexFunc(hosts, func(h *labHost) bool { return h.Name == next })
	var peers []vip.Host
	for _, h := range hosts {
		if h.Name != next {
			peers = append(peers, h.h)
		}
	}
	load := startLoad(ctx, t, net.JoinHostPort(lab.VIP.String(), "8443"))
	load.await(ctx, t, 50)
	start = time.Now()
	// A hang guard: a handoff is a few sessions, each a second late.
	hctx, hcancel := context.WithTimeout(ctx, time.Minute)
	if err := vip.Handoff(hctx, hosts[old].h, peers, lab.VIP.String()); err != nil {
		t.Fatal(err)
	}
	hcancel()
	handoffStart, handoffEnd := start, time.Now()
	handoff := handoffEnd.Sub(start)
	t.Logf("(c) Handoff from %s: %v", next, handoff.Round(time.Millisecond))
	// Handoff returns once another host holds the VIP; the watcher's
	// own polls (every 25 ms) may not have seen it yet.
	handedTo, _ := w.await(ctx, t, "(c) the watcher sees the new holder", next, start, 5*time.Second)
	newHolder := []string{handedTo}
	load.await(ctx, t, load.count()+50)
	for _, h := range hosts {
		if err := vip.Drain(ctx, h.h, next); err != nil {
			t.Fatal(err)
		}
		if err := vip.Drain(ctx, h.h, next); err != nil {
			t.Fatalf("Drain again: %v", err)
		}
		waitStatus(ctx, t, h.h, next+" draining", func(m map[string]string) bool { return m[next] == "DRAIN" })
	}
	load.await(ctx, t, load.count()+50)
	hosts[old].api.stop()
	for _, h := range hosts {
		waitStatus(ctx, t, h.h, next+" down after its apiserver stopped", func(m map[string]string) bool { return strings.HasPrefix(m[next], "DOWN") })
	}
	load.await(ctx, t, load.count()+100)
	n, fails, reconnects := load.stop()
	t.Logf("(c) handoff to %v, drain, apiserver stop: %d requests, %d failed, kept-alive client opened %d connections", newHolder, n, len(fails), reconnects)
	// A request whose connection the old holder had accepted when the VIP
	// left it is reset or times out (the connection's state stays there): only dropping
	// new SYNs on the old holder before the move would avoid it (nftables,
	// which the lab's hosts lack; docs/metal.md). Such failures are
	// counted; any other fails the test.
	var atMove, other []failure
	for _, f := range fails {
		// The request was under way while the VIP moved.
		if !f.at.Before(handoffStart) && f.from.Before(handoffEnd.Add(500*time.Millisecond)) {
			atMove = append(atMove, f)
		} else {
			other = append(other, f)
		}
	}
	if len(atMove) > 0 {
		t.Logf("(c) %d requests in flight at the VIP's move were reset: %v", len(atMove), atMove)
	}
	if len(atMove) > 3 {
		t.Errorf("(c) %d requests failed at the VIP's move: more than those in flight", len(atMove))
	}
	if len(other) > 0 {
		t.Errorf("(c) %d requests failed outside the VIP's move (drain, apiserver stop): %v", len(other), other[:min(len(other), 5)])
	}
	// Undo: Resume and Ready; the VIP stays where it is (nopreempt).
	if err := vip.Resume(ctx, hosts[old].h); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if err := vip.Ready(ctx, h.h, next); err != nil {
			t.Fatal(err)
		}
	}
	if err := vip.Drain(ctx, hosts[0].h, "nobody"); err == nil {
		t.Error("Drain of an unknown server succeeded")
	}
	w.stays(ctx, t, "Resume", newHolder[0], 2*time.Second)
	t.Logf("figures (speed, not asserted: BenchmarkVIPFailover measures them): (b) /readyz failed → moved %v; (a) node cut off → moved %v; (c) planned handoff %v, %d requests, %d failed",
		readyzMove.Round(time.Millisecond), nodeMove.Round(time.Millisecond), handoff.Round(time.Millisecond), n, len(fails))
}

// nsProcs lists the processes called comm in h's network namespace (the
// hosts share the machine's pids).
func nsProcs(ctx context.Context, t *testing.T, h *metallab.Host, comm string) []int {
	t.Helper()
	out, err := exec.CommandContext(ctx, "ip", "netns", "pids", h.NS).Output()
	if err != nil {
		t.Fatalf("ip netns pids %s: %v", h.NS, err)
	}
	var ps []int
	for _, f := range strings.Fields(string(out)) {
		b, _ := os.ReadFile("/proc/" + f + "/comm")
		if p, err := strconv.Atoi(f); err == nil && strings.TrimSpace(string(b)) == comm {
			ps = append(ps, p)
		}
	}
	return ps
}

// waitStatus waits until HAProxy's view on h (server → status) satisfies ok.
func waitStatus(ctx context.Context, t *testing.T, h vip.Host, what string, ok func(map[string]string) bool) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var last map[string]string
	if err := wait.Until(wctx, 100*time.Millisecond, what+" on "+h.Name, func() (bool, error) {
		ts, err := vip.Status(wctx, h)
		if err != nil {
			return false, nil // haproxy still starting
		}
		last = map[string]string{}
		for _, x := range ts {
			st := strings.Fields(x.Reason + " ?")[0]
			if x.Draining && st == "UP" {
				st = "DRAIN" // weight 0 from the config
			}
			last[x.Name] = st
		}
		return ok(last), nil
	}); err != nil {
		t.Fatalf("%v (last %v)", err, last)
	}
}

// load sends GETs through the VIP without pause: one client opening a
// new connection for each, one keeping its connections alive (Go's
// transport, as client-go: a request on a reused connection that the
// server reset before answering is retried on a new one).
type load struct {
	mu         sync.Mutex
	n          int
	fails      []failure
	reconnects atomic.Int64
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

func startLoad(ctx context.Context, t *testing.T, addr string) *load {
	t.Helper()
	lctx, cancel := context.WithCancel(ctx)
	l := &load{cancel: cancel}
	tlsc := &tls.Config{InsecureSkipVerify: true}
	fresh := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsc, DisableKeepAlives: true}}
	kept := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsc, MaxIdleConnsPerHost: 2,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			l.reconnects.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}}
	for i, c := range []*http.Client{fresh, kept, kept} {
		kind := map[bool]string{true: "new connection", false: "kept-alive"}[i == 0]
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for lctx.Err() == nil {
				from := time.Now()
				req, _ := http.NewRequestWithContext(lctx, http.MethodGet, "https://"+addr+"/version", nil)
				resp, err := c.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %s", resp.Status)
					}
				}
				if lctx.Err() != nil {
					return
				}
				l.mu.Lock()
				l.n++
				if err != nil {
					l.fails = append(l.fails, failure{from, time.Now(), kind, err})
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// await waits until n requests have been made (progress, not time).
func (l *load) await(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := wait.Until(wctx, 10*time.Millisecond, fmt.Sprintf("%d requests", n), func() (bool, error) { return l.count() >= n, nil }); err != nil {
		t.Fatal(err)
	}
}

// failure is one failed request.
type failure struct {
	from time.Time // the request's start
	at   time.Time
	kind string
	err  error
}

func (f failure) String() string {
	return fmt.Sprintf("%s–%s %s: %v", f.from.Format("15:04:05.000"), f.at.Format("15:04:05.000"), f.kind, f.err)
}

func (l *load) stop() (int, []failure, int64) {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n, l.fails, l.reconnects.Load()
}

type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// The naive arm, for comparison: kubeadm's docs/ha-considerations.md as
// written (check every 3 s, fall 10, rise 2, weight -2; priorities 101 and
// 100, MASTER and BACKUP, preemption, multicast, adverts every 1 s), its
// check run against /readyz with --fail: the doc's check_apiserver.sh asks
// "/" without --fail and so never sees a /readyz 500, only a refused
// connection. Scenario (b): the holder's /readyz fails.
const docKeepalivedConf = `! after kubeadm's docs/ha-considerations.md
global_defs {
    router_id LVS_DEVEL
}
vrrp_script check_apiserver {
  script "/etc/kubernetes/doc-arm/check_apiserver.sh"
  interval 3
  weight -2
  fall 10
  rise 2
}

vrrp_instance VI_1 {
    state %s
    interface eth0
    virtual_router_id 51
    priority %d
    authentication {
        auth_type PASS
        auth_pass 42
    }
    virtual_ipaddress {
        %s
    }
    track_script {
        check_apiserver
    }
}
`

const docCheck = `#!/bin/sh
errorExit() {
    echo "*** $*" 1>&2
    exit 1
}
curl --silent --fail --max-time 2 --insecure https://localhost:6443/readyz -o /dev/null || errorExit "Error GET https://localhost:6443/readyz"
`

func TestVIPKubeadmDocArm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), labHangGuard)
	defer cancel()
	lab := metallabtest.Start(ctx, t, 2, keepalivedBin, "curl")
	cert := metallabtest.SelfSigned(t)
	var apis []*apiserver
	for i, h := range lab.Hosts {
		apis = append(apis, startAPIServer(t, h, cert))
		c, err := lab.Dial(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		state, prio := "MASTER", 101
		if i > 0 {
			state, prio = "BACKUP", 100
		}
		run(ctx, t, c, "mkdir -p /etc/kubernetes/doc-arm /run/doc-arm")
		if err := c.Upload(ctx, "/etc/kubernetes/doc-arm/keepalived.conf", fmt.Appendf(nil, docKeepalivedConf, state, prio, lab.VIP), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := c.Upload(ctx, "/etc/kubernetes/doc-arm/check_apiserver.sh", []byte(docCheck), 0o755); err != nil {
			t.Fatal(err)
		}
		// Stopped by the lab's teardown (every process of its hosts).
		startDaemon(ctx, t, c, "/run/doc-arm/keepalived.log", []string{"keepalived", "--dont-fork", "--log-console", "--vrrp",
			"--use-file=/etc/kubernetes/doc-arm/keepalived.conf", "--pid=/run/doc-arm/keepalived.pid", "--vrrp_pid=/run/doc-arm/vrrp.pid"})
	}
	w := &watcher{lab: lab, cut: map[string]bool{}}
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); w.run(wctx) }()
	defer func() {
		stopWatch()
		<-watchDone
		t.Logf("holder polls: %d, two holders seen: %d %v", w.polls, len(w.splits), w.splits)
	}()
	start := time.Now()
	w.await(ctx, t, "the doc's election", "", start, 15*time.Second)
	w.mu.Lock()
	first := w.holders[0]
	w.mu.Unlock()
	if first != "host-1" {
		t.Fatalf("the doc's MASTER is not holding: %s", first)
	}
	// The doc's check needs its first rise before it counts: wait until
	// host-1's check has passed (rise 2 × 3 s) — observed as 10 s of
	// holding, bounded by the test's context.
	w.stays(ctx, t, "the doc's checks rise", "host-1", 8*time.Second)
	apis[0].ready.Store(false)
	start = time.Now()
	_, d := w.await(ctx, t, "(b, the doc's timers) host-1's /readyz 500", "host-1", start, 60*time.Second)
	t.Logf("figures: the doc's configuration moved the VIP %v after /readyz failed (ours: logged by TestVIPLab; BenchmarkVIPFailover has both)", d.Round(time.Millisecond))
	if d < 20*time.Second {
		t.Errorf("the doc's arm moved in %v: expected ~30 s (fall 10 × interval 3 s)", d)
	}
}

// A planned handoff whose hamaster dies right after it made the holder
// drop new connections to the VIP, before the maintenance file (the VIP
// stays on the holder), heals by itself: new connections through the VIP
// are dropped at first, then accepted again once the drop's lifetime
// (vip.SynDropLifetime) has run out, with no command run on any host.
func TestVIPInterruptedHandoffHeals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), labHangGuard)
	defer cancel()
	lab := metallabtest.Start(ctx, t, 1, keepalivedBin, haproxyBin, "/usr/sbin/nft")
	h0 := lab.Hosts[0]
	c, err := lab.Dial(ctx, h0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := vip.Host{Name: h0.Name, Exec: c, Log: slog.New(slog.NewTextHandler(tlog{t}, nil))}
	startAPIServer(t, h0, metallabtest.SelfSigned(t))
	cfg := vip.Config{VIP: lab.VIP.String(), Priority: vip.DefaultPriority(0, 1), Host: h0.Name, Masters: []vip.Master{{Name: h0.Name, Address: h0.Addr.String()}}}
	if _, err := vip.Apply(ctx, h, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := vip.Remove(ctx, h, lab.VIP.String()); err != nil {
			t.Errorf("Remove: %v", err)
		}
	})
	cfg.Interface = "eth0"
	files, err := vip.Render(cfg)
	if err != nil {
		t.Fatal(err)
	}
	startDaemon(ctx, t, c, vip.RunDir+"/haproxy.log", files.HAProxyCommand)
	startDaemon(ctx, t, c, vip.RunDir+"/keepalived.log", files.KeepalivedCommand)
	addr := net.JoinHostPort(lab.VIP.String(), "8443")
	dial := func() error {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
		}
		return err
	}
	// A hang guard: the VIP is up and answering within seconds.
	if err := wait.Until(ctx, 100*time.Millisecond, "the VIP answering", func() (bool, error) { return dial() == nil, nil }); err != nil {
		t.Fatal(err)
	}

	// The handoff's first step, then nothing: hamaster is gone.
	dropping, err := vip.DropSYN(ctx, h, lab.VIP.String())
	if err != nil || !dropping {
		t.Fatalf("drop new connections on %s: dropping %v, %v (the lab's hosts have nft)", h0.Name, dropping, err)
	}
	dropped := time.Now()
	if err := dial(); err == nil {
		t.Fatalf("a new connection to %s went through right after the drop", addr)
	}
	// A hang guard: the drop ends after SynDropLifetime (the kernel's
	// timer), and nothing else may be needed.
	hctx, hcancel := context.WithTimeout(ctx, vip.SynDropLifetime+time.Minute)
	defer hcancel()
	if err := wait.Until(hctx, 500*time.Millisecond, "new connections to the VIP accepted again", func() (bool, error) { return dial() == nil, nil }); err != nil {
		t.Fatalf("hang guard: %v", err)
	}
	healed := time.Since(dropped)
	if healed < vip.SynDropLifetime-time.Second {
		t.Errorf("new connections accepted again %v after the drop, before its lifetime of %v ran out: the drop did not hold", healed, vip.SynDropLifetime)
	}
	if out := run(ctx, t, c, "nft list set inet "+vip.SynDropTable+" handoff"); strings.Contains(out, lab.VIP.String()) {
		t.Errorf("the VIP is still in the drop set:\n%s", out)
	}
	t.Logf("an interrupted handoff's drop healed by itself %v after it began (its lifetime %v)", healed.Round(100*time.Millisecond), vip.SynDropLifetime)
}
