package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/internal/ctxutil"
)

// initialClusterToken is the etcd --initial-cluster-token of every
// hamaster cluster; members of different clusters never share addresses.
const initialClusterToken = "hamaster"

// etcdDir is where etcd keeps its data inside DATA_DIR.
func (c Config) etcdDir() string { return filepath.Join(c.DataDir, "etcd") }

// embedConfig turns c into an embedded etcd configuration.
func (c Config) embedConfig() (*embed.Config, error) {
	peer, err := url.Parse(c.EtcdPeerURL())
	if err != nil {
		return nil, fmt.Errorf("etcd peer URL: %w", err)
	}
	client, err := url.Parse(c.EtcdClientURL())
	if err != nil {
		return nil, fmt.Errorf("etcd client URL: %w", err)
	}
	ec := embed.NewConfig()
	ec.Name = c.Name
	ec.Dir = c.etcdDir()
	ec.ListenPeerUrls = []url.URL{*peer}
	ec.AdvertisePeerUrls = []url.URL{*peer}
	ec.ListenClientUrls = []url.URL{*client}
	ec.AdvertiseClientUrls = []url.URL{*client}
	ec.InitialCluster = c.InitialCluster
	ec.ClusterState = c.InitialClusterState
	ec.InitialClusterToken = initialClusterToken
	ec.StrictReconfigCheck = true
	ec.TickMs = uint(c.EtcdHeartbeat / time.Millisecond)
	ec.ElectionMs = uint(c.EtcdElection / time.Millisecond)
	ec.UnsafeNoFsync = c.EtcdUnsafeNoFsync
	ec.Logger = "zap"
	ec.LogLevel = "warn"
	ec.LogOutputs = []string{embed.StdErrLogOutput}
	if c.EtcdTLS() {
		// Certificates are verified both ways against the CA, and dialers
		// check the server's SANs against the URL as usual. But etcd's
		// extra server-side check that a client certificate's SANs match
		// the connection's source IP is off: on loopback every connection
		// comes from 127.0.0.1 whatever NODE_ADDRESS is, which a real VM's
		// peer traffic (from its own IP) never does.
		ec.ClientTLSInfo.SkipClientSANVerify = true
		ec.PeerTLSInfo.SkipClientSANVerify = true
		ec.ClientTLSInfo.CertFile = c.EtcdServerCert
		ec.ClientTLSInfo.KeyFile = c.EtcdServerKey
		ec.ClientTLSInfo.TrustedCAFile = c.EtcdCACert
		ec.ClientTLSInfo.ClientCertAuth = true
		ec.PeerTLSInfo.CertFile = c.EtcdPeerCert
		ec.PeerTLSInfo.KeyFile = c.EtcdPeerKey
		ec.PeerTLSInfo.TrustedCAFile = c.EtcdCACert
		ec.PeerTLSInfo.ClientCertAuth = true
	}
	return ec, nil
}

// etcdMember runs the embedded etcd member, restarting it with backoff when
// it fails to start or dies (like a crash-looping static pod).
type etcdMember struct {
	name string // the member's name, for errors
	// embedConfig builds the member's configuration for each start.
	embedConfig func() (*embed.Config, error)
	// dial returns the client the apiserver stand-in uses once the member
	// is ready; nil means an in-process client (v3client).
	dial     func(ctx context.Context) (*clientv3.Client, error)
	log      *slog.Logger
	onChange func()

	mu     sync.Mutex
	server *etcdserver.EtcdServer
	client *clientv3.Client // in-process client of server; nil unless running
	state  string
	err    string
}

func newEtcdMember(cfg Config, log *slog.Logger, onChange func()) *etcdMember {
	return &etcdMember{name: cfg.Name, embedConfig: cfg.embedConfig, log: log.With("component", "etcd"), onChange: onChange, state: nodeapi.EtcdStarting}
}

// snapshot returns the state, the last error, and (while running) the
// server and an in-process client of it.
func (m *etcdMember) snapshot() (state, errText string, srv *etcdserver.EtcdServer, cli *clientv3.Client) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state, m.err, m.server, m.client
}

func (m *etcdMember) set(state, errText string, srv *etcdserver.EtcdServer, cli *clientv3.Client) {
	m.mu.Lock()
	changed := m.state != state || m.err != errText
	m.state, m.err, m.server, m.client = state, errText, srv, cli
	m.mu.Unlock()
	if changed {
		m.onChange()
	}
}

// run keeps the member up until ctx is done, then stops it and sets the
// state to nodeapi.EtcdStopped.
func (m *etcdMember) run(ctx context.Context) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 500 * time.Millisecond
	bo.MaxInterval = 10 * time.Second
	for {
		m.set(nodeapi.EtcdStarting, m.lastErr(), nil, nil)
		healthy, err := m.runOnce(ctx)
		if ctx.Err() != nil {
			m.set(nodeapi.EtcdStopped, "", nil, nil)
			return
		}
		if healthy {
			bo.Reset()
		}
		wait := bo.NextBackOff()
		m.log.Error("etcd member stopped; restarting", "err", err, "after", wait)
		m.set(nodeapi.EtcdFailed, err.Error(), nil, nil)
		if !ctxutil.Sleep(ctx, wait) {
			m.set(nodeapi.EtcdStopped, "", nil, nil)
			return
		}
	}
}

func (m *etcdMember) lastErr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// runOnce starts etcd and blocks until it fails or ctx is done. healthy
// reports whether the member became ready before it stopped.
func (m *etcdMember) runOnce(ctx context.Context) (healthy bool, err error) {
	ec, err := m.embedConfig()
	if err != nil {
		return false, err
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return false, fmt.Errorf("start etcd member %s: %w", m.name, err)
	}
	ready := false
	defer func() {
		shutdown := ctx.Err() != nil
		if !ready || shutdown {
			// embed.Etcd.Close waits for the client servers, which wait
			// for the member to be ready or stopping: stop it first or
			// Close hangs while there is no quorum. On shutdown, Stop
			// also hands leadership over if this member leads.
			e.Server.Stop()
		}
		closed := make(chan struct{})
		go func() { e.Close(); close(closed) }()
		if !shutdown {
			<-closed // a restart follows: the listeners must be free
			return
		}
		// Close drains long-lived client streams (watches, lease
		// keep-alives of other clients) for up to etcd's request timeout
		// (7 s with a 1 s election): raft is stopped and the WAL synced
		// already, so a process on its way out does not wait for them.
		t := time.NewTimer(closeGrace)
		defer t.Stop()
		select {
		case <-closed:
		case <-t.C:
			m.log.Warn("etcd still draining client streams; exiting without waiting", "after", closeGrace)
		}
	}()
	select {
	case <-e.Server.ReadyNotify():
		ready = true
	case err := <-e.Err():
		return false, fmt.Errorf("etcd member %s: %w", m.name, orStopped(err))
	case <-e.Server.StopNotify():
		return false, fmt.Errorf("etcd member %s stopped before it was ready", m.name)
	case <-ctx.Done():
		return false, ctx.Err()
	}
	var cli *clientv3.Client
	if m.dial == nil {
		cli = v3client.New(e.Server)
	} else if cli, err = m.dial(ctx); err != nil {
		return false, fmt.Errorf("etcd member %s: client: %w", m.name, err)
	}
	defer cli.Close()
	m.log.Info("etcd member ready", "member_id", e.Server.MemberID().String(), "learner", e.Server.IsLearner())
	m.set(nodeapi.EtcdRunning, "", e.Server, cli)
	select {
	case err := <-e.Err():
		return true, fmt.Errorf("etcd member %s: %w", m.name, orStopped(err))
	case <-e.Server.StopNotify():
		return true, fmt.Errorf("etcd member %s stopped (removed from the cluster, or a fatal error: see its log)", m.name)
	case <-ctx.Done():
		// Hide the client and server before e.Close runs.
		m.set(nodeapi.EtcdStarting, "", nil, nil)
		return true, ctx.Err()
	}
}

// closeGrace bounds how long a stopping node waits for etcd's Close.
const closeGrace = time.Second

func orStopped(err error) error {
	if err == nil {
		return errors.New("stopped")
	}
	return err
}
