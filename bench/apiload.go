package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// apiLoad drives the Kubernetes API through the endpoint as a cluster's
// clients do: each tick a ConfigMap create and a read of it, once on a new
// connection (a new client, so the LB picks a backend) and once on a
// kept-alive one (a controller's long-lived client, which stays on its
// backend until that backend closes the connection); and watches on the
// ConfigMaps, which must see every create that succeeded.
type apiLoad struct {
	base      string
	fresh     *http.Client   // a new connection per request
	kept      []*http.Client // kept-alive clients, one connection each
	watcher   *http.Client   // no overall timeout: watches are long
	start     time.Time
	namespace string

	mu      sync.Mutex
	samples []Sample
	created map[string]time.Time // ConfigMaps whose create succeeded, and when
	watches []*watchStats
}

// watchStats is what one watcher saw.
type watchStats struct {
	Kind   string `json:"kind"`
	Breaks int    `json:"breaks"`
	// Errors are why each stream ended (the first few).
	Errors []string `json:"errors,omitempty"`
	// Refused counts re-watches the apiserver refused (a 429 from one
	// shutting down: the client retries); Gone those refused with 410
	// Gone (the resource version fell out of its window: a relist).
	Refused int `json:"refused"`
	Gone    int `json:"gone"`
	// Missed counts ConfigMaps created successfully (well before the
	// end) that this watch never saw.
	Missed int `json:"missed"`
	seen   map[string]bool
}

// keptClients is how many kept-alive clients the load has: each keeps one
// connection, which the LB gave to some replica when it was opened.
const keptClients = 6

func newAPILoad(base string, tlsCfg *tls.Config, start time.Time) *apiLoad {
	var kept []*http.Client
	for range keptClients {
		kept = append(kept, &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, MaxConnsPerHost: 1}})
	}
	return &apiLoad{
		base:      base,
		fresh:     &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}},
		kept:      kept,
		watcher:   &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}},
		start:     start,
		namespace: "default",
		created:   map[string]time.Time{},
	}
}

func (g *apiLoad) do(ctx context.Context, c *http.Client, kind, method, path string, body []byte, want int, check func([]byte) error) bool {
	t0 := time.Now()
	var err error
	for try := 0; ; try++ {
		var retryAfter time.Duration
		retryAfter, err = g.once(ctx, c, method, path, body, want, check)
		// A 429 with Retry-After (an apiserver shutting down, or its
		// priority and fairness) is retried after that delay, as
		// client-go's rest client does (up to 10 times there; 3 here).
		if retryAfter == 0 || try == 3 {
			break
		}
		t := time.NewTimer(retryAfter)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	if ctx.Err() != nil {
		return false // the run ended mid-request: not a sample
	}
	s := sampleOf(g.start, kind, t0, err)
	g.mu.Lock()
	g.samples = append(g.samples, s)
	g.mu.Unlock()
	return err == nil
}

// once sends one request; a 429 with a Retry-After header returns the
// delay to retry after (capped at 1 s, as a shutting-down apiserver asks
// for a few seconds while the LB has long sent new connections elsewhere).
func (g *apiLoad) once(ctx context.Context, c *http.Client, method, path string, body []byte, want int, check func([]byte) error) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, method, g.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	got, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "":
		secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return min(max(time.Duration(secs)*time.Second, 100*time.Millisecond), time.Second), fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(got))
	case resp.StatusCode != want:
		return 0, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(got))
	case check != nil:
		return 0, check(got)
	}
	return 0, nil
}

// createAndRead creates ConfigMap name and reads it back through c.
func (g *apiLoad) createAndRead(ctx context.Context, c *http.Client, conn, name string) {
	body, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]string{"name": name},
		"data":     map[string]string{"v": name},
	})
	coll := "/api/v1/namespaces/" + g.namespace + "/configmaps"
	if !g.do(ctx, c, "create-"+conn, http.MethodPost, coll, body, http.StatusCreated, nil) {
		return
	}
	g.mu.Lock()
	g.created[name] = time.Now()
	g.mu.Unlock()
	g.do(ctx, c, "get-"+conn, http.MethodGet, coll+"/"+name, nil, http.StatusOK, func(b []byte) error {
		var cm struct {
			Data map[string]string `json:"data"`
		}
		if err := json.Unmarshal(b, &cm); err != nil {
			return fmt.Errorf("configmap %s: %w", name, err)
		}
		if cm.Data["v"] != name {
			return fmt.Errorf("configmap %s reads %q", name, cm.Data["v"])
		}
		return nil
	})
}

// run issues a tick every interval until ctx ends.
func (g *apiLoad) run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tick.C:
		}
		wg.Go(func() { g.createAndRead(ctx, g.fresh, "new-conn", fmt.Sprintf("bench-n-%d", i)) })
		wg.Go(func() { g.createAndRead(ctx, g.kept[i%len(g.kept)], "keepalive", fmt.Sprintf("bench-k-%d", i)) })
	}
}

// resourceVersion lists the ConfigMaps once, for the watches to start at.
func (g *apiLoad) resourceVersion(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.base+"/api/v1/namespaces/"+g.namespace+"/configmaps?limit=1", nil)
	if err != nil {
		return "", err
	}
	resp, err := g.kept[0].Do(req)
	if err != nil {
		return "", fmt.Errorf("list configmaps: %w", err)
	}
	defer resp.Body.Close()
	var l struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("list configmaps: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return "", fmt.Errorf("list configmaps: %w", err)
	}
	return l.Metadata.ResourceVersion, nil
}

// watch keeps a watch on the ConfigMaps open from rv until ctx ends,
// counting each time the stream ends under it (a break) and resuming from
// the last resource version it saw, as client-go's reflector does.
func (g *apiLoad) watch(ctx context.Context, kind, rv string) {
	st := &watchStats{Kind: kind, seen: map[string]bool{}}
	g.mu.Lock()
	g.watches = append(g.watches, st)
	g.mu.Unlock()
	retry := time.NewTicker(100 * time.Millisecond)
	defer retry.Stop()
	for ctx.Err() == nil {
		next, established, err := g.watchOnce(ctx, rv, st)
		if ctx.Err() != nil {
			return
		}
		g.mu.Lock()
		if established {
			st.Breaks++
		} else {
			st.Refused++
		}
		if len(st.Errors) < 8 {
			st.Errors = append(st.Errors, fmt.Sprintf("%.1fs: %v", time.Since(g.start).Seconds(), err))
		}
		gone := strings.Contains(fmt.Sprint(err), "410") || strings.Contains(fmt.Sprint(err), "Expired")
		if gone {
			st.Gone++
		}
		g.mu.Unlock()
		if next != "" {
			rv = next
		}
		if gone { // relist, as a reflector does: events in between are not seen as such
			if r, err := g.resourceVersion(ctx); err == nil {
				rv = r
			}
		}
		select { // a client's backoff before it watches again
		case <-ctx.Done():
			return
		case <-retry.C:
		}
	}
}

// watchOnce runs one watch stream and returns the last resource version
// seen, whether the stream was established (a 200) and why it ended.
func (g *apiLoad) watchOnce(ctx context.Context, rv string, st *watchStats) (string, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/api/v1/namespaces/%s/configmaps?watch=1&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=3600", g.base, g.namespace, rv), nil)
	if err != nil {
		return "", false, err
	}
	resp, err := g.watcher.Do(req)
	if err != nil {
		return "", false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return "", false, fmt.Errorf("watch: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	dec := json.NewDecoder(resp.Body)
	last := ""
	for {
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Code     int    `json:"code"`
				Message  string `json:"message"`
				Metadata struct {
					Name            string `json:"name"`
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			} `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if err == io.EOF {
				err = fmt.Errorf("watch stream closed by the server")
			}
			return last, true, err
		}
		if ev.Type == "ERROR" {
			return "", true, fmt.Errorf("watch error %d: %s", ev.Object.Code, ev.Object.Message)
		}
		last = ev.Object.Metadata.ResourceVersion
		if ev.Type == "ADDED" {
			g.mu.Lock()
			st.seen[ev.Object.Metadata.Name] = true
			g.mu.Unlock()
		}
	}
}

// watchResults are the watches' stats, each with the ConfigMaps created
// successfully before cutoff that it never saw (call after the watches
// ended).
func (g *apiLoad) watchResults(cutoff time.Time) []watchStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []watchStats
	for _, w := range g.watches {
		for name, at := range g.created {
			if at.Before(cutoff) && !w.seen[name] {
				w.Missed++
			}
		}
		out = append(out, *w)
	}
	return out
}
