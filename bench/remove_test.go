package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/workflows"
)

// removal is what the clients saw while one follower replica was removed.
type removal struct {
	Order                     string
	Total, Failed, FailedKept int
	LongestFailRunMS, WallMS  float64
	StopMS, RemoveMemberMS    float64
	WatchBreaks, WatchMissed  int
	WriteStallMS              float64
	WriterFails               int
	failures                  []Sample
	stallWriter               string
	watchErrs                 []string
	samplesFrom, samplesTo    time.Time
}

// BenchmarkRemoveUnderClients removes a follower replica of a 4-replica
// cluster with the timing profile and control plane while clients work
// through the endpoint (new connections, kept-alive ones, watches) and a
// writer writes through each replica's own member: first with the order
// remove-replica had before issue 25 (etcd member removed while the
// drained apiserver still serves its kept-alive clients, then the VM
// deleted: the stop-replica step left out), then as it is now (the VM
// stopped first, then the member removed). One cluster, the two removals
// one after the other, the same clients throughout.
func BenchmarkRemoveUnderClients(b *testing.B) {
	prof, scale, cp := benchEnv(b)
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+10*prof.StepTimeout())
		name := "bench-remove"
		c, d, ca, ecli := threeReplicasOn(ctx, b, prof, cp, name, workflows.Discard{})
		ecli.Close()
		wf := workflows.AddReplica(d, workflows.AddParams{Name: name + "-master-003", Timeout: prof.StepTimeout()})
		if err := workflows.Execute(ctx, d, wf, workflows.Options{}); err != nil {
			b.Fatalf("grow to 4: %v", err)
		}
		l := startLoad(ctx, b, c, d, ca, cp, 4)
		start, ws := l.start, l.ws
		time.Sleep(warmup) // steady load before the first removal: part of what is measured
		var results []*removal
		for _, order := range []string{"member first (before)", "VM first (now)"} {
			victim, err := follower(ctx, d)
			if err != nil {
				b.Fatal(err)
			}
			sink := &armSink{ctx: ctx, start: start, inst: d.Provider.Instances(), ws: ws}
			d.Sink = sink
			wf := workflows.RemoveReplica(d, workflows.RemoveParams{Name: victim, DrainGrace: drainGrace, Timeout: prof.StepTimeout()})
			if strings.HasPrefix(order, "member first") {
				wf.Steps = slices.DeleteFunc(wf.Steps, func(s workflows.Step) bool { return s.Name == workflows.StepStopReplica })
			}
			from := time.Now()
			ws.down(victim)
			sink.mu.Lock()
			sink.marker("remove " + shortName(victim) + ", " + order)
			sink.mu.Unlock()
			rerr := workflows.Execute(ctx, d, wf, workflows.Options{})
			wall := time.Since(from)
			time.Sleep(cooldown) // clients after the removal: part of what is measured
			if rerr != nil {
				b.Fatalf("remove %s, %s: %v", victim, order, rerr)
			}
			events, _ := sink.snapshot()
			res := &removal{Order: order, WallMS: ms(wall), samplesFrom: from, samplesTo: time.Now()}
			for _, r := range opRuns(events) {
				res.StopMS += r.StepMS[workflows.StepStopReplica] + r.StepMS[workflows.StepDeleteVM]
				res.RemoveMemberMS += r.StepMS[workflows.StepRemoveMember]
			}
			results = append(results, res)
		}
		end := time.Now()
		samples, watches := l.results(end)
		if _, werrs := ws.wait(start, start, end); len(werrs) > 0 {
			b.Fatal(werrs)
		}
		for _, res := range results {
			lo, hi := ms(res.samplesFrom.Sub(start)), ms(res.samplesTo.Sub(start))
			var in []Sample
			for _, s := range samples {
				if s.AtMS >= lo && s.AtMS < hi {
					in = append(in, s)
				}
			}
			res.Total = len(in)
			for _, s := range in {
				if !s.OK {
					res.Failed++
					res.failures = append(res.failures, s)
					if strings.HasSuffix(s.Kind, "-keepalive") {
						res.FailedKept++
					}
				}
			}
			res.LongestFailRunMS = longestFailRun(in)
			for _, w := range watches {
				for _, e := range w.Errors {
					var at float64
					if _, err := fmt.Sscanf(e, "%fs:", &at); err == nil && at*1000 >= lo && at*1000 < hi {
						res.WatchBreaks++
						res.watchErrs = append(res.watchErrs, w.Kind+" "+e)
					}
				}
			}
			// Each writer's view of this removal's window only (the
			// victim's writer is off duty from the removal's start).
			for _, v := range ws.views(start, res.samplesFrom, res.samplesTo) {
				if v.StallMS > res.WriteStallMS {
					res.WriteStallMS, res.stallWriter = v.StallMS, v.Replica
				}
			}
		}
		cancel()
		tbl := table(func(tw io.Writer) {
			fmt.Fprintf(tw, "metric\t%s\t%s\tnow/before\t\n", results[0].Order, results[1].Order)
			row := func(name, f string, get func(*removal) float64) {
				fmt.Fprintf(tw, "%s\t"+f+"\t"+f+"\t%s\t\n", name, get(results[0]), get(results[1]), ratio(get(results[1]), get(results[0])))
			}
			row("requests", "%.0f", func(r *removal) float64 { return float64(r.Total) })
			row("failed requests", "%.0f", func(r *removal) float64 { return float64(r.Failed) })
			row("failed on kept-alive connections", "%.0f", func(r *removal) float64 { return float64(r.FailedKept) })
			row("longest failure run s", "%.2f", func(r *removal) float64 { return r.LongestFailRunMS / 1000 })
			if cp.real() {
				row("watch stream ends + refused re-watches (4 watches)", "%.0f", func(r *removal) float64 { return float64(r.WatchBreaks) })
			}
			row("longest write stall ms (surviving writers)", "%.0f", func(r *removal) float64 { return r.WriteStallMS })
			row("VM stop + delete s", "%.2f", func(r *removal) float64 { return r.StopMS / 1000 })
			row("remove-etcd-member s", "%.2f", func(r *removal) float64 { return r.RemoveMemberMS / 1000 })
			row("remove-replica wall time s", "%.2f", func(r *removal) float64 { return r.WallMS / 1000 })
		})
		fmt.Fprintf(os.Stdout, "\nremoving a follower replica (4 → 3, then 3 → 2) under clients, %s control plane, profile %s at scale %g:\n%s", cp.Name, prof.Name, scale, tbl)
		for _, r := range results {
			fmt.Fprintf(os.Stdout, "  %s: stall by %s; watch breaks %v\n", r.Order, r.stallWriter, r.watchErrs)
			printFailures(os.Stdout, r.failures)
		}
		b.ReportMetric(float64(results[0].Failed), "before-failed")
		b.ReportMetric(float64(results[1].Failed), "now-failed")
	}
}

// follower is a replica whose etcd member does not lead.
func follower(ctx context.Context, d *workflows.Deps) (string, error) {
	rs, err := d.Provider.Instances().List(ctx)
	if err != nil {
		return "", fmt.Errorf("list replicas: %w", err)
	}
	cli, err := d.Etcd(ctx)
	if err != nil {
		return "", fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	members, err := cli.Members(ctx)
	if err != nil {
		return "", fmt.Errorf("etcd members: %w", err)
	}
	leader := ""
	if i := slices.IndexFunc(members, func(m etcdmember.Member) bool { return m.Leader }); i >= 0 {
		leader = members[i].Name
	}
	for _, r := range slices.Backward(rs) {
		if r.Name != leader && !strings.HasSuffix(r.Name, "-master") {
			return r.Name, nil
		}
	}
	return "", fmt.Errorf("no follower replica other than master 0 among %d", len(rs))
}
