package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/testbed/local/localtest"
	"github.com/hamaster/hamaster/workflows"
)

// leaderRemoval is one run of removing the etcd leader's replica.
type leaderRemoval struct {
	MoveLeader   bool
	WriteStallMS float64
	WriterFails  int
	WallMS       float64
	// DrainToMovedMS is from the end of drain-lb-target to the end of
	// move-etcd-leader (the snapshot and the leader move, which run
	// inside the drain grace); 0 without the move.
	DrainToMovedMS float64
}

// BenchmarkLeaderRemoval removes the replica whose etcd member leads, on
// two identical fresh 3-replica clusters with the timing profile, while a
// client writes to etcd: once with hamaster's remove-replica as it is
// (leadership moved away first), once with the move-etcd-leader step left
// out. It prints the longest write stall of each.
func BenchmarkLeaderRemoval(b *testing.B) {
	prof, scale := benchProfile(b)
	for i := 0; i < b.N; i++ {
		with := removeLeader(b, prof, true)
		without := removeLeader(b, prof, false)
		tbl := table(func(tw io.Writer) {
			fmt.Fprintln(tw, "metric\twith MoveLeader\twithout\twith/without\t")
			fmt.Fprintf(tw, "longest etcd write stall ms\t%.0f\t%.0f\t%s\t\n", with.WriteStallMS, without.WriteStallMS, ratio(with.WriteStallMS, without.WriteStallMS))
			fmt.Fprintf(tw, "etcd writer failed writes\t%d\t%d\t%s\t\n", with.WriterFails, without.WriterFails, ratio(float64(with.WriterFails), float64(without.WriterFails)))
			fmt.Fprintf(tw, "remove-replica wall time s\t%.1f\t%.1f\t%s\t\n", with.WallMS/1000, without.WallMS/1000, ratio(with.WallMS, without.WallMS))
			fmt.Fprintf(tw, "drain to snapshot and leader move done ms\t%.0f\t-\t\t\n", with.DrainToMovedMS)
		})
		fmt.Fprintf(os.Stdout, "\nremoving the etcd leader's replica under etcd writes, profile %s at scale %g:\n%s", prof.Name, scale, tbl)
		b.ReportMetric(with.WriteStallMS, "move-leader-stall-ms")
		b.ReportMetric(without.WriteStallMS, "no-move-stall-ms")
		// Inside the 1 s drain grace or not: workflows'
		// TestRemoveReplicaOverlapsTheDrainGrace asserts the order, this
		// measures the time.
		b.ReportMetric(with.DrainToMovedMS, "drain-to-moved-ms")
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
	// The writer goes through one surviving member only, as an apiserver
	// on a surviving replica does (--etcd-servers is its own member): what
	// it sees is the election, not its own member going away.
	rs, err := d.Provider.Instances().List(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var survivor []providers.Replica
	for _, r := range rs {
		if r.Name != leader && len(survivor) == 0 {
			survivor = append(survivor, r)
		}
	}
	wcli, err := providers.OperatorEtcd(ctx, d.StateDir, d.Cluster, survivor, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer wcli.Close()

	start := time.Now()
	writer := &etcdWriter{cli: wcli.Raw(), start: start}
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
	r := leaderRemoval{MoveLeader: move, WriteStallMS: ms(writer.longestStall(start, end)), WriterFails: writer.fails, WallMS: ms(wall)}
	if move {
		j, err := workflows.NewJournalStore(d.StateDir, d.Cluster).Load()
		if err != nil || j == nil {
			b.Fatalf("%s: journal: %v", name, err)
		}
		var drained, moved time.Time
		for _, s := range j.Steps {
			switch s.Name {
			case workflows.StepDrainTarget:
				drained = s.Ended
			case workflows.StepMoveLeader:
				moved = s.Ended
			}
		}
		r.DrainToMovedMS = ms(moved.Sub(drained))
	}
	return r
}

// BenchmarkBadFlagRollback upgrades a fresh 3-replica cluster with the
// timing profile to a control-plane flag the apiserver refuses: the first
// replica fails to start, the fail-fast gate sees it, and the replica is
// restored from its last known good template. It prints the time from the
// upgrade's start, and from the failing replica's recreate, to the
// rollback complete, against the health timeout a gate without fail-fast
// would have waited out.
func BenchmarkBadFlagRollback(b *testing.B) {
	prof, scale := benchProfile(b)
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+10*prof.StepTimeout())
		_, d, _, ecli := threeReplicas(ctx, b, prof, "bench-badflag")
		ecli.Close()
		start := time.Now()
		sink := &armSink{ctx: ctx, start: start, inst: d.Provider.Instances()}
		d.Sink = sink
		timeout := prof.StepTimeout()
		wf := workflows.RollingUpgrade(d, workflows.UpgradeParams{Version: "v1.31.0", ExtraArgs: []string{"--no-such-flag"}, ExtraArgsSet: true, Strategy: workflows.StrategyRecreate, DrainGrace: time.Second, HealthTimeout: timeout}, 3)
		err := workflows.Execute(ctx, d, wf, workflows.Options{})
		total := time.Since(start)
		cancel()
		_, markers := sink.snapshot()
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

// BenchmarkFirstAdd grows a fresh single-replica cluster with the timing
// profile to two while clients call /readyz on the static IP, each on a
// new connection, and prints the endpoint's outage: the first add promotes
// the static IP from master 0 to a new load balancer (kube-up's
// detach-external-ip + create-loadbalancer on GCE; an Elastic IP handed
// from the master to an NLB on AWS), and from the detach until the LB has
// provisioned and seen master 0 pass its healthy threshold, the address
// answers nowhere.
func BenchmarkFirstAdd(b *testing.B) {
	prof, scale := benchProfile(b)
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+10*prof.StepTimeout())
		var opts map[string]string
		if prof.Name != "instant" {
			opts = prof.ProviderOptions()
		}
		name := "bench-first-add"
		c := localtest.Up(b, name, localtest.Options{ProviderOptions: opts})
		f, err := registry.Open("", c.Provider, nil)
		if err != nil {
			b.Fatal(err)
		}
		d := &workflows.Deps{Provider: c.Provider, Master: f, Cluster: name, StateDir: c.Settings.StateDir, Sink: workflows.Discard{}, Out: os.Stderr, Holder: "bench"}
		ca, err := d.CA()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		gen := newLoadGen(fmt.Sprintf("https://%s:%d", c.Provider.Info().StaticIP, providers.APIServerPort), &tls.Config{RootCAs: ca.Pool()}, start)
		lctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { gen.probe(lctx, 20*time.Millisecond); close(done) }()
		time.Sleep(warmup) // steady load before the add: part of what is measured
		t0 := time.Now()
		err = workflows.Execute(ctx, d, workflows.AddReplica(d, workflows.AddParams{Name: name + "-master-001", Timeout: prof.StepTimeout()}), workflows.Options{})
		wall := time.Since(t0)
		time.Sleep(cooldown)
		stop()
		<-done
		cancel()
		if err != nil {
			b.Fatalf("first add: %v", err)
		}
		failed := 0
		for _, s := range gen.samples {
			if !s.OK {
				failed++
			}
		}
		outage := longestFailRun(gen.samples) / 1000
		fmt.Fprintf(os.Stdout, "\nfirst add (static IP → load balancer), profile %s at scale %g:\n", prof.Name, scale)
		fmt.Fprintf(os.Stdout, "  %-40s %7.1f s (unscaled: %.0f s)\n", "endpoint outage (longest failure run)", outage, outage/scale)
		fmt.Fprintf(os.Stdout, "  %-40s %7d of %d\n", "failed /readyz requests", failed, len(gen.samples))
		fmt.Fprintf(os.Stdout, "  %-40s %7.1f s\n", "add-replica wall time", wall.Seconds())
		fmt.Fprintf(os.Stdout, "  %-40s %7.1f s + %d × %.1f s\n", "expected: LB provisioning + healthy streak", prof.LBProvisioning.Seconds(), prof.HealthyThreshold, prof.HealthInterval.Seconds())
		b.ReportMetric(outage, "outage-s")
	}
}
