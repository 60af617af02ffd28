package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Sample is one request of the load generator.
type Sample struct {
	AtMS      float64 `json:"at_ms"`
	Kind      string  `json:"kind"` // readyz | kv-put | kv-get
	OK        bool    `json:"ok"`
	LatencyMS float64 `json:"latency_ms"`
	Error     string  `json:"error,omitempty"`
}

// Marker is a workflow step (or a naive restart) on the timeline.
type Marker struct {
	AtMS  float64 `json:"at_ms"`
	Label string  `json:"label"`
}

// loadGen drives a steady request rate through the endpoint: each tick a
// GET /readyz, a PUT /kv/<n> and a GET of it, each on a new connection (as
// new clients would arrive), so the LB's routing decisions are exercised.
type loadGen struct {
	client  *http.Client
	base    string
	start   time.Time
	mu      sync.Mutex
	samples []Sample
}

func newLoadGen(base string, tlsCfg *tls.Config, start time.Time) *loadGen {
	return &loadGen{
		client: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}},
		base:   base, start: start,
	}
}

func (g *loadGen) do(ctx context.Context, kind, method, path string, body []byte, want []byte) {
	t0 := time.Now()
	req, err := http.NewRequestWithContext(ctx, method, g.base+path, bytes.NewReader(body))
	var got []byte
	if err == nil {
		var resp *http.Response
		resp, err = g.client.Do(req)
		if err == nil {
			got, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(got))
			} else if want != nil && !bytes.Equal(got, want) {
				err = fmt.Errorf("read %q, wrote %q", got, want)
			}
		}
	}
	if ctx.Err() != nil {
		return // the run ended mid-request: not a sample
	}
	s := sampleOf(g.start, kind, t0, err)
	g.mu.Lock()
	g.samples = append(g.samples, s)
	g.mu.Unlock()
}

// sampleOf is the sample of a request of kind sent at t0 (start: the
// run's) that ended now with err.
func sampleOf(start time.Time, kind string, t0 time.Time, err error) Sample {
	s := Sample{AtMS: ms(t0.Sub(start)), Kind: kind, OK: err == nil, LatencyMS: ms(time.Since(t0))}
	if err != nil {
		s.Error = err.Error()
	}
	return s
}

// run issues a tick every interval until ctx ends (bounded by maxTicks).
func (g *loadGen) run(ctx context.Context, interval time.Duration, maxTicks int) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var wg sync.WaitGroup
	for i := 0; i < maxTicks; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tick.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.do(ctx, "readyz", http.MethodGet, "/readyz", nil, nil)
			key := fmt.Sprintf("/kv/bench-%d", i)
			val := []byte(fmt.Sprintf("v%d", i))
			g.do(ctx, "kv-put", http.MethodPut, key, val, nil)
			g.do(ctx, "kv-get", http.MethodGet, key, nil, val)
		}()
	}
	wg.Wait()
}

// probe calls /readyz every interval until ctx ends.
func (g *loadGen) probe(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var wg sync.WaitGroup
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tick.C:
		}
		wg.Go(func() { g.do(ctx, "readyz", http.MethodGet, "/readyz", nil, nil) })
	}
}

// etcdWriter writes to etcd continuously and records when writes succeed.
type etcdWriter struct {
	cli   *clientv3.Client
	start time.Time
	oks   []time.Time
	fails int
}

func (w *etcdWriter) run(ctx context.Context, maxWrites int) {
	for i := 0; i < maxWrites && ctx.Err() == nil; i++ {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := w.cli.Put(wctx, "/bench/writer", fmt.Sprint(i))
		cancel()
		if err == nil {
			w.oks = append(w.oks, time.Now())
		} else if ctx.Err() == nil {
			w.fails++
		}
	}
}

// longestStall is the longest time between two successful writes (or
// between the start/end of the window and the first/last write).
func (w *etcdWriter) longestStall(from, to time.Time) time.Duration {
	prev := from
	var longest time.Duration
	for _, t := range w.oks {
		if t.Before(from) {
			continue
		}
		if d := t.Sub(prev); d > longest {
			longest = d
		}
		prev = t
	}
	if d := to.Sub(prev); d > longest {
		longest = d
	}
	return longest
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// percentile of latencies of successful samples.
func percentile(samples []Sample, p float64) float64 {
	var l []float64
	for _, s := range samples {
		if s.OK {
			l = append(l, s.LatencyMS)
		}
	}
	if len(l) == 0 {
		return 0
	}
	sort.Float64s(l)
	i := int(p / 100 * float64(len(l)-1))
	return l[i]
}

// longestFailRun is the longest run of consecutive failed samples (in the
// order they started, with no success between), from the start of its
// first to the end of its last, in milliseconds.
func longestFailRun(samples []Sample) float64 {
	ss := append([]Sample(nil), samples...)
	sort.SliceStable(ss, func(i, j int) bool { return ss[i].AtMS < ss[j].AtMS })
	var longest, from, to float64
	in := false
	for _, s := range ss {
		if s.OK {
			in = false
			continue
		}
		if !in {
			in, from, to = true, s.AtMS, s.AtMS+s.LatencyMS
		} else {
			to = max(to, s.AtMS+s.LatencyMS)
		}
		longest = max(longest, to-from)
	}
	return longest
}

// printFailures writes a summary of the failed samples: how many of each
// error (the first 4 kinds), so a table's count can be read.
func printFailures(w io.Writer, samples []Sample) {
	count := map[string]int{}
	for _, s := range samples {
		if !s.OK {
			e := s.Error
			if len(e) > 120 {
				e = e[:120]
			}
			count[s.Kind+": "+e]++
		}
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return count[keys[i]] > count[keys[j]] })
	for _, k := range keys[:min(4, len(keys))] {
		fmt.Fprintf(w, "    %d × %s\n", count[k], k)
	}
}
