package workflows_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamaster/hamaster/providers/local"
	"github.com/hamaster/hamaster/workflows"
	"github.com/hamaster/hamaster/workflows/workflowstest"
)

// TestRemoveReplicaOverlapsTheDrainGrace removes replicas of a 3-replica
// cluster (the etcd leader's, a follower's; uninterrupted, and crashed
// right after the drain starts) and checks, after each step and in the
// journal, the order the overlap with the drain grace must keep: the
// snapshot is saved and leadership moved while the victim is still a
// running member, both before anything destructive (its LB target's
// removal, its stop, its member's removal); the grace is waited in full
// from the drain, with the snapshot and the leader move inside it: the
// drain step does not wait it, and remove-from-lb waits only what is left
// of it (never a grace counted from the leader move). How long the
// snapshot and the move take is a speed figure, not asserted here: it is
// logged, and make bench's BenchmarkLeaderRemoval reports it
// (drain-to-moved-ms).
func TestRemoveReplicaOverlapsTheDrainGrace(t *testing.T) {
	t.Parallel()
	e, ctx := startEnv(t, "order", 5*time.Minute)
	master := local.MasterName("order")
	const grace = 3 * time.Second
	replicas := []string{master}
	for _, n := range []string{"order-master-a01", "order-master-a02"} {
		if err := e.add(ctx, n, nil); err != nil {
			t.Fatalf("add %s: %v", n, err)
		}
		replicas = append(replicas, n)
	}
	store := workflows.NewJournalStore(e.c.Settings.StateDir, e.name)
	for i, tc := range []struct {
		name       string
		leader     bool   // remove the etcd leader's replica, else a follower's
		crashAfter string // crash once right after this step, then resume
	}{
		{name: "leader", leader: true},
		{name: "follower", leader: false},
		{name: "leader crashed after the drain", leader: true, crashAfter: workflows.StepDrainTarget},
		{name: "follower crashed after the snapshot", leader: false, crashAfter: workflows.StepSnapshot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			victim := pickByLeadership(ctx, t, e, replicas, tc.leader)
			d := e.deps(nil)
			events := &eventLog{}
			d.Sink = events
			var problems []string
			check := func(step string) {
				j, err := store.Load()
				if err != nil || j == nil {
					t.Fatalf("journal after %s: %v", step, err)
				}
				rep, err := workflows.Status(ctx, d)
				if err != nil {
					t.Fatalf("status after %s: %v", step, err)
				}
				var member, leads bool
				for _, m := range rep.Members {
					if m.Name == victim {
						member, leads = true, m.Leader
					}
				}
				_, vmErr := e.c.Provider.Instances().Get(ctx, victim)
				switch step {
				case workflows.StepSnapshot, workflows.StepMoveLeader:
					if _, err := os.Stat(j.Data["snapshot"]); err != nil {
						problems = append(problems, step+": no snapshot: "+err.Error())
					}
					if !member || vmErr != nil {
						problems = append(problems, step+": the victim is no longer a running member")
					}
					if step == workflows.StepMoveLeader && leads {
						problems = append(problems, step+": the victim still leads etcd")
					}
				}
			}
			after := func(step string) error {
				check(step)
				if step == tc.crashAfter {
					return workflowstest.ErrCrash
				}
				return nil
			}
			d.AfterStep = after
			wf := workflows.RemoveReplica(d, workflows.RemoveParams{Name: victim, DrainGrace: grace, Timeout: time.Minute})
			opts := workflows.Options{Supersede: workflows.SupersedeAdd(victim), LockExclude: []string{victim}}
			err := workflows.Execute(ctx, d, wf, opts)
			if tc.crashAfter != "" {
				if !errors.Is(err, workflowstest.ErrCrash) {
					t.Fatalf("remove %s crashing after %s: %v", victim, tc.crashAfter, err)
				}
				d = e.deps(nil)
				d.Sink = events
				d.AfterStep = func(step string) error { check(step); return nil }
				err = workflows.Execute(ctx, d, workflows.RemoveReplica(d, workflows.RemoveParams{Name: victim, DrainGrace: grace, Timeout: time.Minute}), opts)
			}
			if err != nil {
				t.Fatalf("remove %s: %v", victim, err)
			}
			for _, p := range problems {
				t.Error(p)
			}
			j, err := store.Load()
			if err != nil || j == nil || !j.Finished {
				t.Fatalf("journal %+v: %v", j, err)
			}
			rec := map[string]workflows.StepRecord{}
			for _, s := range j.Steps {
				rec[s.Name] = s
			}
			before := func(a, b string) {
				t.Helper()
				if ea, sb := rec[a].Ended, rec[b].Started; ea.IsZero() || sb.IsZero() || ea.After(sb) {
					t.Errorf("%s ended %s, after %s started %s", a, ea.Format(time.StampMicro), b, sb.Format(time.StampMicro))
				}
			}
			for _, destructive := range []string{workflows.StepRemoveFromLB, workflows.StepStopReplica, workflows.StepRemoveMember, workflows.StepDeleteVM} {
				before(workflows.StepSnapshot, destructive)
				before(workflows.StepMoveLeader, destructive)
			}
			before(workflows.StepDrainTarget, workflows.StepSnapshot)
			// The grace runs from the drain call's return (inside its
			// step), to the end it recorded.
			drainStart, drained := rec[workflows.StepDrainTarget].Started, rec[workflows.StepDrainTarget].Ended
			until, err := time.Parse(time.RFC3339Nano, j.Data["drain-until"])
			if err != nil || until.Sub(drainStart) < grace || until.After(drained.Add(grace)) {
				t.Errorf("recorded end of the grace %q (%v), want %s after the drain started %s", j.Data["drain-until"], err, grace, drainStart.Format(time.StampMicro))
			}
			if out := rec[workflows.StepRemoveFromLB].Ended; out.Before(until) {
				t.Errorf("out of the LB at %s, before the grace ended at %s", out.Format(time.StampMicro), until.Format(time.StampMicro))
			}
			// The snapshot and the leader move run inside the grace, not
			// after it: only remove-from-lb waits for it, and only for
			// what is left of it at its start (none when the move outlasted
			// it), whatever the machine's speed.
			waits := events.graceWaits()
			for _, w := range waits {
				if w.step != workflows.StepRemoveFromLB || !w.rest {
					t.Errorf("%s waited for the drain grace (%q): only remove-from-lb waits, for the rest of it", w.step, w.message)
				}
			}
			if left := until.Sub(rec[workflows.StepRemoveFromLB].Started); left <= 0 && len(waits) > 0 {
				t.Errorf("remove-from-lb started %s after the grace ended, yet waited: %+v", -left, waits)
			} else if len(waits) > 1 || len(waits) == 1 && waits[0].left > left+time.Millisecond {
				t.Errorf("remove-from-lb waited %+v; want at most what was left of the grace at its start, %s", waits, left)
			}
			t.Logf("snapshot and leader move ended %s after the drain (grace %s; a speed figure: make bench's BenchmarkLeaderRemoval reports it); grace waits %+v",
				rec[workflows.StepMoveLeader].Ended.Sub(drained).Round(time.Millisecond), grace, waits)
			replicas = slices.DeleteFunc(replicas, func(r string) bool { return r == victim })
			e.assertConverged(ctx, replicas...)
			next := "order-master-b0" + string(rune('1'+i))
			if err := e.add(ctx, next, nil); err != nil {
				t.Fatalf("add %s: %v", next, err)
			}
			replicas = append(replicas, next)
		})
	}
}

// pickByLeadership returns the replica whose etcd member leads (leader)
// or one whose member does not.
func pickByLeadership(ctx context.Context, t *testing.T, e *env, replicas []string, leader bool) string {
	t.Helper()
	rep, err := workflows.Status(ctx, e.deps(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range replicas {
		for _, m := range rep.Members {
			if m.Name == r && m.Leader == leader {
				return r
			}
		}
	}
	t.Fatalf("no replica of %v with leader=%v among members %+v", replicas, leader, rep.Members)
	return ""
}

// eventLog keeps a run's progress events (heartbeats come from another
// goroutine).
type eventLog struct {
	mu     sync.Mutex
	events []workflows.Event
}

func (l *eventLog) Event(e workflows.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

// graceWait is a step's report that it waits for a drain grace.
type graceWait struct {
	step, message string
	// rest: for what is left of a grace begun earlier; left is how much.
	rest bool
	left time.Duration
}

// graceWaits returns the waits for a drain grace the run reported
// (heartbeats left out).
func (l *eventLog) graceWaits() []graceWait {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []graceWait
	for _, e := range l.events {
		if e.State != workflows.StateWaiting || e.Heartbeat || !strings.Contains(e.Message, "drain grace") {
			continue
		}
		w := graceWait{step: e.Step, message: e.Message}
		// "rest of the drain grace period for <name>: <left> of <grace>"
		if rest, ok := strings.CutPrefix(e.Message, "rest of the drain grace period for "); ok {
			if _, after, ok := strings.Cut(rest, ": "); ok {
				if left, _, ok := strings.Cut(after, " of "); ok {
					if d, err := time.ParseDuration(left); err == nil {
						w.rest, w.left = true, d
					}
				}
			}
		}
		out = append(out, w)
	}
	return out
}
