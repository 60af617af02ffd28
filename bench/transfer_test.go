package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hamaster/hamaster/etcdmember"
)

// handoverRoles are the three members of one etcd leadership hand-over,
// in the order the table prints them.
var handoverRoles = []string{"old leader", "new leader", "other follower"}

// handover is one leadership hand-over: who gave it, who took it, the
// other follower, and when etcdmember's MoveLeader started and returned.
type handover struct {
	from, to, other string
	start, end      time.Time
}

// roleView sums what the writers in one role saw over the hand-overs.
type roleView struct {
	Hit     int     // hand-overs in which the writer had a failed write or a stall over stallGoal
	Failed  int     // failed writes
	StallMS float64 // longest stall
}

// stallGoal is issue 25's bound on a write stall.
const stallGoal = 100 * time.Millisecond

// BenchmarkLeaderTransfer hands etcd leadership over HAMASTER_BENCH_TRANSFERS
// times (default 20) in one fresh 3-replica cluster, with
// etcdmember.Client.MoveLeader as every workflow moves it, while a writer
// goes through each replica's own member as its apiserver does. It prints
// what the writers saw, by the role of their member in each hand-over.
//
// What it shows is etcd's, not a workflow's: while a leader hands over,
// raft drops the proposals it is given (go.etcd.io/raft stepLeader:
// "transfer leadership ... is in progress; dropping proposal"; a
// follower that has just lost its leader drops them too), so a write
// through the old leader fails at once, and a write either follower
// forwards to it then (the new leader's own, until it is told to
// campaign) is lost without a word, its client waiting until its own
// timeout (etcd-io/etcd#8975; etcd's server gives up after 5 s + 2
// election timeouts). etcd's own graceful stop of a leader hands over
// the same way, so an upgrade that restarts the leader's etcd has this
// window whoever drives it; the workflows make one hand-over per leader
// they replace, while its replica is drained.
func BenchmarkLeaderTransfer(b *testing.B) {
	prof, scale := benchProfile(b)
	n := 20
	if v := os.Getenv("HAMASTER_BENCH_TRANSFERS"); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil || n < 1 || n > 1000 {
			b.Fatalf("HAMASTER_BENCH_TRANSFERS=%q: want a count from 1 to 1000", v)
		}
	}
	for i := 0; i < b.N; i++ {
		views, moveMS := transferLeader(b, prof, n)
		tbl := table(func(tw io.Writer) {
			fmt.Fprintf(tw, "writer through the\thand-overs with a failed write or a stall > %s\tfailed writes\tlongest stall ms\t\n", stallGoal)
			for _, role := range handoverRoles {
				v := views[role]
				fmt.Fprintf(tw, "%s\t%d of %d\t%d\t%.0f\t\n", role, v.Hit, n, v.Failed, v.StallMS)
			}
		})
		slices.Sort(moveMS)
		fmt.Fprintf(os.Stdout, "\netcd leadership handed over %d times under a writer through each member (100 writes/s each, %s timeout), profile %s at scale %g; MoveLeader took %.0f ms (median), %.0f ms (longest):\n%s",
			n, writeTimeout, prof.Name, scale, moveMS[len(moveMS)/2], moveMS[len(moveMS)-1], tbl)
		b.ReportMetric(float64(views["other follower"].Hit)/float64(n), "follower-hit/transfer")
		b.ReportMetric(views["other follower"].StallMS, "other-follower-stall-ms")
	}
}

// transferLeader runs n hand-overs and returns the writers' views by
// role and each MoveLeader's duration.
func transferLeader(b *testing.B, prof Profile, n int) (map[string]roleView, []float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(n)*3*writeTimeout)
	defer cancel()
	_, d, _, ecli := threeReplicas(ctx, b, prof, "bench-transfer")
	defer ecli.Close()
	rs, err := d.Provider.Instances().List(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if len(rs) != 3 {
		b.Fatalf("want 3 replicas, have %d", len(rs))
	}
	start := time.Now()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ws := newWriters(wctx, d.StateDir, d.Cluster)
	for _, r := range rs {
		ws.start(r)
	}
	time.Sleep(warmup) // steady writes first: part of what is measured

	var hs []handover
	var moveMS []float64
	for range n {
		mems, err := ecli.Members(ctx)
		if err != nil {
			b.Fatal(err)
		}
		i := slices.IndexFunc(mems, func(m etcdmember.Member) bool { return m.Leader })
		if i < 0 {
			b.Fatalf("no etcd leader among %+v", mems)
		}
		h := handover{from: mems[i].Name, start: time.Now()}
		to, err := ecli.MoveLeader(ctx, mems[i].ID)
		h.end = time.Now()
		if err != nil {
			b.Fatalf("hand-over %d: %v", len(hs)+1, err)
		}
		for _, m := range mems {
			switch {
			case m.ID == to:
				h.to = m.Name
			case m.Name != h.from:
				h.other = m.Name
			}
		}
		hs = append(hs, h)
		moveMS = append(moveMS, ms(h.end.Sub(h.start)))
		// A forwarded write that is lost shows only at its timeout: the
		// next hand-over waits until this one's windows are closed.
		time.Sleep(writeTimeout + 500*time.Millisecond)
	}
	stop()
	ws.wg.Wait()
	if len(ws.errs) > 0 {
		b.Fatal(ws.errs)
	}
	views := map[string]roleView{}
	for _, h := range hs {
		for role, name := range map[string]string{"old leader": h.from, "new leader": h.to, "other follower": h.other} {
			w := ws.get(name)
			if w == nil {
				b.Fatalf("no writer through %q (hand-over %s → %s)", name, h.from, h.to)
			}
			v := w.view(start, h.start.Add(-200*time.Millisecond), h.end.Add(writeTimeout+300*time.Millisecond))
			rv := views[role]
			rv.Failed += v.Failed
			rv.StallMS = max(rv.StallMS, v.StallMS)
			if v.Failed > 0 || v.StallMS > ms(stallGoal) {
				rv.Hit++
			}
			views[role] = rv
		}
	}
	return views, moveMS
}
