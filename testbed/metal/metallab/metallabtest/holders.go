package metallabtest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
)

// Holders watches which of a lab's hosts hold its VIP: each host's eth0
// polled in a goroutine of its own (ip -n from this machine: no SSH, which
// a cut-off host would not answer). It keeps the reachable holders'
// changes and every moment two held the VIP (split brain).
type Holders struct {
	lab     *metallab.Lab
	mu      sync.Mutex
	cut     map[string]bool
	held    map[string]bool
	polled  map[string]bool
	holders []string
	changes []holderChange
	splits  []string
	polls   int
	err     error
}

type holderChange struct {
	at      time.Time
	holders []string
}

// WatchHolders polls every host every interval until stop is called (stop
// waits for the pollers to end).
func WatchHolders(ctx context.Context, lab *metallab.Lab, every time.Duration) (w *Holders, stop func()) {
	w = &Holders{lab: lab, cut: map[string]bool{}, held: map[string]bool{}, polled: map[string]bool{}}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, h := range lab.Hosts {
		wg.Go(func() { w.poll(ctx, h, every) })
	}
	return w, func() { cancel(); wg.Wait() }
}

func (w *Holders) poll(ctx context.Context, h *metallab.Host, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		out, err := exec.CommandContext(ctx, "ip", "-n", h.NS, "-4", "-o", "addr", "show", "dev", "eth0").Output()
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		if err != nil {
			w.err = fmt.Errorf("ip addr in %s: %w", h.NS, err)
			w.mu.Unlock()
			return
		}
		w.held[h.Name] = strings.Contains(string(out), " "+w.lab.VIP.String()+"/")
		w.polled[h.Name] = true
		w.polls++
		w.update()
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// update recomputes the holders once every host has been polled; w.mu
// held.
func (w *Holders) update() {
	if len(w.polled) < len(w.lab.Hosts) {
		return
	}
	var hs []string
	for _, h := range w.lab.Hosts {
		if w.held[h.Name] && !w.cut[h.Name] {
			hs = append(hs, h.Name)
		}
	}
	now := time.Now()
	if len(hs) > 1 {
		w.splits = append(w.splits, fmt.Sprintf("%s: %v", now.Format("15:04:05.000"), hs))
	}
	if len(w.changes) == 0 || !slices.Equal(hs, w.holders) {
		w.changes = append(w.changes, holderChange{now, hs})
	}
	w.holders = hs
}

// Current is the reachable hosts holding the VIP now.
func (w *Holders) Current() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.holders)
}

// Holds reports whether the host called name held the VIP at its last
// poll, cut off or not: a cut host is still polled, from this machine,
// through its namespace.
func (w *Holders) Holds(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.held[name]
}

// Err is the poll that failed, if one did (its host is no longer watched).
func (w *Holders) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// SetCut marks a host cut off, or back: what a cut-off host holds is not
// counted (nobody can reach it there).
func (w *Holders) SetCut(name string, cut bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cut[name] = cut
	w.update()
}

// MovedOff is the first host other than old seen holding the VIP alone
// since start, and when; "" when none has yet.
func (w *Holders) MovedOff(old string, start time.Time) (string, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.changes {
		if !c.at.Before(start) && len(c.holders) == 1 && c.holders[0] != old {
			return c.holders[0], c.at
		}
	}
	return "", time.Time{}
}

// Await waits until bound after start for one host other than old to
// hold the VIP alone (already, or from some moment on); ok is false when
// none did, or a poll failed.
func (w *Holders) Await(ctx context.Context, old string, start time.Time, bound time.Duration) (to string, after time.Duration, ok bool) {
	wctx, cancel := context.WithDeadline(ctx, start.Add(bound))
	defer cancel()
	err := wait.Until(wctx, 5*time.Millisecond, "the VIP off "+old, func() (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.err != nil {
			return false, w.err
		}
		if len(w.holders) == 1 && w.holders[0] != old {
			to = w.holders[0]
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return "", 0, false
	}
	return to, time.Since(start), true
}

// AwaitOff is Await for a test, the bound from now: it fails t when no
// host other than old holds the VIP alone within bound, and logs which
// did and how long after start.
func (w *Holders) AwaitOff(ctx context.Context, t testing.TB, what, old string, start time.Time, bound time.Duration) (string, time.Duration) {
	t.Helper()
	to, _, ok := w.Await(ctx, old, time.Now(), bound)
	if !ok {
		t.Fatalf("hang guard: %s: not one holder within %v (holders %v, poll error %v)", what, bound, w.Current(), w.Err())
	}
	d := time.Since(start)
	t.Logf("%s: %s after %v", what, to, d.Round(time.Millisecond))
	return to, d
}

// Stays fails t when holder does not keep the VIP alone for d (as with
// nopreempt: a master that recovers does not take the VIP back).
func (w *Holders) Stays(ctx context.Context, t testing.TB, what, holder string, d time.Duration) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := wait.Until(wctx, 10*time.Millisecond, what, func() (bool, error) {
		if hs := w.Current(); len(hs) != 1 || hs[0] != holder {
			return false, fmt.Errorf("%s: the VIP left %s: holders %v", what, holder, hs)
		}
		return false, nil
	})
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	t.Logf("%s: %s kept the VIP for %v", what, holder, d)
}

// Polls is the number of polls made so far (of all hosts).
func (w *Holders) Polls() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.polls
}

// Timeline is the holders' changes since start, times from start.
func (w *Holders) Timeline(start time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var parts []string
	for _, c := range w.changes {
		if c.at.Before(start) {
			continue
		}
		parts = append(parts, fmt.Sprintf("+%.2fs %v", c.at.Sub(start).Seconds(), c.holders))
	}
	return strings.Join(parts, ", ")
}

// Splits is every moment two reachable hosts held the VIP at once.
func (w *Holders) Splits() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.splits)
}
