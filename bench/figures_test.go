package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/workflows"
)

// leaderRemoval is one run of removing the etcd leader's replica.
type leaderRemoval struct {
	MoveLeader   bool
	WriteStallMS float64
	WriterFails  int
	WallMS       float64
}

// BenchmarkLeaderRemoval removes the replica whose etcd member leads, on
// two identical fresh 3-replica clusters with the timing profile, while a
// client writes to etcd: once with hamaster's remove-replica as it is
// (leadership moved away first), once with the move-etcd-leader step left
// out. It prints the longest write stall of each.
func BenchmarkLeaderRemoval(b *testing.B) {
	prof, scale, err := profileFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		with := removeLeader(b, prof, true)
		without := removeLeader(b, prof, false)
		var sb strings.Builder
		tw := tabwriter.NewWriter(&sb, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "metric\twith MoveLeader\twithout\twith/without\t")
		fmt.Fprintf(tw, "longest etcd write stall ms\t%.0f\t%.0f\t%s\t\n", with.WriteStallMS, without.WriteStallMS, ratio(with.WriteStallMS, without.WriteStallMS))
		fmt.Fprintf(tw, "etcd writer failed writes\t%d\t%d\t%s\t\n", with.WriterFails, without.WriterFails, ratio(float64(with.WriterFails), float64(without.WriterFails)))
		fmt.Fprintf(tw, "remove-replica wall time s\t%.1f\t%.1f\t%s\t\n", with.WallMS/1000, without.WallMS/1000, ratio(with.WallMS, without.WallMS))
		tw.Flush()
		fmt.Fprintf(os.Stdout, "\nremoving the etcd leader's replica under etcd writes, profile %s at scale %g:\n%s", prof.Name, scale, sb.String())
		b.ReportMetric(with.WriteStallMS, "move-leader-stall-ms")
		b.ReportMetric(without.WriteStallMS, "no-move-stall-ms")
	}
}

func removeLeader(b *testing.B, prof Profile, move bool) leaderRemoval {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+10*prof.StepTimeout())
	defer cancel()
	name := "bench-lead-nomove"
	if move {
		name = "bench-lead-move"
	}
	_, d, _, ecli := threeReplicas(ctx, b, prof, name)
	defer ecli.Close()
	members, err := ecli.Members(ctx)
	if err != nil {
		b.Fatal(err)
	}
	i := slices.IndexFunc(members, func(m etcdmember.Member) bool { return m.Leader })
	if i < 0 {
		b.Fatalf("%s: no etcd leader among %+v", name, members)
	}
	leader := members[i].Name

	start := time.Now()
	writer := &etcdWriter{cli: ecli.Raw(), start: start}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { writer.run(wctx, 1<<30); close(done) }()
	time.Sleep(warmup) // steady writes before the removal: part of what is measured

	wf := workflows.RemoveReplica(d, workflows.RemoveParams{Name: leader, DrainGrace: time.Second, Timeout: prof.StepTimeout()})
	if !move {
		wf.Steps = slices.DeleteFunc(wf.Steps, func(s workflows.Step) bool { return s.Name == workflows.StepMoveLeader })
	}
	t0 := time.Now()
	rerr := workflows.Execute(ctx, d, wf, workflows.Options{})
	wall := time.Since(t0)
	time.Sleep(cooldown)
	end := time.Now()
	stop()
	<-done
	if rerr != nil {
		b.Fatalf("%s: remove leader %s: %v", name, leader, rerr)
	}
	return leaderRemoval{MoveLeader: move, WriteStallMS: ms(writer.longestStall(start, end)), WriterFails: writer.fails, WallMS: ms(wall)}
}

// BenchmarkBadFlagRollback upgrades a fresh 3-replica cluster with the
// timing profile to a control-plane flag the apiserver refuses: the first
// replica fails to start, the fail-fast gate sees it, and the replica is
// restored from its last known good template. It prints the time from the
// upgrade's start, and from the failing replica's recreate, to the
// rollback complete, against the health timeout a gate without fail-fast
// would have waited out.
func BenchmarkBadFlagRollback(b *testing.B) {
	prof, scale, err := profileFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+10*prof.StepTimeout())
		_, d, _, ecli := threeReplicas(ctx, b, prof, "bench-badflag")
		ecli.Close()
		var markers []Marker
		start := time.Now()
		d.Sink = markerSink{start: start, markers: &markers}
		timeout := prof.StepTimeout()
		wf := workflows.RollingUpgrade(d, workflows.UpgradeParams{Version: version, ExtraArgs: []string{"--no-such-flag"}, ExtraArgsSet: true, Strategy: workflows.StrategyRecreate, DrainGrace: time.Second, HealthTimeout: timeout}, 3)
		err := workflows.Execute(ctx, d, wf, workflows.Options{})
		total := time.Since(start)
		cancel()
		if !errors.Is(err, workflows.ErrConcluded) {
			b.Fatalf("bad flag upgrade: %v; want a concluded rollback", err)
		}
		fromRecreate := total
		if len(markers) > 0 {
			fromRecreate = total - time.Duration(markers[0].AtMS*float64(time.Millisecond))
		}
		fmt.Fprintf(os.Stdout, "\nbad flag (--no-such-flag) to rollback complete, profile %s at scale %g:\n", prof.Name, scale)
		for _, l := range []struct {
			what string
			d    time.Duration
		}{{"from the upgrade's start", total}, {"from the failing replica's recreate", fromRecreate}, {"health timeout a gate without fail-fast waits", timeout}} {
			fmt.Fprintf(os.Stdout, "  %-46s %7.1f s\n", l.what, l.d.Seconds())
		}
		fmt.Fprintf(os.Stdout, "  (%v)\n", err)
		b.ReportMetric(total.Seconds(), "rollback-s")
	}
}
