//go:build metallab

package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/probeload"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

// TestMetalKubeadmUpgrade is the walk's upgrades, on a lab of its own
// (.ci/run runs it beside TestMetalKubeadmEndToEnd and
// TestMetalKubeadmRecover, each on its lab): a single kubeadm master made
// HA by the real CLI (add-replica --host: the VIP, the conversion; then
// add-replica of the last free host) → upgradeLeg: rolling-upgrade with a
// refused flag, then to an unstartable release (each rolled back), then to
// metalUpgradeTo (killed after a shard of its steps and resumed each time)
// → history records each run; under load on the VIP throughout: at most 2
// failed, as in the walk.
func TestMetalKubeadmUpgrade(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute) // a hang guard
	defer cancel()
	// Two versions: a copy of links, so that one release can be made
	// unstartable (in o.BinDir).
	o := metallabtest.KubeadmOptions(t, 3, metalVersion, metalUpgradeTo)
	lab := metallabtest.StartKubeadm(ctx, t, o, metalVersion)
	h1, h2, h3 := lab.Hosts[0], lab.Hosts[1], lab.Hosts[2]
	if _, err := lab.KubeadmInit(ctx, h1, metallab.KubeadmInit{Version: metalVersion}); err != nil {
		t.Fatal(err)
	}
	cli := newLabCLI(ctx, t, lab)
	cli.hm("add-replica", "--host", h2.Name, "--yes")
	cli.hm("add-replica", "--yes")
	tlsFor := cli.tlsFor(h1)
	vipAddr := fmt.Sprintf("https://%s:8443/readyz", lab.VIP)
	vipLoad := probeload.Start(ctx, vipAddr, tlsFor(), 20*time.Millisecond)
	upgradeLeg(ctx, t, cli, o.BinDir, func(cmd string) string { return cli.must(h1, cmd) },
		[]string{h1.Addr.String(), h2.Addr.String(), h3.Addr.String()}, tlsFor())
	vip := vipLoad.Stop()
	t.Logf("load on the VIP %s through the upgrades: %+v", vipAddr, vip)
	if n := probeload.Failed(vip); n > 2 {
		t.Errorf("%d requests to the VIP failed: %+v", n, vip)
	}
	cli.historyAtLeast(map[string]int{"add-replica ok": 2, "rolling-upgrade rolled-back": 2, "rolling-upgrade ok": 1})
}

// upgradeLeg is the walk's rolling-upgrade part, on 3 masters at
// metalVersion: an upgrade whose apiserver refuses a flag, and one to a
// release whose apiserver cannot start, are each stopped and rolled back
// (3 masters healthy at metalVersion again after the failure the CLI
// reports, as each master's own /readyz and /version show; the time from
// the failure is a speed figure, logged: make bench's
// BenchmarkBadFlagRollback measures a rollback's time); then the upgrade
// to metalUpgradeTo, one master at a time.
// run runs a shell command on the first master; masters are the three
// masters' addresses.
func upgradeLeg(ctx context.Context, t *testing.T, cli *labCLI, binDir string, run func(string) string, masters []string, tlsCfg *tls.Config) {
	t.Helper()
	command := cli.command
	// healthy waits until status sees 3 masters healthy at want and
	// returns when that was first seen.
	healthy := func(want string) time.Time {
		t.Helper()
		var last string
		err := wait.Until(ctx, 500*time.Millisecond, "3 masters healthy at "+want, func() (bool, error) {
			cmd, out := command(nil, "--output", "json", "status", "--timeout", "90s")
			cmd.Stderr = io.Discard // "not healthy" while a master is not
			_ = cmd.Run()           // exit 3 meanwhile
			var st struct {
				Replicas []struct {
					Name    string `json:"name"`
					Healthy bool   `json:"healthy"`
					Version string `json:"version"`
				} `json:"replicas"`
			}
			if err := json.Unmarshal([]byte(out.String()), &st); err != nil {
				return false, fmt.Errorf("status: %w\n%s", err, out)
			}
			last = fmt.Sprintf("%+v", st.Replicas)
			n := 0
			for _, r := range st.Replicas {
				if r.Healthy && r.Version == want {
					n++
				}
			}
			return n == 3, nil
		})
		if err != nil {
			t.Fatalf("%v (last: %s)", err, last)
		}
		return time.Now()
	}
	// allHealthy reports whether every master's own apiserver answers
	// /readyz 200 and /version at want.
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}}
	allHealthy := func(want string) bool {
		for _, a := range masters {
			if probeload.Get(ctx, hc, "https://"+net.JoinHostPort(a, "6443")+"/readyz") != nil {
				return false
			}
			var v struct {
				GitVersion string `json:"gitVersion"`
			}
			if err := probeload.GetJSON(ctx, hc, "https://"+net.JoinHostPort(a, "6443")+"/version", &v); err != nil || v.GitVersion != want {
				return false
			}
		}
		return true
	}
	// failed runs an upgrade that must fail on the new apiserver and be
	// rolled back: from the moment its output says the apiserver cannot
	// start to 3/3 healthy at metalVersion (the masters' own /readyz and
	// /version, polled while the CLI still runs: it waits for the LB too
	// before it exits), at most 30 s; then status agrees.
	failed := func(what string, args ...string) {
		t.Helper()
		cmd, out := command(nil, append([]string{"rolling-upgrade", "--version", metalUpgradeTo, "--drain-grace", "2s"}, append(args, "--log-level", "info", "--yes")...)...)
		defer func() {
			if t.Failed() {
				t.Logf("rolling-upgrade with %s, its output:\n%s", what, out)
			}
		}()
		noticed := &firstLine{match: "the new kube-apiserver cannot start", w: out, seen: make(chan struct{})}
		cmd.Stdout, cmd.Stderr = noticed, noticed
		// From the failure on: the first poll at which all three are
		// healthy again, after one at which they were not.
		back := make(chan time.Time, 1)
		pctx, stopPoll := context.WithCancel(ctx)
		defer stopPoll()
		go func() {
			select {
			case <-noticed.seen:
			case <-pctx.Done():
				return
			}
			sawDown := false
			for pctx.Err() == nil {
				if !allHealthy(metalVersion) {
					sawDown = true
				} else if sawDown {
					back <- time.Now()
					return
				}
				select {
				case <-pctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
		start := time.Now()
		if err := cmd.Run(); err == nil {
			t.Fatalf("rolling-upgrade with %s succeeded:\n%s", what, out)
		}
		ended := time.Now()
		if noticed.at.IsZero() {
			t.Fatalf("rolling-upgrade with %s: its output never says the new apiserver cannot start:\n%s", what, out)
		}
		if !strings.Contains(out.String(), "rolled back") && !strings.Contains(out.String(), "rollback") {
			t.Errorf("rolling-upgrade with %s: its output says nothing of a rollback:\n%s", what, out)
		}
		var ok time.Time
		select {
		case ok = <-back:
		case <-time.After(time.Minute):
			// The CLI exits once its rollback passed its health gate:
			// healthy at once is expected.
			t.Fatalf("hang guard: rolling-upgrade with %s: the three masters not healthy at %s a minute after the CLI exited", what, metalVersion)
		}
		statusOK := healthy(metalVersion)
		took := ok.Sub(noticed.at)
		t.Logf("rolling-upgrade with %s: failed after %s; 3/3 healthy at %s %s after the failure was reported (the CLI exited %s after it; status saw 3/3 %s after it)", what, noticed.at.Sub(start).Round(100*time.Millisecond), metalVersion, took.Round(100*time.Millisecond), ended.Sub(noticed.at).Round(100*time.Millisecond), statusOK.Sub(noticed.at).Round(100*time.Millisecond))
		// The kubeadm that was stopped is gone: left running, its own
		// 5-minute wait would end by moving its backup manifest over
		// the next upgrade's (Debian's sh once read the stop's kill as
		// a bad number and signalled nothing). The lab's hosts share
		// this machine's pids, not its mounts: a kubeadm of another
		// host or lab (.ci/run runs labs side by side) is not counted.
		if ps := run(`me=$(readlink /proc/self/ns/mnt); for d in /proc/[0-9]*; do [ "$(cat $d/comm 2>/dev/null)" = kubeadm ] && [ "$(readlink $d/ns/mnt 2>/dev/null)" = "$me" ] && echo "pid ${d#/proc/}: $(tr '\0' ' ' < $d/cmdline)"; done; true`); ps != "" {
			t.Errorf("rolling-upgrade with %s: kubeadm still runs after the rollback: %s", what, ps)
		}
		if cfg := run("kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system get cm kubeadm-config -o jsonpath='{.data.ClusterConfiguration}'"); !strings.Contains(cfg, "kubernetesVersion: "+metalVersion) || strings.Contains(cfg, "hamaster-refused-flag") {
			t.Errorf("kubeadm-config after the rollback of %s:\n%s", what, cfg)
		}
	}
	failed("a refused flag", "--extra-args", "--hamaster-refused-flag=1")
	restore := metallabtest.Unstartable(t, binDir, metalUpgradeTo)
	failed("an unstartable release")
	restore()

	// The crash-resume matrix over the upgrade's steps: killed after a
	// shard of the first master's (kubeadm upgrade apply) and the
	// second's (kubeadm upgrade node), chosen from the commit so that
	// successive commits take the shards in turn (the converting add and
	// the holder's removal, above and below, are crashed after every
	// step every run), resumed by the same command each time.
	start := time.Now()
	// --drain-grace 2s, as the failed upgrades and rotate-certs: a scale
	// knob (the load's requests are short; the default 10 s is for
	// watches), every step still taken.
	upgrade := []string{"rolling-upgrade", "--version", metalUpgradeTo, "--drain-grace", "2s", "--yes"}
	// The third master's steps are the second's (kubeadm upgrade node):
	// run through.
	cli.crashChain(upgrade, upgrade, chainOpts{skip: []string{"replica-3/"}, rotate: []string{"replica-1/", "replica-2/"}})
	t.Logf("rolling-upgrade to %s: 3/3 healthy %s after its start", metalUpgradeTo, healthy(metalUpgradeTo).Sub(start).Round(100*time.Millisecond))
	if v := run("kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -l node-role.kubernetes.io/control-plane -o jsonpath='{.items[*].status.nodeInfo.kubeletVersion}'"); v != strings.TrimSpace(strings.Repeat(metalUpgradeTo+" ", 3)) {
		t.Errorf("kubelet versions after the upgrade: %s", v)
	}
	if plan := run("kubeadm upgrade plan " + metalUpgradeTo + " --ignore-preflight-errors=" + metallab.IgnorePreflightErrors + " 2>&1 || true"); !strings.Contains(plan, "Cluster version: "+strings.TrimPrefix(metalUpgradeTo, "v")) && !strings.Contains(plan, "Cluster version: "+metalUpgradeTo) {
		t.Errorf("kubeadm upgrade plan does not read the cluster at %s:\n%s", metalUpgradeTo, plan)
	}
}

// firstLine passes writes to w and records when a write first carries
// match.
type firstLine struct {
	match string
	w     io.Writer
	seen  chan struct{} // closed at the match, when not nil
	mu    sync.Mutex
	at    time.Time
}

func (f *firstLine) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at.IsZero() && strings.Contains(string(p), f.match) {
		f.at = time.Now()
		if f.seen != nil {
			close(f.seen)
		}
	}
	return f.w.Write(p)
}
