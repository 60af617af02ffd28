// Package probeload is the load tests run against an apiserver endpoint
// while hamaster changes the control plane behind it: GETs of a path
// (/readyz) on new connections (what a fresh client, or one whose
// connection the change closed, sees) and on one kept-alive connection
// (what controllers and kubectl's long-lived clients see), counted until
// Stop. It measures what clients see; it never retries.
package probeload

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Result counts one connection kind's requests.
type Result struct {
	Requests, Failed int
	// Errors holds the first few failures, with the time they happened.
	Errors []string
}

// Load runs until Stop.
type Load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	res    map[string]*Result
}

// Start sends GET url every interval on new connections and on a
// kept-alive one, trusting tlsCfg.
func Start(ctx context.Context, url string, tlsCfg *tls.Config, interval time.Duration) *Load {
	ctx, cancel := context.WithCancel(ctx)
	l := &Load{cancel: cancel, res: map[string]*Result{"new": {}, "kept-alive": {}}}
	clients := map[string]*http.Client{
		"new":        {Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}},
		"kept-alive": {Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, MaxIdleConnsPerHost: 1}},
	}
	for kind, c := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				err := Get(ctx, c, url)
				if ctx.Err() != nil {
					return // a request cut by Stop is not the change's
				}
				l.record(kind, err)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	return l
}

// Get makes one GET of url with c: an error for a failed request or any
// status but 200 (with the start of the body).
func Get(ctx context.Context, c *http.Client, url string) error {
	return GetJSON(ctx, c, url, nil)
}

// GetJSON is Get that also decodes a 200 answer's body into v (unless
// v is nil).
func GetJSON(ctx context.Context, c *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	if v == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 512))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

func (l *Load) record(kind string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.res[kind]
	r.Requests++
	if err != nil {
		r.Failed++
		if len(r.Errors) < 5 {
			r.Errors = append(r.Errors, time.Now().Format("15:04:05.000")+" "+err.Error())
		}
	}
}

// Stop ends the load and returns its results by connection kind ("new",
// "kept-alive").
func (l *Load) Stop() map[string]Result {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]Result{}
	for k, r := range l.res {
		out[k] = *r
	}
	return out
}

// Failed is the total of failed requests in results.
func Failed(results map[string]Result) int {
	n := 0
	for _, r := range results {
		n += r.Failed
	}
	return n
}
