package probeload

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hamaster/hamaster/internal/wait"
)

// Clients sends GETs of a URL from three clients until Stop: one opening
// a new connection for each request ("new"), two sharing kept-alive
// connections ("kept-alive": Go's transport, as client-go's, retries a
// request on a reused connection that the server closed before
// answering on a new one). Unlike Load it keeps every failure with its
// times, so that a test can tell the failures of one moment from the
// rest, and counts the connections the kept-alive clients opened.
type Clients struct {
	mu     sync.Mutex
	n      int
	fails  []Failure
	dials  atomic.Int64
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// The kinds of client Drive (and so Clients) sends with.
const (
	KindNew       = "new"        // a new connection for each request
	KindKeptAlive = "kept-alive" // kept-alive connections
)

// Failure is one failed request.
type Failure struct {
	From time.Time // the request's start
	At   time.Time // its failure
	Kind string    // "new" or "kept-alive"
	Err  error
}

func (f Failure) String() string {
	return fmt.Sprintf("%s–%s %s: %v", f.From.Format("15:04:05.000"), f.At.Format("15:04:05.000"), f.Kind, f.Err)
}

// StartClients starts the clients on url, trusting tlsCfg. Each waits
// pace before each request (a request that takes longer delays the
// next); with pace 0 they send without pause.
func StartClients(ctx context.Context, url string, tlsCfg *tls.Config, pace time.Duration) *Clients {
	ctx, cancel := context.WithCancel(ctx)
	l := &Clients{cancel: cancel}
	Drive(ctx, &l.wg, tlsCfg, pace, &l.dials, func(kind string, c *http.Client) {
		from := time.Now()
		err := Get(ctx, c, url)
		if ctx.Err() != nil {
			return // a request cut by Stop is not a failure
		}
		l.mu.Lock()
		l.n++
		if err != nil {
			l.fails = append(l.fails, Failure{from, time.Now(), kind, err})
		}
		l.mu.Unlock()
	})
	return l
}

// Drive starts, in wg, the three clients Clients has, trusting tlsCfg:
// one opening a new connection for each request (KindNew), two sharing
// kept-alive connections (KindKeptAlive), whose dials it counts
// in dials. Each calls send with its kind and HTTP client once every
// pace (a send that takes longer delays the next; 0: without pause)
// until ctx ends; send makes and records the request.
func Drive(ctx context.Context, wg *sync.WaitGroup, tlsCfg *tls.Config, pace time.Duration, dials *atomic.Int64, send func(kind string, c *http.Client)) {
	fresh := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}}
	kept := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, MaxIdleConnsPerHost: 2,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}}
	for i, c := range []*http.Client{fresh, kept, kept} {
		kind := map[bool]string{true: KindNew, false: KindKeptAlive}[i == 0]
		wg.Go(func() {
			var tick <-chan time.Time
			if pace > 0 {
				t := time.NewTicker(pace)
				defer t.Stop()
				tick = t.C
			}
			for ctx.Err() == nil {
				if tick != nil {
					select {
					case <-ctx.Done():
						return
					case <-tick:
					}
				}
				send(kind, c)
			}
		})
	}
}

// Count is the number of requests made so far.
func (l *Clients) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// Await waits up to bound until n requests have been made (progress,
// not time).
func (l *Clients) Await(ctx context.Context, n int, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	return wait.Until(ctx, 10*time.Millisecond, fmt.Sprintf("%d requests", n), func() (bool, error) { return l.Count() >= n, nil })
}

// FailuresByKind counts the failures so far by client kind ("new",
// "kept-alive").
func (l *Clients) FailuresByKind() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	kinds := map[string]int{}
	for _, f := range l.fails {
		kinds[f.Kind]++
	}
	return kinds
}

// Stop ends the clients and returns the number of requests, the failed
// ones and the connections the kept-alive clients opened.
func (l *Clients) Stop() (n int, fails []Failure, dials int64) {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n, l.fails, l.dials.Load()
}
