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
	"github.com/hamaster/hamaster/providers/local/localtest"
	"github.com/hamaster/hamaster/workflows"
)

// markerSink turns workflow step starts into timeline markers.
type markerSink struct {
	start   time.Time
	markers *[]Marker
}

func (m markerSink) Event(e workflows.Event) {
	if e.State == "info" && strings.HasPrefix(e.Message, "upgrading ") {
		*m.markers = append(*m.markers, Marker{AtMS: ms(time.Since(m.start)), Label: "drain+recreate " + shortName(strings.TrimPrefix(e.Message, "upgrading "))})
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

// runArm builds a fresh 3-replica cluster and measures one arm.
func runArm(b *testing.B, arm string, upgrade func(ctx context.Context, e *workflows.Deps, markers *[]Marker, start time.Time) error) *ArmResult {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	name := "bench-" + arm
	c := localtest.Up(b, name, localtest.Options{})
	d := &workflows.Deps{Provider: c.Provider, Cluster: name, StateDir: c.Settings.StateDir, Sink: workflows.Discard{}, Out: os.Stderr, Holder: "bench"}
	for i := 1; i <= 2; i++ {
		wf := workflows.AddReplica(d, workflows.AddParams{Name: fmt.Sprintf("%s-master-%03d", name, i), Timeout: time.Minute})
		if err := workflows.Execute(ctx, d, wf, workflows.Options{}); err != nil {
			b.Fatalf("%s: grow to 3: %v", arm, err)
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
	go func() { gen.run(loadCtx, 20*time.Millisecond, 50*300); done <- struct{}{} }()
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
	return r
}

// BenchmarkRollingUpgradeAvailability runs both arms once per iteration
// (run it with -benchtime 1x) and writes bench-results/availability.{json,png}.
func BenchmarkRollingUpgradeAvailability(b *testing.B) {
	for i := 0; i < b.N; i++ {
		hm := runArm(b, "hamaster", func(ctx context.Context, d *workflows.Deps, markers *[]Marker, start time.Time) error {
			d.Sink = markerSink{start: start, markers: markers}
			wf := workflows.RollingUpgrade(d, workflows.UpgradeParams{Version: version, Strategy: workflows.StrategyRecreate, DrainGrace: time.Second, HealthTimeout: time.Minute}, 3)
			return workflows.Execute(ctx, d, wf, workflows.Options{})
		})
		naive := runArm(b, "naive", func(ctx context.Context, d *workflows.Deps, markers *[]Marker, start time.Time) error {
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
					return err
				}
			}
			return nil
		})
		report(b, hm, naive)
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

func report(b *testing.B, hm, naive *ArmResult) {
	dir := os.Getenv("HAMASTER_BENCH_DIR")
	if dir == "" {
		dir = filepath.Join("..", "bench-results")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "metric\thamaster\tnaive\thamaster/naive\t")
	row := func(name string, a, n float64, f string) {
		fmt.Fprintf(tw, "%s\t"+f+"\t"+f+"\t%s\t\n", name, a, n, ratio(a, n))
	}
	row("total requests", float64(hm.Total), float64(naive.Total), "%.0f")
	row("failed requests", float64(hm.Failed), float64(naive.Failed), "%.0f")
	row("failed requests %", 100*float64(hm.Failed)/float64(max(hm.Total, 1)), 100*float64(naive.Failed)/float64(max(naive.Total, 1)), "%.2f")
	row("p50 latency ms", hm.P50MS, naive.P50MS, "%.1f")
	row("p99 latency ms", hm.P99MS, naive.P99MS, "%.1f")
	row("longest etcd write stall ms", hm.WriteStallMS, naive.WriteStallMS, "%.0f")
	row("etcd writer failed writes", float64(hm.WriterFails), float64(naive.WriterFails), "%.0f")
	row("upgrade wall time s", hm.WallMS/1000, naive.WallMS/1000, "%.1f")
	tw.Flush()
	fmt.Fprintf(os.Stdout, "\nrolling upgrade of 3 replicas under load (one run):\n%s", sb.String())
	raw, err := json.MarshalIndent(map[string]any{"version": version, "bucket_ms": bucketMS, "arms": []*ArmResult{hm, naive}}, "", " ")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "availability.json"), raw, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := writePNG(filepath.Join(dir, "availability.png"), []*ArmResult{hm, naive}); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "raw samples: %s\ntimeline:    %s\n", filepath.Join(dir, "availability.json"), filepath.Join(dir, "availability.png"))
	b.ReportMetric(float64(hm.Failed), "hamaster-failed")
	b.ReportMetric(float64(naive.Failed), "naive-failed")
	b.ReportMetric(hm.WriteStallMS, "hamaster-stall-ms")
	b.ReportMetric(naive.WriteStallMS, "naive-stall-ms")
}
