// Package lbproxy is the local provider's L4 load balancer: a TCP proxy
// bound to the "static IP" that health-checks each target over HTTPS and
// sends each new connection, round-robin, to a healthy target that is not
// draining.
//
// A parent process starts it as `hamaster-node lb --config F`, edits the
// config with WriteConfig (picked up on SIGHUP or when the file changes)
// and watches the status file.
package lbproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/inetaf/tcpproxy"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/internal/conntrack"
	"github.com/hamaster/hamaster/internal/fsutil"
)

// configPollInterval is how often the config file's mtime is checked.
const configPollInterval = 200 * time.Millisecond

// backend is one target with its health state. Name and Address never
// change; lb.mu guards everything else.
type backend struct {
	Target
	client *http.Client

	healthy     bool
	okStreak    int
	failStreak  int
	lastErr     string
	lastChecked time.Time
	active      int                   // open proxied connections
	checking    bool                  // a health check is in flight
	dsts        map[net.Conn]struct{} // the backend sides of active
}

// lb is a running load balancer: the tcpproxy.Target all connections go to.
type lb struct {
	log        *slog.Logger
	statusFile string          // fixed for the life of Run
	stopCtx    context.Context // done when Run is stopping

	mu       sync.Mutex
	cfg      Config
	pool     *x509.CertPool
	backends []*backend
	next     uint64 // round-robin position
	serving  bool
	statusMu sync.Mutex

	// conns are the client connections (with their handlers) and the
	// target connections proxied.
	conns conntrack.Set
}

// Run binds cfg.Listen and proxies until ctx is done; then it closes the
// listener and the proxied connections, writes a final status and removes
// the pid file. configPath ("" for none) is re-read on SIGHUP and when its
// mtime changes; the listen address cannot change without a restart.
func Run(ctx context.Context, cfg Config, configPath string, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	pool, err := loadCA(cfg.Health.CAFile)
	if err != nil {
		return err
	}
	l := &lb{log: logger.With("lb", cfg.Listen), statusFile: cfg.StatusFile, stopCtx: ctx,
		cfg: cfg, pool: pool}
	l.backends = l.buildBackends(cfg, nil)

	var p tcpproxy.Proxy
	p.AddRoute(cfg.Listen, l)
	if err := p.Start(); err != nil {
		return bindError(cfg.Listen, err)
	}
	l.log.Info("load balancer listening", "targets", len(cfg.Targets))
	if cfg.PIDFile != "" {
		removePID, err := fsutil.WritePIDFile(cfg.PIDFile)
		if err != nil {
			_ = p.Close()
			return fmt.Errorf("write pid file: %w", err)
		}
		defer func() {
			if err := removePID(); err != nil {
				l.log.Warn("remove pid file", "err", err)
			}
		}()
	}
	l.mu.Lock()
	l.serving = true
	l.mu.Unlock()
	l.writeStatus()

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	var wg sync.WaitGroup
	wg.Go(func() { l.healthLoop(ctx) })
	wg.Go(func() { l.watchConfig(ctx, configPath, hup) })

	<-ctx.Done()
	_ = p.Close()
	_ = p.Wait()
	wg.Wait()
	l.conns.Close() // every proxied connection, and their copiers waited for
	l.mu.Lock()
	l.serving = false
	l.mu.Unlock()
	l.writeStatus()
	l.log.Info("load balancer stopped")
	return nil
}

// bindError explains a failed bind.
func bindError(addr string, err error) error {
	hint := ""
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		hint = ": something else is bound to it (another lb, or a replica still holding the static IP); `ss -ltnp` shows who"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		hint = ": the IP is not on this machine (on Linux all of 127.0.0.0/8 is; elsewhere add a loopback alias)"
	case errors.Is(err, syscall.EACCES):
		hint = ": ports below 1024 need privileges"
	}
	return fmt.Errorf("lb cannot listen on %s: %w%s", addr, err, hint)
}

// loadCA reads the PEM CA bundle health checks verify targets with.
func loadCA(path string) (*x509.CertPool, error) {
	pool, err := certs.LoadPool(path)
	if err != nil {
		return nil, fmt.Errorf("health.ca_file: %w", err)
	}
	return pool, nil
}

// buildBackends makes the backend list for cfg, keeping the health state
// of targets in old with the same name and address.
func (l *lb) buildBackends(cfg Config, old []*backend) []*backend {
	byKey := map[string]*backend{}
	for _, b := range old {
		byKey[b.Name+"\x00"+b.Address] = b
	}
	out := make([]*backend, 0, len(cfg.Targets))
	for _, t := range cfg.Targets {
		b := byKey[t.Name+"\x00"+t.Address]
		if b == nil {
			b = &backend{Target: t}
			l.log.Info("target added", "target", t.Name, "address", t.Address, "draining", t.Draining)
		} else if b.Draining != t.Draining {
			l.log.Info("target draining changed", "target", t.Name, "draining", t.Draining)
		}
		delete(byKey, t.Name+"\x00"+t.Address)
		b.Draining = t.Draining // Name and Address never change: lock-free reads
		b.ProbeBlocked = t.ProbeBlocked
		if b.client != nil {
			b.client.CloseIdleConnections()
		}
		b.client = l.healthClient(t.Address, cfg.Health.ServerName, cfg.Health.Timeout.Duration)
		out = append(out, b)
	}
	for _, b := range byKey {
		l.log.Info("target removed", "target", b.Name, "address", b.Address, "open_connections", b.active, "terminated", cfg.TerminateRemoved)
		if cfg.TerminateRemoved {
			for c := range b.dsts {
				_ = c.Close() // the copier then closes the client's side
			}
		}
	}
	return out
}

// healthClient checks one target: TLS verified against the CA with
// serverName (default: the target's IP) as ServerName, a new connection
// per check.
func (l *lb) healthClient(address, serverName string, timeout time.Duration) *http.Client {
	host, _, _ := net.SplitHostPort(address)
	if serverName != "" {
		host = serverName
	}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: l.pool, ServerName: host, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
			DialContext:       (&net.Dialer{Timeout: timeout}).DialContext,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// HandleConn implements tcpproxy.Target: it sends src to the next healthy,
// non-draining target, trying the others if dialing fails (unless
// Config.NoDialRetry), and closes src at once if there is none.
func (l *lb) HandleConn(src net.Conn) {
	if !l.conns.Enter(src) {
		_ = src.Close()
		return
	}
	defer l.conns.Leave(src)
	candidates, timeout := l.pick()
	if len(candidates) == 0 {
		l.log.Debug("no healthy target; closing connection", "client", src.RemoteAddr().String())
		_ = src.Close()
		return
	}
	for _, b := range candidates {
		dctx, cancel := context.WithTimeout(l.stopCtx, timeout)
		dst, err := (&net.Dialer{}).DialContext(dctx, "tcp", b.Address)
		cancel()
		if err != nil {
			l.log.Warn("dial target failed; trying the next", "target", b.Name, "err", err)
			continue
		}
		if !l.attach(b, dst) {
			_ = dst.Close()
			_ = src.Close()
			return
		}
		dp := &tcpproxy.DialProxy{
			Addr: b.Address,
			DialContext: func(context.Context, string, string) (net.Conn, error) {
				return dst, nil
			},
		}
		dp.HandleConn(src) // closes src and dst when either side is done
		l.detach(b, dst)
		return
	}
	l.log.Warn("no target accepted the connection; closing it", "client", src.RemoteAddr().String())
	_ = src.Close()
}

// pick returns the healthy, non-draining targets in round-robin order
// (only the first with Config.NoDialRetry).
func (l *lb) pick() ([]*backend, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ok []*backend
	for _, b := range l.backends {
		if b.healthy && !b.Draining {
			ok = append(ok, b)
		}
	}
	if len(ok) == 0 {
		return nil, 0
	}
	start := int(l.next % uint64(len(ok)))
	l.next++
	order := append(ok[start:len(ok):len(ok)], ok[:start]...)
	if l.cfg.NoDialRetry {
		order = order[:1]
	}
	return order, l.cfg.Health.Timeout.Duration
}

// attach registers the backend side of a proxied connection; false once
// the lb is closing.
func (l *lb) attach(b *backend, dst net.Conn) bool {
	if !l.conns.Add(dst) {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b.active++
	if b.dsts == nil {
		b.dsts = map[net.Conn]struct{}{}
	}
	b.dsts[dst] = struct{}{}
	return true
}

func (l *lb) detach(b *backend, dst net.Conn) {
	l.conns.Remove(dst)
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(b.dsts, dst)
	b.active--
}

// healthLoop checks every target each interval until ctx is done and
// writes the status after every round. Targets are checked independently
// and in parallel: a target whose check is still running (a hung replica,
// up to health.timeout) is skipped for that round instead of delaying the
// others.
func (l *lb) healthLoop(ctx context.Context) {
	var checks sync.WaitGroup
	defer checks.Wait()
	interval := l.interval()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		l.startChecks(ctx, &checks)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		l.writeStatus()
		if iv := l.interval(); iv != interval {
			interval = iv
			tick.Reset(iv)
		}
	}
}

func (l *lb) interval() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cfg.Health.Interval.Duration
}

// startChecks starts a check of every target that has none running.
func (l *lb) startChecks(ctx context.Context, checks *sync.WaitGroup) {
	l.mu.Lock()
	defer l.mu.Unlock()
	path := l.cfg.Health.Path
	for _, b := range l.backends {
		if b.checking {
			continue
		}
		b.checking = true
		client, blocked := b.client, b.ProbeBlocked
		checks.Go(func() {
			var err error
			if blocked != "" {
				err = fmt.Errorf("health check probe blocked: %s", blocked)
			} else {
				err = check(ctx, client, b.Address, path)
			}
			if ctx.Err() == nil {
				l.applyCheck(b, err)
			}
		})
	}
}

// applyCheck records a check's result and applies the thresholds; a
// health change is written to the status at once.
func (l *lb) applyCheck(b *backend, err error) {
	l.mu.Lock()
	b.checking = false
	if !slices.Contains(l.backends, b) {
		l.mu.Unlock()
		return // removed while it was checked
	}
	h := l.cfg.Health
	was := b.healthy
	b.lastChecked = time.Now().UTC()
	if err != nil {
		b.okStreak, b.failStreak, b.lastErr = 0, b.failStreak+1, err.Error()
		if b.healthy && b.failStreak >= h.UnhealthyThreshold {
			b.healthy = false
			l.log.Warn("target unhealthy", "target", b.Name, "err", err)
		}
	} else {
		b.okStreak, b.failStreak, b.lastErr = b.okStreak+1, 0, ""
		if !b.healthy && b.okStreak >= h.HealthyThreshold {
			b.healthy = true
			l.log.Info("target healthy", "target", b.Name)
		}
	}
	changed := b.healthy != was
	l.mu.Unlock()
	if changed {
		l.writeStatus()
	}
}

// check GETs https://address/path; only 200 is healthy.
func check(ctx context.Context, c *http.Client, address, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+address+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, body)
	}
	return nil
}

// watchConfig reloads configPath on SIGHUP and when the file changes.
func (l *lb) watchConfig(ctx context.Context, configPath string, hup <-chan os.Signal) {
	var last os.FileInfo
	if configPath != "" {
		last, _ = os.Stat(configPath)
	}
	tick := time.NewTicker(configPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if configPath == "" {
				l.log.Warn("SIGHUP: no config file to reload")
				continue
			}
			l.log.Info("SIGHUP: reloading config")
			last, _ = os.Stat(configPath)
			l.reload(configPath)
		case <-tick.C:
			if configPath == "" {
				continue
			}
			st, err := os.Stat(configPath)
			if err != nil || (last != nil && os.SameFile(st, last) && st.ModTime().Equal(last.ModTime()) && st.Size() == last.Size()) {
				continue
			}
			last = st
			l.reload(configPath)
		}
	}
}

// reload applies the targets and health settings of the config file,
// keeping the health state of unchanged targets. A broken file is logged
// and ignored.
func (l *lb) reload(path string) {
	cfg, err := LoadConfig(path)
	if err != nil {
		l.log.Error("config reload failed; keeping the running config", "err", err)
		return
	}
	pool, err := loadCA(cfg.Health.CAFile)
	if err != nil {
		l.log.Error("config reload failed; keeping the running config", "err", err)
		return
	}
	l.mu.Lock()
	if cfg.Listen != l.cfg.Listen {
		l.log.Warn("changing the listen address needs a restart; ignoring it", "listen", l.cfg.Listen, "wanted", cfg.Listen)
		cfg.Listen = l.cfg.Listen
	}
	if cfg.StatusFile != l.cfg.StatusFile || cfg.PIDFile != l.cfg.PIDFile {
		l.log.Warn("changing status_file or pid_file needs a restart; ignoring it")
		cfg.StatusFile, cfg.PIDFile = l.cfg.StatusFile, l.cfg.PIDFile
	}
	l.pool = pool
	l.backends = l.buildBackends(cfg, l.backends)
	l.cfg = cfg
	l.mu.Unlock()
	l.log.Info("config reloaded", "targets", len(cfg.Targets))
	l.writeStatus()
}

// status builds the current Status.
func (l *lb) status() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Status{PID: os.Getpid(), Listen: l.cfg.Listen, Serving: l.serving, Targets: []TargetStatus{}, Updated: time.Now().UTC()}
	for _, b := range l.backends {
		s.Targets = append(s.Targets, TargetStatus{
			Name: b.Name, Address: b.Address, Healthy: b.healthy, Draining: b.Draining,
			LastError: b.lastErr, LastChecked: b.lastChecked, ActiveConnections: b.active,
		})
	}
	return s
}

func (l *lb) writeStatus() {
	if l.statusFile == "" {
		return
	}
	l.statusMu.Lock()
	defer l.statusMu.Unlock()
	if err := fsutil.ReplaceJSON(l.statusFile, l.status(), 0o644); err != nil {
		l.log.Error("write status file", "err", err)
	}
}
