package bench

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/testbed/local/localtest"
	"github.com/hamaster/hamaster/workflows"
)

// markerSink turns workflow step starts into timeline markers.
type markerSink struct {
	start   time.Time
	markers *[]Marker
}

func (m markerSink) Event(e workflows.Event) {
	if e.State != "info" {
		return
	}
	switch {
	case strings.HasPrefix(e.Message, "upgrading "):
		*m.markers = append(*m.markers, Marker{AtMS: ms(time.Since(m.start)), Label: "drain+recreate " + shortName(strings.TrimPrefix(e.Message, "upgrading "))})
	case strings.HasPrefix(e.Message, "surge: adding "):
		// "surge: adding <new> at <version> before removing <old>"
		f := strings.Fields(e.Message)
		*m.markers = append(*m.markers, Marker{AtMS: ms(time.Since(m.start)), Label: "surge for " + shortName(f[len(f)-1])})
	}
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
	version  = "v1.31.0"
)

// threeReplicas builds a fresh 3-replica local cluster with the profile's
// timing (none for instant: the provider's defaults), and returns it with
// its workflow deps, its CA and an etcd client the caller closes.
func threeReplicas(ctx context.Context, b *testing.B, prof Profile, name string) (*localtest.Cluster, *workflows.Deps, *certs.CA, *etcdmember.Client) {
	b.Helper()
	var opts map[string]string
	if prof.Name != "instant" {
		opts = prof.ProviderOptions()
	}
	c := localtest.Up(b, name, localtest.Options{ProviderOptions: opts})
	d := &workflows.Deps{Provider: c.Provider, Cluster: name, StateDir: c.Settings.StateDir, Sink: workflows.Discard{}, Out: os.Stderr, Holder: "bench"}
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

// runArm builds a fresh 3-replica cluster with the profile's timing and
// measures one arm.
func runArm(b *testing.B, prof Profile, arm string, upgrade func(ctx context.Context, e *workflows.Deps, markers *[]Marker, start time.Time) error) *ArmResult {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+10*prof.StepTimeout())
	defer cancel()
	c, d, ca, ecli := threeReplicas(ctx, b, prof, "bench-"+arm)
	defer ecli.Close()

	start := time.Now()
	loadCtx, stopLoad := context.WithCancel(ctx)
	// /kv needs a client certificate signed by the cluster CA.
	client, err := ca.IssueClient("bench-load", nil, certs.ECDSA)
	if err != nil {
		b.Fatal(err)
	}
	clientCert, err := client.TLSCertificate()
	if err != nil {
		b.Fatal(err)
	}
	gen := newLoadGen(fmt.Sprintf("https://%s:6443", c.Provider.Info().StaticIP), &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{clientCert}}, start)
	writer := &etcdWriter{cli: ecli.Raw(), start: start}
	done := make(chan struct{}, 2)
	go func() { gen.run(loadCtx, 20*time.Millisecond, 1<<30); done <- struct{}{} }()
	go func() { writer.run(loadCtx, 1_000_000); done <- struct{}{} }()

	time.Sleep(warmup) // steady load before the upgrade: part of what is measured, not synchronisation
	var markers []Marker
	t0 := time.Now()
	markers = append(markers, Marker{AtMS: ms(t0.Sub(start)), Label: arm + " starts"})
	uerr := upgrade(ctx, d, &markers, start)
	wall := time.Since(t0)
	markers = append(markers, Marker{AtMS: ms(time.Since(start)), Label: arm + " done"})
	time.Sleep(cooldown)
	end := time.Now()
	stopLoad()
	<-done
	<-done
	if uerr != nil {
		b.Fatalf("%s arm: %v", arm, uerr)
	}
	r := &ArmResult{Arm: arm, Samples: gen.samples, Markers: markers, WallMS: ms(wall), WriteStallMS: ms(writer.longestStall(start, end)), WriterFails: writer.fails}
	r.Total = len(r.Samples)
	for _, s := range r.Samples {
		if !s.OK {
			r.Failed++
		}
	}
	r.P50MS, r.P99MS = percentile(r.Samples, 50), percentile(r.Samples, 99)
	r.LongestFailRunMS = longestFailRun(r.Samples)
	return r
}

// BenchmarkRollingUpgradeAvailability runs the three arms once per
// iteration (run it with -benchtime 1x) on identical fresh clusters with
// the timing profile HAMASTER_BENCH_PROFILE (instant, gce, aws) scaled by
// HAMASTER_BENCH_SCALE, and writes bench-results/availability.{json,png}.
func BenchmarkRollingUpgradeAvailability(b *testing.B) {
	prof, scale, err := profileFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	hamaster := func(strategy string) func(ctx context.Context, d *workflows.Deps, markers *[]Marker, start time.Time) error {
		return func(ctx context.Context, d *workflows.Deps, markers *[]Marker, start time.Time) error {
			d.Sink = markerSink{start: start, markers: markers}
			wf := workflows.RollingUpgrade(d, workflows.UpgradeParams{Version: version, Strategy: strategy, DrainGrace: time.Second, HealthTimeout: prof.StepTimeout()}, 3)
			return workflows.Execute(ctx, d, wf, workflows.Options{})
		}
	}
	for i := 0; i < b.N; i++ {
		recreate := runArm(b, prof, "hamaster-recreate", hamaster(workflows.StrategyRecreate))
		surge := runArm(b, prof, "hamaster-surge", hamaster(workflows.StrategySurge))
		naive := runArm(b, prof, "naive", func(ctx context.Context, d *workflows.Deps, markers *[]Marker, start time.Time) error {
			// kube-up style: restart each replica in place, in name order:
			// no drain, no leader move, no health gate.
			rs, err := d.Provider.Instances().List(ctx)
			if err != nil {
				return err
			}
			for _, r := range rs {
				*markers = append(*markers, Marker{AtMS: ms(time.Since(start)), Label: "restart " + shortName(r.Name)})
				t := r.Template.Clone()
				t.Version = version
				if _, err := d.Provider.Instances().Recreate(ctx, r.Name, t); err != nil {
					return fmt.Errorf("restart %s: %w", r.Name, err)
				}
			}
			return nil
		})
		report(b, prof, scale, []*ArmResult{recreate, surge, naive})
	}
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
func report(b *testing.B, prof Profile, scale float64, arms []*ArmResult) {
	dir := os.Getenv("HAMASTER_BENCH_DIR")
	if dir == "" {
		dir = filepath.Join("..", "bench-results")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	naive := arms[len(arms)-1]
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 4, 2, ' ', tabwriter.AlignRight)
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
	row("longest failure run s", "%.2f", func(a *ArmResult) float64 { return a.LongestFailRunMS / 1000 })
	row("p50 latency ms", "%.1f", func(a *ArmResult) float64 { return a.P50MS })
	row("p99 latency ms", "%.1f", func(a *ArmResult) float64 { return a.P99MS })
	row("longest etcd write stall ms", "%.0f", func(a *ArmResult) float64 { return a.WriteStallMS })
	row("etcd writer failed writes", "%.0f", func(a *ArmResult) float64 { return float64(a.WriterFails) })
	row("upgrade wall time s", "%.1f", func(a *ArmResult) float64 { return a.WallMS / 1000 })
	tw.Flush()
	fmt.Fprintf(os.Stdout, "\nrolling upgrade of 3 replicas under load (one run), profile %s at scale %g (%+v):\n%s", prof.Name, scale, prof, sb.String())
	raw, err := json.MarshalIndent(map[string]any{"version": version, "profile": prof.Name, "scale": scale, "timing": profileJSON(prof), "bucket_ms": bucketMS, "arms": arms}, "", " ")
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
