package bench

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/testbed/local/localtest"
	"github.com/hamaster/hamaster/workflows"
)

// armSink records a workflow's progress events with their time, turns
// step starts into timeline markers, and tells the member writers when a
// replica goes away and comes back, or a new one joins.
type armSink struct {
	ctx   context.Context
	start time.Time
	inst  providers.Instances
	ws    *writers
	mu    sync.Mutex
	// events are every progress event, in order.
	events  []workflows.Event
	markers []Marker
	// current is the replica a recreate slot works on; surgeNew and
	// surgeOld the replicas of the current surge slot.
	current, surgeNew, surgeOld string
}

func (m *armSink) marker(label string) {
	m.markers = append(m.markers, Marker{AtMS: ms(time.Since(m.start)), Label: label})
}

func (m *armSink) Event(e workflows.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	m.events = append(m.events, e)
	switch {
	case e.State == "info" && strings.HasPrefix(e.Message, "upgrading "):
		m.current = strings.TrimPrefix(e.Message, "upgrading ")
		m.marker("drain+recreate " + shortName(m.current))
	case e.State == workflows.StateStart && strings.HasSuffix(e.Step, "/recreate") && m.current != "":
		// Counted through its drain (leadership moves off its member
		// then, and its apiserver still serves the sessions the drain
		// grace lets finish) until its VM is stopped.
		m.ws.down(m.current)
	case e.State == "info" && strings.HasPrefix(e.Message, "surge: adding "):
		// "surge: adding <new> at <version> before removing <old>"
		f := strings.Fields(e.Message)
		m.surgeNew, m.surgeOld = f[2], f[len(f)-1]
		m.marker("surge for " + shortName(m.surgeOld))
	case e.State == workflows.StateDone && strings.HasSuffix(e.Step, "/recreate") && m.current != "":
		m.ws.up(m.current)
	case e.State == workflows.StateDone && e.Step == "" && e.Workflow == "add-replica" && m.surgeNew != "":
		if r, err := m.inst.Get(m.ctx, m.surgeNew); err == nil {
			m.ws.start(r)
		}
	case e.State == workflows.StateStart && e.Workflow == "remove-replica" && e.Step == workflows.StepRemoveFromLB && m.surgeOld != "":
		m.ws.down(m.surgeOld)
	}
}

func (m *armSink) snapshot() ([]workflows.Event, []Marker) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.events), slices.Clone(m.markers)
}

func shortName(n string) string {
	if i := strings.LastIndex(n, "-"); i > 0 {
		return n[i+1:]
	}
	return n
}

const (
	warmup   = 1500 * time.Millisecond
	cooldown = 1500 * time.Millisecond
	// drainGrace is the drain grace period the hamaster arms use.
	drainGrace = time.Second
)

// threeReplicas builds a fresh 3-replica local cluster of the stand-in
// with the profile's timing; see threeReplicasOn.
func threeReplicas(ctx context.Context, b *testing.B, prof Profile, name string) (*localtest.Cluster, *workflows.Deps, *certs.CA, *etcdmember.Client) {
	b.Helper()
	cp, _ := controlPlaneFromEnv()
	if cp.real() {
		cp = controlPlane{Name: nodeapi.ControlPlaneStandin, To: "v1.31.0"}
	}
	return threeReplicasOn(ctx, b, prof, cp, name, workflows.Discard{})
}

// threeReplicasOn builds a fresh 3-replica local cluster with the profile's
// timing (none for instant: the provider's defaults) and control plane cp,
// growing it with sink watching, and returns it with its workflow deps,
// its CA and an etcd client the caller closes.
func threeReplicasOn(ctx context.Context, b *testing.B, prof Profile, cp controlPlane, name string, sink workflows.Sink) (*localtest.Cluster, *workflows.Deps, *certs.CA, *etcdmember.Client) {
	b.Helper()
	var opts map[string]string
	if prof.Name != "instant" {
		opts = prof.ProviderOptions()
	}
	o := localtest.Options{ProviderOptions: opts}
	if cp.real() {
		o.Version, o.ControlPlane, o.KubeAPIServerDir = cp.From, cp.Name, cp.Dir
	}
	c := localtest.Up(b, name, o)
	f, err := registry.Open("", c.Provider, nil)
	if err != nil {
		b.Fatal(err)
	}
	d := &workflows.Deps{Provider: c.Provider, Master: f, Cluster: name, StateDir: c.Settings.StateDir, Sink: sink, Out: os.Stderr, Holder: "bench"}
	for i := 1; i <= 2; i++ {
		wf := workflows.AddReplica(d, workflows.AddParams{Name: fmt.Sprintf("%s-master-%03d", name, i), Timeout: prof.StepTimeout()})
		if err := workflows.Execute(ctx, d, wf, workflows.Options{}); err != nil {
			b.Fatalf("%s: grow to 3: %v", name, err)
		}
	}
	pki := workflows.PKIDir(c.Settings.StateDir, name)
	ca, err := certs.LoadCA(filepath.Join(pki, "ca.crt"), filepath.Join(pki, "ca.key"))
	if err != nil {
		b.Fatal(err)
	}
	ecli, err := c.Provider.Etcd(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return c, d, ca, ecli
}

// upgradeFunc runs one arm's upgrade; sink records its events and marks
// its replicas going away and coming back for the writers.
type upgradeFunc func(ctx context.Context, d *workflows.Deps, sink *armSink) error

// runArm builds a fresh 3-replica cluster with the profile's timing and
// control plane and measures one arm: the clients' requests through the
// endpoint, and an etcd writer through each replica's own member.
func runArm(b *testing.B, prof Profile, cp controlPlane, arm string, upgrade upgradeFunc) *ArmResult {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+10*prof.StepTimeout())
	defer cancel()
	name := "bench-" + arm
	c, d, ca, ecli := threeReplicasOn(ctx, b, prof, cp, name, workflows.Discard{})
	ecli.Close()

	l := startLoad(ctx, b, c, d, ca, cp, 3)
	defer l.stop()
	start, ws := l.start, l.ws

	time.Sleep(warmup) // steady load before the upgrade: part of what is measured, not synchronisation
	sink := &armSink{ctx: ctx, start: start, inst: d.Provider.Instances(), ws: ws}
	d.Sink = sink
	t0 := time.Now()
	sink.mu.Lock()
	sink.marker(arm + " starts")
	sink.mu.Unlock()
	uerr := upgrade(ctx, d, sink)
	wall := time.Since(t0)
	sink.mu.Lock()
	sink.marker(arm + " done")
	sink.mu.Unlock()
	time.Sleep(cooldown)
	end := time.Now()
	samples, watches := l.results(end)
	views, werrs := ws.wait(start, t0.Add(-warmup/2), end)
	if uerr != nil {
		b.Fatalf("%s arm: %v", arm, uerr)
	}
	if len(werrs) > 0 {
		b.Fatalf("%s arm: %v", arm, werrs)
	}
	events, markers := sink.snapshot()
	r := &ArmResult{Arm: arm, ControlPlane: cp.Name, Markers: markers, WallMS: ms(wall), Writers: views, Events: events, start: start}
	r.Samples, r.Watches = samples, watches
	for _, w := range r.Watches {
		r.WatchBreaks += w.Breaks
		r.WatchMissed += w.Missed
	}
	sort.Slice(r.Writers, func(i, j int) bool { return r.Writers[i].Replica < r.Writers[j].Replica })
	for _, v := range r.Writers {
		r.WriterFails += v.Failed
		if v.StallMS > r.WriteStallMS {
			r.WriteStallMS, r.StallWriter, r.StallAtMS = v.StallMS, v.Replica, v.StallAtMS
		}
	}
	r.Total = len(r.Samples)
	for _, s := range r.Samples {
		if !s.OK {
			r.Failed++
			if strings.HasSuffix(s.Kind, "-keepalive") {
				r.FailedKeepAlive++
			}
		}
	}
	r.P50MS, r.P99MS = percentile(r.Samples, 50), percentile(r.Samples, 99)
	r.LongestFailRunMS = longestFailRun(r.Samples)
	return r
}

// benchEnv is the timing profile, its scale and the control plane the
// environment asks for (HAMASTER_BENCH_PROFILE, HAMASTER_BENCH_SCALE,
// HAMASTER_BENCH_CONTROL_PLANE).
func benchEnv(b *testing.B) (Profile, float64, controlPlane) {
	b.Helper()
	prof, scale := benchProfile(b)
	cp, err := controlPlaneFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	return prof, scale, cp
}

// clusterLoad is the load a benchmark runs its control plane under, from
// start: a writer on each replica (etcd writes) and clients of the
// apiservers as cluster admin (/kv of the stand-in needs a client
// certificate signed by the cluster CA, the real apiserver a
// system:masters one): on a real apiserver GETs and the number of
// watches asked, on the stand-in /kv writes and reads.
type clusterLoad struct {
	start time.Time
	ws    *writers
	api   *apiLoad
	gen   *loadGen
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

func startLoad(ctx context.Context, b *testing.B, c *localtest.Cluster, d *workflows.Deps, ca *certs.CA, cp controlPlane, watches int) *clusterLoad {
	b.Helper()
	client, err := ca.IssueClient("bench-load", []string{"system:masters"}, certs.ECDSA)
	if err != nil {
		b.Fatal(err)
	}
	clientCert, err := client.TLSCertificate()
	if err != nil {
		b.Fatal(err)
	}
	base := fmt.Sprintf("https://%s:%d", c.Provider.Info().StaticIP, providers.APIServerPort)
	tlsCfg := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{clientCert}}
	l := &clusterLoad{start: time.Now()}
	loadCtx, stop := context.WithCancel(ctx)
	l.stop = stop
	l.ws = newWriters(loadCtx, d.StateDir, d.Cluster)
	rs, err := d.Provider.Instances().List(ctx)
	if err != nil {
		stop()
		b.Fatal(err)
	}
	for _, r := range rs {
		l.ws.start(r)
	}
	if cp.real() {
		l.api = newAPILoad(base, tlsCfg, l.start)
		rv, err := l.api.resourceVersion(ctx)
		if err != nil {
			stop()
			b.Fatal(err)
		}
		for i := range watches {
			k := fmt.Sprintf("watch-%c", 'a'+i)
			l.wg.Go(func() { l.api.watch(loadCtx, k, rv) })
		}
		l.wg.Go(func() { l.api.run(loadCtx, 50*time.Millisecond) })
	} else {
		l.gen = newLoadGen(base, tlsCfg, l.start)
		l.wg.Go(func() { l.gen.run(loadCtx, 20*time.Millisecond, 1<<30) })
	}
	return l
}

// results stops the load and returns the apiserver clients' samples
// and, on a real apiserver, the watches' (end is the load's end).
func (l *clusterLoad) results(end time.Time) ([]Sample, []watchStats) {
	l.stop()
	l.wg.Wait()
	if l.api != nil {
		return l.api.samples, l.api.watchResults(end.Add(-cooldown / 2))
	}
	return l.gen.samples, nil
}

// arm runs one arm as a sub-benchmark, so that its cluster is torn down
// (every process stopped) before the next arm starts: the arms share the
// machine's cores, never with each other's replicas.
func arm(b *testing.B, prof Profile, cp controlPlane, name string, upgrade upgradeFunc) *ArmResult {
	var r *ArmResult
	if !b.Run(name, func(b *testing.B) { r = runArm(b, prof, cp, name, upgrade) }) || r == nil {
		b.FailNow()
	}
	return r
}

// BenchmarkRollingUpgradeAvailability runs the three arms once per
// iteration (run it with -benchtime 1x) on identical fresh clusters with
// the timing profile HAMASTER_BENCH_PROFILE (instant, gce, aws) scaled by
// HAMASTER_BENCH_SCALE and the control plane HAMASTER_BENCH_CONTROL_PLANE
// (standin, real), prints the clients' table and the overhead table, and
// writes bench-results/availability.{json,png}.
func BenchmarkRollingUpgradeAvailability(b *testing.B) {
	prof, scale, cp := benchEnv(b)
	hamaster := func(strategy string) upgradeFunc {
		return func(ctx context.Context, d *workflows.Deps, sink *armSink) error {
			wf := workflows.RollingUpgrade(d, workflows.UpgradeParams{Version: cp.To, Strategy: strategy, DrainGrace: drainGrace, HealthTimeout: prof.StepTimeout()}, 3)
			return workflows.Execute(ctx, d, wf, workflows.Options{})
		}
	}
	for i := 0; i < b.N; i++ {
		recreate := arm(b, prof, cp, "hamaster-recreate", hamaster(workflows.StrategyRecreate))
		surge := arm(b, prof, cp, "hamaster-surge", hamaster(workflows.StrategySurge))
		naive := arm(b, prof, cp, "naive", func(ctx context.Context, d *workflows.Deps, sink *armSink) error {
			// kube-up style: restart each replica in place, in name order:
			// no drain, no leader move, no health gate.
			rs, err := d.Provider.Instances().List(ctx)
			if err != nil {
				return err
			}
			for _, r := range rs {
				sink.mu.Lock()
				sink.marker("restart " + shortName(r.Name))
				sink.mu.Unlock()
				sink.ws.down(r.Name)
				t := r.Template.Clone()
				t.Version = cp.To
				if _, err := d.Provider.Instances().Recreate(ctx, r.Name, t); err != nil {
					return fmt.Errorf("restart %s: %w", r.Name, err)
				}
				sink.ws.up(r.Name)
			}
			return nil
		})
		report(b, prof, scale, cp, []*ArmResult{recreate, surge, naive})
		runs := map[string][]opRun{}
		for _, r := range opRuns(recreate.Events) {
			if r.Workflow == "rolling-upgrade" {
				runs[r.Workflow] = append(runs[r.Workflow], r)
			}
		}
		for _, r := range opRuns(surge.Events) {
			if r.Workflow != "rolling-upgrade" {
				runs[r.Workflow] = append(runs[r.Workflow], r)
			}
		}
		fmt.Fprintf(os.Stdout, "\nwhere the time goes (mean per run, from the workflows' step durations), profile %s at scale %g, %s control plane, drain grace %s:\n", prof.Name, scale, cp.Name, drainGrace)
		printOverhead(os.Stdout, overhead(prof, drainGrace, runs))
	}
}

// duringStep names the workflow step that had started last at t.
func duringStep(events []workflows.Event, t time.Time) string {
	step := "before any step"
	for _, e := range events {
		if e.Time.After(t) {
			break
		}
		if e.State == workflows.StateStart && e.Step != "" {
			step = "during " + e.Workflow + " " + e.Step
		}
	}
	return step
}

func ratio(a, b float64) string {
	if b == 0 {
		if a == 0 {
			return "1 (both 0)"
		}
		return "∞ (naive 0)"
	}
	return fmt.Sprintf("%.3f", a/b)
}

// report prints one table (every arm, then each hamaster arm's ratio to
// naive, the last arm) and writes the JSON and the PNG.
func report(b *testing.B, prof Profile, scale float64, cp controlPlane, arms []*ArmResult) {
	dir := os.Getenv("HAMASTER_BENCH_DIR")
	if dir == "" {
		dir = filepath.Join("..", "bench-results")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	naive := arms[len(arms)-1]
	tbl := table(func(tw io.Writer) {
		fmt.Fprint(tw, "metric\t")
		for _, a := range arms {
			fmt.Fprintf(tw, "%s\t", a.Arm)
		}
		for _, a := range arms[:len(arms)-1] {
			fmt.Fprintf(tw, "%s/naive\t", strings.TrimPrefix(a.Arm, "hamaster-"))
		}
		fmt.Fprintln(tw)
		row := func(name, f string, get func(*ArmResult) float64) {
			fmt.Fprintf(tw, "%s\t", name)
			for _, a := range arms {
				fmt.Fprintf(tw, f+"\t", get(a))
			}
			for _, a := range arms[:len(arms)-1] {
				fmt.Fprintf(tw, "%s\t", ratio(get(a), get(naive)))
			}
			fmt.Fprintln(tw)
		}
		row("requests", "%.0f", func(a *ArmResult) float64 { return float64(a.Total) })
		row("failed requests", "%.0f", func(a *ArmResult) float64 { return float64(a.Failed) })
		row("failed requests %", "%.2f", func(a *ArmResult) float64 { return 100 * float64(a.Failed) / float64(max(a.Total, 1)) })
		if cp.real() {
			row("failed on kept-alive connections", "%.0f", func(a *ArmResult) float64 { return float64(a.FailedKeepAlive) })
		}
		row("longest failure run s", "%.2f", func(a *ArmResult) float64 { return a.LongestFailRunMS / 1000 })
		row("p50 latency ms", "%.1f", func(a *ArmResult) float64 { return a.P50MS })
		row("p99 latency ms", "%.1f", func(a *ArmResult) float64 { return a.P99MS })
		if cp.real() {
			row("watch breaks (3 watches)", "%.0f", func(a *ArmResult) float64 { return float64(a.WatchBreaks) })
			row("creates a watch never saw", "%.0f", func(a *ArmResult) float64 { return float64(a.WatchMissed) })
		}
		row("longest etcd write stall ms", "%.0f", func(a *ArmResult) float64 { return a.WriteStallMS })
		row("failed etcd writes", "%.0f", func(a *ArmResult) float64 { return float64(a.WriterFails) })
		row("upgrade wall time s", "%.1f", func(a *ArmResult) float64 { return a.WallMS / 1000 })
	})
	fmt.Fprintf(os.Stdout, "\nrolling upgrade of 3 replicas under load (one run), %s control plane %s → %s, profile %s at scale %g (%+v):\n%s", cp.Name, cmp.Or(cp.From, "default"), cp.To, prof.Name, scale, prof, tbl)
	fmt.Fprintln(os.Stdout, "etcd writes: one writer through each replica's own member (as its apiserver's --etcd-servers), counted while its replica is up: from its first write after the replica is back until its VM is stopped or it leaves the LB for good (a drain grace, when leadership moves off its member, is counted)")
	for _, a := range arms {
		fmt.Fprintf(os.Stdout, "  %s: longest stall %.0f ms by the writer on %s at %.1f s (%s);", a.Arm, a.WriteStallMS, a.StallWriter, a.StallAtMS/1000, duringStep(a.Events, a.start.Add(time.Duration(a.StallAtMS*float64(time.Millisecond)))))
		for _, w := range a.Writers {
			fmt.Fprintf(os.Stdout, " %s %.0f ms/%d failed of %d", shortName(w.Replica), w.StallMS, w.Failed, w.Writes)
		}
		fmt.Fprintln(os.Stdout)
		for _, w := range a.Watches {
			if w.Breaks+w.Refused > 0 {
				fmt.Fprintf(os.Stdout, "    %s: %d breaks, %d re-watches refused (%d gone), %d missed: %s\n", w.Kind, w.Breaks, w.Refused, w.Gone, w.Missed, strings.Join(w.Errors, "; "))
			}
		}
		printFailures(os.Stdout, a.Samples)
	}
	raw, err := json.MarshalIndent(map[string]any{"control_plane": cp.Name, "from": cp.From, "to": cp.To, "profile": prof.Name, "scale": scale, "timing": profileJSON(prof), "bucket_ms": bucketMS, "arms": arms}, "", " ")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "availability.json"), raw, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := writePNG(filepath.Join(dir, "availability.png"), arms); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "raw samples: %s\ntimeline:    %s\n", filepath.Join(dir, "availability.json"), filepath.Join(dir, "availability.png"))
	for _, a := range arms {
		b.ReportMetric(float64(a.Failed), a.Arm+"-failed")
		b.ReportMetric(a.WriteStallMS, a.Arm+"-stall-ms")
	}
}

// profileJSON is p for the JSON file, durations in milliseconds.
func profileJSON(p Profile) map[string]any {
	return map[string]any{
		"boot_delay_ms": ms(p.BootDelay), "health_interval_ms": ms(p.HealthInterval), "health_timeout_ms": ms(p.HealthTimeout),
		"healthy_threshold": p.HealthyThreshold, "unhealthy_threshold": p.UnhealthyThreshold,
	}
}
