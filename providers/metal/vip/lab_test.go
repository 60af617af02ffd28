//go:build metallab

package vip_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/probeload"
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

type labHost struct {
	*metallab.Host
	c   *remote.Client
	h   vip.Host
	api *metallabtest.APIServer
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
	lab := metallabtest.Start(ctx, t, 3, keepalivedBin, haproxyBin, "curl", "/usr/sbin/nft")
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
		hosts = append(hosts, &labHost{Host: h, c: c, h: vip.Host{Name: h.Name, Exec: c, Log: log}, api: metallabtest.StartAPIServer(t, h, cert)})
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
			out, _, _ := h.c.Run(ctx, "ls -d "+vip.ConfigDir+" "+vip.RunDir+" "+vip.KeepalivedUnitPath+" "+vip.HAProxyUnitPath+" 2>/dev/null; ip -o addr show | grep -F ' "+lab.VIP.String()+"/'")
			for _, comm := range []string{"keepalived", "haproxy", metallab.UnitSupervisor} {
				if ps, err := metallabtest.NSProcs(ctx, h.Host, comm); err != nil || len(ps) > 0 {
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
				out, _, _ := h.c.Run(context.Background(), "tail -n 40 "+metallab.SystemdStateDir+"/*.log")
				t.Logf("%s:\n%s", h.Name, out)
			}
		}
	})

	w, stopWatch := metallabtest.WatchHolders(ctx, lab, 25*time.Millisecond)
	watchStart := time.Now()
	defer func() {
		stopWatch()
		splits := w.Splits()
		t.Logf("holder polls (each host every 25 ms): %d in %v, two holders seen: %d %v", w.Polls(), time.Since(watchStart).Round(time.Second), len(splits), splits)
		if len(splits) > 0 {
			t.Errorf("split brain: two holders at once %d times: %v", len(splits), splits)
		}
	}()
	// VRRP between the hosts, checked before any keepalived of the VIP
	// runs: every direction arrives; then host-3's firewall drops the
	// adverts host-1 sends (an nftables filter chain, as a host's own
	// rules would): refused, naming that one direction. Nothing of the
	// probe is left on any host, and no host took an address (the
	// holder watcher sees no VIP and no split).
	var vrrpPeers []vip.VRRPPeer
	for _, h := range hosts {
		vrrpPeers = append(vrrpPeers, vip.VRRPPeer{Host: h.h, Address: h.Addr.String(), Keepalived: keepalivedBin})
	}
	if err := vip.CheckVRRP(ctx, 51, vrrpPeers); err != nil {
		t.Fatalf("CheckVRRP on an open segment: %v", err)
	}
	block := "nft add table ip fw && nft add chain ip fw input '{ type filter hook input priority 0; }' && nft add rule ip fw input ip saddr " + hosts[0].Addr.String() + " ip protocol vrrp drop"
	metallabtest.Run(ctx, t, hosts[2].c, block)
	err := vip.CheckVRRP(ctx, 51, vrrpPeers)
	metallabtest.Run(ctx, t, hosts[2].c, "nft delete table ip fw")
	blocked := fmt.Sprintf("host-1 (%s) → host-3 (%s)", hosts[0].Addr, hosts[2].Addr)
	if !errors.Is(err, errkind.FailedPrecondition) || !strings.Contains(err.Error(), blocked) || strings.Count(err.Error(), "→") != 1 {
		t.Fatalf("CheckVRRP with host-3 dropping host-1's adverts: %v; want FailedPrecondition naming %q alone", err, blocked)
	}
	for _, h := range hosts {
		if out := metallabtest.Run(ctx, t, h.c, "nft list tables; ls -d /tmp/hamaster-vrrp-probe.* 2>/dev/null; true"); strings.Contains(out, vip.ProbeTable) || strings.Contains(out, "hamaster-vrrp-probe") {
			t.Errorf("%s: left after CheckVRRP: %s", h.Name, out)
		}
	}

	// Apply twice on each host, host-1 first: the interface and the
	// daemons found on the host, files written, the units started; then
	// nothing to change. host-1's keepalived is elected alone (all start
	// BACKUP, nopreempt); the others then join as backups.
	start := time.Now()
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
		if out := strings.TrimSpace(metallabtest.Run(ctx, t, h.c, "systemctl is-active "+vip.KeepalivedUnit+" "+vip.HAProxyUnit)); out != "active\nactive" {
			t.Fatalf("units on %s after Apply: %q; want both active", h.Name, out)
		}
		if i == 0 {
			w.AwaitOff(ctx, t, "first election", "", start, 15*time.Second)
		}
	}
	for _, h := range hosts {
		waitStatus(ctx, t, h.h, "every backend up", func(m map[string]string) bool {
			return m["host-1"] == "UP" && m["host-2"] == "UP" && m["host-3"] == "UP"
		})
	}
	w.Stays(ctx, t, "backups join", "host-1", 2*time.Second)

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
	w.Stays(ctx, t, "reload", "host-1", 2*time.Second)
	if _, err := vip.Apply(ctx, hosts[0].h, cfgOf(0)); err != nil {
		t.Fatal(err)
	}

	// (b) the holder's apiserver fails /readyz.
	hosts[0].api.SetReady(false)
	start = time.Now()
	holder, readyzMove := w.AwaitOff(ctx, t, "(b) host-1's /readyz 500", "host-1", start, failoverHangGuard)
	hosts[0].api.SetReady(true)
	w.Stays(ctx, t, "host-1 ready again (nopreempt)", holder, 4*time.Second)

	// (a) the holder's node dies: cut from the bridge.
	hi := slices.IndexFunc(hosts, func(h *labHost) bool { return h.Name == holder })
	metallabtest.SetLink(ctx, t, lab, hi, "down")
	w.SetCut(holder, true)
	start = time.Now()
	next, nodeMove := w.AwaitOff(ctx, t, "(a) "+holder+" cut off", holder, start, failoverHangGuard)
	// The dead node comes back as a rebooted one does: its units stopped
	// while cut off (their supervisors and daemons SIGTERMed), started
	// again once linked, as a boot starts enabled units (BACKUP, no
	// preemption). SSH cannot reach it: its processes are found by
	// namespace.
	metallabtest.StopUnits(ctx, t, hosts[hi].Host)
	metallabtest.SetLink(ctx, t, lab, hi, "up")
	w.SetCut(holder, false)
	metallabtest.Run(ctx, t, hosts[hi].c, "systemctl start "+vip.KeepalivedUnit+" "+vip.HAProxyUnit)
	w.Stays(ctx, t, holder+" back", next, 3*time.Second)

	// (c) planned: hand the VIP off from its holder, drain that master in
	// HAProxy everywhere, stop its apiserver — under load.
	old := slices.IndexFunc(hosts, func(h *labHost) bool { return h.Name == next })
	var peers []vip.Host
	for _, h := range hosts {
		if h.Name != next {
			peers = append(peers, h.h)
		}
	}
	load := probeload.StartClients(ctx, "https://"+net.JoinHostPort(lab.VIP.String(), "8443")+"/version", &tls.Config{InsecureSkipVerify: true}, 0)
	awaitLoad := func(n int) {
		t.Helper()
		if err := load.Await(ctx, n, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	awaitLoad(50)
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
	handedTo, _ := w.AwaitOff(ctx, t, "(c) the watcher sees the new holder", next, start, 5*time.Second)
	newHolder := []string{handedTo}
	awaitLoad(load.Count() + 50)
	for _, h := range hosts {
		if err := vip.Drain(ctx, h.h, next); err != nil {
			t.Fatal(err)
		}
		if err := vip.Drain(ctx, h.h, next); err != nil {
			t.Fatalf("Drain again: %v", err)
		}
		waitStatus(ctx, t, h.h, next+" draining", func(m map[string]string) bool { return m[next] == "DRAIN" })
	}
	awaitLoad(load.Count() + 50)
	hosts[old].api.Stop()
	for _, h := range hosts {
		waitStatus(ctx, t, h.h, next+" down after its apiserver stopped", func(m map[string]string) bool { return strings.HasPrefix(m[next], "DOWN") })
	}
	awaitLoad(load.Count() + 100)
	n, fails, reconnects := load.Stop()
	t.Logf("(c) handoff to %v, drain, apiserver stop: %d requests, %d failed, kept-alive client opened %d connections", newHolder, n, len(fails), reconnects)
	// A request whose connection the old holder had accepted when the VIP
	// left it is reset or times out (the connection's state stays there): only dropping
	// new SYNs on the old holder before the move would avoid it (nftables,
	// which the lab's hosts lack; docs/metal.md). Such failures are
	// counted; any other fails the test.
	var atMove, other []probeload.Failure
	for _, f := range fails {
		// The request was under way while the VIP moved.
		if !f.At.Before(handoffStart) && f.From.Before(handoffEnd.Add(500*time.Millisecond)) {
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
	w.Stays(ctx, t, "Resume", newHolder[0], 2*time.Second)

	// (d) the holder's keepalived killed hard (SIGKILL, as an OOM kill):
	// it leaves the VIP on its interface; its unit starts keepalived again
	// 200 ms later (RestartSec), whose ExecStartPre deletes the stale
	// address, and the backups elect a holder after their Master_Down
	// timer (the restarted one among them: it is a backup like the
	// others). The killed host is left out of the split count until it
	// has let go (the case being bounded), by itself: no command is run.
	killed := newHolder[0]
	ki := slices.IndexFunc(hosts, func(h *labHost) bool { return h.Name == killed })
	ps, err := metallabtest.NSProcs(ctx, hosts[ki].Host, "keepalived")
	if err != nil || len(ps) == 0 {
		t.Fatalf("keepalived on %s: %v, %v", killed, ps, err)
	}
	w.SetCut(killed, true)
	start = time.Now()
	for _, p := range ps {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	// Hang guards, far above the restart and the Master_Down timer.
	gctx, gcancel := context.WithTimeout(ctx, time.Minute)
	defer gcancel()
	if err := wait.Until(gctx, 5*time.Millisecond, killed+" to drop the VIP its killed keepalived left", func() (bool, error) {
		return !w.Holds(killed), nil // the watcher's own polls, every 25 ms
	}); err != nil {
		t.Fatal(err)
	}
	dropped := time.Since(start)
	w.SetCut(killed, false)
	var elected string
	if err := wait.Until(gctx, 5*time.Millisecond, "one holder after "+killed+"'s keepalived was killed", func() (bool, error) {
		cur := w.Current()
		if len(cur) == 1 {
			elected = cur[0]
		}
		return len(cur) == 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	heldAgain := time.Since(start)
	w.Stays(ctx, t, "(d) after "+killed+"'s keepalived was killed", elected, 2*time.Second)
	t.Logf("(d) %s's keepalived SIGKILLed: the stale address gone after %v (its unit's restart), %s holding after %v (the watcher's polls, every 25 ms)", killed, dropped.Round(time.Millisecond), elected, heldAgain.Round(time.Millisecond))

	t.Logf("figures (speed, not asserted: BenchmarkVIPFailover measures them): (b) /readyz failed → moved %v; (a) node cut off → moved %v; (c) planned handoff %v, %d requests, %d failed",
		readyzMove.Round(time.Millisecond), nodeMove.Round(time.Millisecond), handoff.Round(time.Millisecond), n, len(fails))
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

type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// The naive arm, for comparison: kubeadm's docs/ha-considerations.md as
// written (metallabtest.DocKeepalivedConf: check every 3 s, fall 10, rise
// 2, weight -2; priorities 101 and 100, MASTER and BACKUP, preemption,
// multicast, adverts every 1 s), its check (docCheck) run against /readyz
// with --fail: the doc's check_apiserver.sh asks "/" without --fail and so
// never sees a /readyz 500, only a refused connection. Scenario (b): the
// holder's /readyz fails.
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
	var apis []*metallabtest.APIServer
	for i, h := range lab.Hosts {
		apis = append(apis, metallabtest.StartAPIServer(t, h, cert))
		c, err := lab.Dial(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		state, prio := "MASTER", 101
		if i > 0 {
			state, prio = "BACKUP", 100
		}
		metallabtest.Run(ctx, t, c, "mkdir -p /etc/kubernetes/doc-arm /run/doc-arm")
		if err := c.Upload(ctx, "/etc/kubernetes/doc-arm/keepalived.conf", fmt.Appendf(nil, metallabtest.DocKeepalivedConf, state, prio, lab.VIP), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := c.Upload(ctx, "/etc/kubernetes/doc-arm/check_apiserver.sh", []byte(docCheck), 0o755); err != nil {
			t.Fatal(err)
		}
		// Stopped by the lab's teardown (every process of its hosts).
		metallabtest.StartDaemon(ctx, t, c, "/run/doc-arm/keepalived.log", []string{"keepalived", "--dont-fork", "--log-console", "--vrrp",
			"--use-file=/etc/kubernetes/doc-arm/keepalived.conf", "--pid=/run/doc-arm/keepalived.pid", "--vrrp_pid=/run/doc-arm/vrrp.pid"})
	}
	w, stopWatch := metallabtest.WatchHolders(ctx, lab, 25*time.Millisecond)
	defer func() {
		stopWatch()
		splits := w.Splits()
		t.Logf("holder polls: %d, two holders seen: %d %v", w.Polls(), len(splits), splits)
	}()
	start := time.Now()
	first, _ := w.AwaitOff(ctx, t, "the doc's election", "", start, 15*time.Second)
	if first != "host-1" {
		t.Fatalf("the doc's MASTER is not holding: %s", first)
	}
	// The doc's check needs its first rise before it counts: wait until
	// host-1's check has passed (rise 2 × 3 s) — observed as 10 s of
	// holding, bounded by the test's context.
	w.Stays(ctx, t, "the doc's checks rise", "host-1", 8*time.Second)
	apis[0].SetReady(false)
	start = time.Now()
	_, d := w.AwaitOff(ctx, t, "(b, the doc's timers) host-1's /readyz 500", "host-1", start, 60*time.Second)
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
	metallabtest.StartAPIServer(t, h0, metallabtest.SelfSigned(t))
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
	if out := metallabtest.Run(ctx, t, c, "nft list set inet "+vip.SynDropTable+" handoff"); strings.Contains(out, lab.VIP.String()) {
		t.Errorf("the VIP is still in the drop set:\n%s", out)
	}
	t.Logf("an interrupted handoff's drop healed by itself %v after it began (its lifetime %v)", healed.Round(100*time.Millisecond), vip.SynDropLifetime)
}
