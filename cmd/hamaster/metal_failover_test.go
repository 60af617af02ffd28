//go:build metallab

// Issue 24's unplanned failovers in the metal walk: the VIP holder's
// host cut off, then the holder's kube-apiserver killed.

package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/probeload"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

const (
	// failoverGoal is issue 24's goal: from the fault to the VIP held by
	// another master and answering through it. A speed figure: logged
	// and compared here, never failing the test (a busy machine misses
	// it); make bench VIP=1's BenchmarkVIPFailover measures it.
	failoverGoal = 3 * time.Second
	// failoverWait bounds the measurement itself: a hang guard, 10 x the
	// goal, so that a slow failover is measured rather than cut off.
	failoverWait = 30 * time.Second
	// quorumDropWait is a hang guard on a cut-off holder giving the VIP
	// up: seconds expected (etcd's election timeout, the apiserver's etcd
	// readiness timeout, two failed checks), the goal 10 s.
	quorumDropWait = 2 * time.Minute
	// failoverPoll is the holder watcher's period on each host and the
	// probe's request period.
	failoverPoll = 50 * time.Millisecond
	// failoverHealthy bounds the wait for three healthy masters after a
	// fault is undone (a restarted apiserver, an etcd member catching up).
	failoverHealthy = 5 * time.Minute
)

// failoverLeg is issue 24's unplanned failovers, run on a walk's three
// kubeadm masters with the VIP up: (a) the VIP holder's host cut off (its
// port on the lab's bridge down: nothing it sends arrives anymore), then
// its link back and three healthy masters awaited; (b) the holder's
// kube-apiserver SIGKILLed (the kubelet restarts it), then three healthy
// masters awaited. Each time the VIP must be held by another master and
// answer GET /readyz through it (within failoverWait, a hang guard; the
// time against failoverGoal is logged), and at
// no poll of the hosts (each every failoverPoll, the whole leg) may two
// reachable hosts hold it.
//
// vipLoad, the walk's load on the VIP, would count both outages: it is
// stopped (its requests so far, the second add's, must all have
// succeeded) and a new one on the same address is returned.
func failoverLeg(ctx context.Context, t *testing.T, lab *metallab.Lab,
	sh func(*metallab.Host, string) (string, error),
	hamaster func(extra []string, args ...string) (*exec.Cmd, *strings.Builder),
	tlsCfg *tls.Config, vipLoad *probeload.Load) *probeload.Load {
	t.Helper()
	vipAddr := fmt.Sprintf("https://%s:8443/readyz", lab.VIP)
	before := vipLoad.Stop()
	t.Logf("load on the VIP %s through the second add (paused for the failover leg): %+v", vipAddr, before)
	if probeload.Failed(before) != 0 {
		t.Errorf("requests to the VIP failed during the second add: %+v", before)
	}

	legStart := time.Now()
	w, stopWatch := metallabtest.WatchHolders(ctx, lab, failoverPoll)
	defer stopWatch()

	holderNow := func() *metallab.Host {
		t.Helper()
		var hs []string
		if err := wait.Until(ctx, failoverPoll, "one host holding the VIP", func() (bool, error) {
			hs = w.Current()
			return len(hs) == 1, w.Err()
		}); err != nil {
			t.Fatalf("%v (holders %v)", err, hs)
		}
		return lab.Host(hs[0])
	}
	dumpLogs := func() {
		for _, h := range lab.Hosts {
			out, _ := sh(h, "for c in keepalived haproxy; do f=$(ls -t /var/log/pods/kube-system_hamaster-$c*/$c/*.log 2>/dev/null | head -1); [ -n \"$f\" ] && { echo \"== $f\"; tail -n 25 \"$f\"; }; done")
			t.Logf("%s:\n%s", h.Name, out)
		}
	}

	// (a) The holder's host cut off.
	holder := holderNow()
	hi := slices.Index(lab.Hosts, holder)
	link := func(state string) {
		t.Helper()
		if out, err := exec.CommandContext(ctx, "ip", "-n", lab.Switch(), "link", "set", fmt.Sprintf("h%d", hi+1), state).CombinedOutput(); err != nil {
			t.Fatalf("link of %s %s: %v: %s", holder.Name, state, err, out)
		}
	}
	var cutAt time.Time
	r := measureFailover(ctx, t, w, vipAddr, tlsCfg, holder.Name, "host cut off", func() {
		link("down")
		cutAt = time.Now()
		w.SetCut(holder.Name, true)
	})
	// Split brain bounded by quorum: the cut-off master, a minority of
	// one, gives the VIP up too. Its etcd member loses the quorum, so its
	// apiserver's /readyz fails, so does its keepalived check, and its
	// instance goes to FAULT, releasing the VIP, although no advert
	// reaches it.
	dctx, cancelDrop := context.WithTimeout(ctx, quorumDropWait)
	if err := wait.Until(dctx, failoverPoll, "the cut-off "+holder.Name+" to give the VIP up", func() (bool, error) {
		return !w.Holds(holder.Name), w.Err()
	}); err != nil {
		t.Errorf("hang guard: split brain: %v", err)
	} else {
		t.Logf("failover, host cut off: the cut-off %s (a minority of one) gave the VIP up %.2f s after the cut (goal: 10 s)", holder.Name, time.Since(cutAt).Seconds())
	}
	cancelDrop()
	// Back: the host's link up. Its keepalived rejoins as a backup
	// (nopreempt): the VIP stays where it went.
	w.SetCut(holder.Name, false)
	link("up")
	if !r.ok() {
		dumpLogs()
	}
	awaitHealthy(ctx, t, hamaster, "after "+holder.Name+"'s link is back")

	// (b) The holder's apiserver killed: only that process, in the
	// holder's network namespace (every lab host shares this machine's
	// process table).
	holder = holderNow()
	c, err := lab.Dial(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r = measureFailover(ctx, t, w, vipAddr, tlsCfg, holder.Name, "apiserver killed", func() {
		if _, stderr, err := c.Run(ctx, "pkill -KILL --ns $$ --nslist net -x kube-apiserver"); err != nil {
			t.Fatalf("kill the kube-apiserver of %s: %v: %s", holder.Name, err, stderr)
		}
	})
	if !r.ok() {
		dumpLogs()
	}
	awaitHealthy(ctx, t, hamaster, "after "+holder.Name+"'s apiserver is killed")
	holderNow()

	stopWatch()
	if splits := w.Splits(); len(splits) > 0 {
		t.Errorf("two hosts held the VIP at once, %d polls: %v", len(splits), splits[:min(len(splits), 5)])
	} else {
		t.Logf("failover leg: no two hosts held the VIP at any poll (every %v on each host)", failoverPoll)
	}
	t.Logf("failover leg: VIP holders from its start: %s", w.Timeline(legStart))
	return probeload.Start(ctx, vipAddr, tlsCfg, 20*time.Millisecond)
}

// failover is one fault's measurement.
type failover struct {
	fault, from, to string
	// moved is from the fault to the first poll that saw another host
	// hold the VIP alone; answered, to the end of the first successful
	// request through the VIP begun after that. 0 when it did not happen
	// within failoverWait.
	moved, answered time.Duration
	failed, total   int
	errors          []string
}

// ok: the VIP moved and answered (the outcome the test asserts).
func (f failover) ok() bool { return f.to != "" && f.answered > 0 }

// inGoal: it did so within issue 24's goal (a speed figure, logged).
func (f failover) inGoal() bool {
	return f.ok() && f.moved <= failoverGoal && f.answered <= failoverGoal
}

// measureFailover injects a fault on the VIP's holder from and measures
// the failover: the VIP held by another host, then a request through the
// VIP answered, with requests on new connections every failoverPoll from
// before the fault until 20 after the answer.
func measureFailover(ctx context.Context, t *testing.T, w *metallabtest.Holders, url string, tlsCfg *tls.Config, from, fault string, inject func()) failover {
	t.Helper()
	p := startProbe(ctx, url, tlsCfg)
	defer p.stop()
	bctx, cancel := context.WithTimeout(ctx, failoverWait)
	defer cancel()
	if err := wait.Until(bctx, failoverPoll, "a request through the VIP before the fault", func() (bool, error) {
		return p.firstOK(time.Time{}) != nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	inject()
	r := failover{fault: fault, from: from}
	mctx, cancelM := context.WithDeadline(ctx, start.Add(failoverWait))
	defer cancelM()
	var movedAt time.Time
	if err := wait.Until(mctx, 10*time.Millisecond, "the VIP off "+from, func() (bool, error) {
		r.to, movedAt = w.MovedOff(from, start)
		return r.to != "", w.Err()
	}); err == nil {
		r.moved = movedAt.Sub(start)
		var ans *probeResult
		if err := wait.Until(mctx, 10*time.Millisecond, "a request through the VIP answered by "+r.to, func() (bool, error) {
			ans = p.firstOK(movedAt)
			return ans != nil, nil
		}); err == nil {
			r.answered = ans.end.Sub(start)
			n := p.count()
			_ = wait.Until(mctx, failoverPoll, "20 more requests through the VIP", func() (bool, error) { return p.count() >= n+20, nil })
		}
	}
	rs := p.stop()
	for _, x := range rs {
		if x.start.Before(start) {
			continue
		}
		r.total++
		if x.err != nil {
			r.failed++
			if len(r.errors) < 5 {
				r.errors = append(r.errors, fmt.Sprintf("%s+%.2fs: %v", x.start.Format("15:04:05.000"), x.end.Sub(start).Seconds(), x.err))
			}
		}
	}
	t.Logf("failover, %s: holder %s → %q: held by it after %.2f s, answered through the VIP after %.2f s; %d of %d requests failed %v; holders seen: %s",
		fault, from, r.to, r.moved.Seconds(), r.answered.Seconds(), r.failed, r.total, r.errors, w.Timeline(start))
	switch {
	case r.to == "":
		t.Errorf("hang guard: failover, %s: the VIP did not leave %s within %v", fault, from, failoverWait)
	case r.answered == 0:
		t.Errorf("hang guard: failover, %s: the VIP moved to %s but did not answer within %v", fault, r.to, failoverWait)
	case !r.inGoal():
		t.Logf("failover, %s: over issue 24's %v (a speed figure, not failed here: BenchmarkVIPFailover measures it)", fault, failoverGoal)
	}
	return r
}

// awaitHealthy polls hamaster's status until it sees three healthy
// masters: exit 0 (healthy), three replicas, three healthy etcd voters and
// HAProxy's three backends up.
func awaitHealthy(ctx context.Context, t *testing.T, hamaster func([]string, ...string) (*exec.Cmd, *strings.Builder), what string) {
	t.Helper()
	type status struct {
		Healthy  bool `json:"healthy"`
		Replicas []struct {
			Name string `json:"name"`
		} `json:"replicas"`
		Members []struct {
			Name    string `json:"name"`
			Learner bool   `json:"learner"`
			Healthy bool   `json:"healthy"`
		} `json:"members"`
		LB struct {
			Holder  string `json:"holder"`
			Targets []struct {
				Name    string `json:"name"`
				Healthy bool   `json:"healthy"`
			} `json:"targets"`
		} `json:"lb"`
	}
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, failoverHealthy)
	defer cancel()
	var last string
	err := wait.Until(hctx, 2*time.Second, "three healthy masters "+what, func() (bool, error) {
		cmd, out := hamaster(nil, "--output", "json", "status", "--timeout", "60s")
		var stderr strings.Builder
		cmd.Stderr = &stderr // stdout is the JSON alone
		err := cmd.Run()
		last = fmt.Sprintf("%v: %s %s", err, out, stderr.String())
		var st status
		if err != nil || json.Unmarshal([]byte(out.String()), &st) != nil {
			return false, nil
		}
		members, targets := 0, 0
		for _, m := range st.Members {
			if !m.Learner && m.Healthy {
				members++
			}
		}
		for _, x := range st.LB.Targets {
			if x.Healthy {
				targets++
			}
		}
		return st.Healthy && len(st.Replicas) == 3 && members == 3 && targets == 3, nil
	})
	if err != nil {
		t.Fatalf("%v; last status: %s", err, last)
	}
	t.Logf("three healthy masters %s: %s later", what, time.Since(start).Round(100*time.Millisecond))
}

// probe sends GET url on a new connection every failoverPoll, each in a
// goroutine of its own with a 1 s timeout, so that a request stuck on an
// unreachable holder does not delay the next.
type probe struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	results []probeResult
}

type probeResult struct {
	start, end time.Time
	err        error
}

func startProbe(ctx context.Context, url string, tlsCfg *tls.Config) *probe {
	ctx, cancel := context.WithCancel(ctx)
	p := &probe{cancel: cancel}
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(failoverPoll)
		defer tick.Stop()
		for {
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				start := time.Now()
				err := probeload.Get(ctx, c, url)
				if ctx.Err() != nil {
					return // cut by stop
				}
				p.mu.Lock()
				p.results = append(p.results, probeResult{start, time.Now(), err})
				p.mu.Unlock()
			}()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

// firstOK is the first successful request begun at or after since.
func (p *probe) firstOK(since time.Time) *probeResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first *probeResult
	for i, r := range p.results {
		if r.err == nil && !r.start.Before(since) && (first == nil || r.end.Before(first.end)) {
			first = &p.results[i]
		}
	}
	if first == nil {
		return nil
	}
	f := *first
	return &f
}

func (p *probe) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.results)
}

// stop ends the probe and returns its results.
func (p *probe) stop() []probeResult {
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.results)
}
